// The boxed fallback for every ATen op without an explicit openreg kernel.
//
// Asynchronous path: when the op has a Meta kernel and returns only
// tensors, the client runs the Meta kernel to learn the output shapes,
// allocates the outputs on the device and enqueues the op; the host does
// not wait. View ops (outputs that alias an input) never leave the client:
// their metadata comes from the Meta kernel. Otherwise (data-dependent
// shapes, non-tensor results, Meta kernel missing or failing) the op runs
// synchronously and the daemon returns the outputs it allocated.
#include "torch_backend/kernels/remote_fallback.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "data_plane/tensor_extent.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/graphs/capture_registry.h"
#include "torch_backend/hooks.h"
#include "torch_backend/kernel_warnings.h"
#include "torch_backend/kernels/blocked_ops.h"
#include "torch_backend/kernels/cpp_meta_kernels.h"
#include "torch_backend/kernels/meta_cache.h"
#include "torch_backend/kernels/output_layout.h"
#include "torch_backend/kernels/remote_launch.h"
#include "torch_backend/kernels/sparse_ops.h"
#include "torch_backend/op_encoding.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// An op's results, in inline storage: most ops have one or two, and the
// per-op path allocates nothing it can avoid.
using OpResults = c10::SmallVector<c10::IValue, 2>;

// The argument of an op that may hold CPU index tensors next to device
// tensors, as on CUDA (`indices` of index and index_put); -1 for others.
int HostIndicesArgument(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  if (name != "aten::index" && name != "aten::index_put_" &&
      name != "aten::_index_put_impl_" && name != "aten::index_put") {
    return -1;
  }
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "indices") return static_cast<int>(i);
  }
  return -1;
}

bool ReturnsOnlyTensors(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    const c10::TypePtr& type = ret.real_type();
    const bool tensor = type->kind() == c10::TypeKind::TensorType;
    const bool tensor_list =
        type->kind() == c10::TypeKind::ListType &&
        type->containedType(0)->kind() == c10::TypeKind::TensorType;
    if (!tensor && !tensor_list) return false;
  }
  return true;
}

bool ReturnsAView(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite())
      return true;
  }
  return false;
}

// Index of the argument that a return aliases (same alias set).
std::optional<size_t> AliasedArgument(const c10::FunctionSchema& schema,
                                      const c10::AliasInfo& alias) {
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* candidate = schema.arguments()[i].alias_info();
    if (candidate != nullptr && candidate->beforeSets() == alias.beforeSets()) {
      return i;
    }
  }
  return std::nullopt;
}

// What the fallback needs to know about an op's schema, worked out at its
// first call instead of on every call.
struct OpPlan {
  // The operator planned for: a schema's address can be reused by another
  // operator once a Python library that registered one is destroyed.
  c10::OperatorName name{"", ""};
  // See HostIndicesArgument.
  int host_indices_argument = -1;
  // Per argument: the op writes to it (in place, out=). A CPU tensor is
  // never accepted there: nothing is written to client memory.
  std::vector<bool> written;
  // The tensors and tensor lists an in-place op writes (written, but not
  // out=).
  std::vector<size_t> written_in_place;
  bool returns_only_tensors = false;
  // The Meta kernel's output metadata can be used (see output_layout.h).
  bool meta_usable = false;
  bool returns_view = false;
  // Per return: its alias annotation and the argument it aliases.
  std::vector<const c10::AliasInfo*> return_alias;
  std::vector<std::optional<size_t>> aliased_argument;
  MetaKeyTraits meta_key_traits;
};

OpPlan MakePlan(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  OpPlan plan;
  plan.name = op.operator_name();
  plan.host_indices_argument = HostIndicesArgument(op);
  for (const c10::Argument& argument : schema.arguments()) {
    plan.written.push_back(argument.alias_info() != nullptr &&
                           argument.alias_info()->isWrite());
    const c10::TypePtr& type = argument.type();
    const bool tensors =
        type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::ListType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (plan.written.back() && !argument.is_out() && tensors) {
      plan.written_in_place.push_back(plan.written.size() - 1);
    }
  }
  plan.returns_only_tensors = ReturnsOnlyTensors(schema);
  plan.meta_usable =
      plan.returns_only_tensors &&
      op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta) &&
      !MetaShapesDifferFromCpu(plan.name);
  plan.returns_view = ReturnsAView(schema);
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    plan.return_alias.push_back(alias);
    plan.aliased_argument.push_back(
        alias != nullptr ? AliasedArgument(schema, *alias) : std::nullopt);
  }
  plan.meta_key_traits = MetaKeyTraitsOf(op);
  return plan;
}

const OpPlan& PlanFor(const c10::OperatorHandle& op) {
  // Keyed by the schema, which lives as long as the registration. Per
  // thread: no lock on the per-op path; node-based, so references stay.
  thread_local absl::node_hash_map<const c10::FunctionSchema*, OpPlan> plans;
  const c10::FunctionSchema* key = &op.schema();
  auto it = plans.find(key);
  if (it == plans.end()) {
    it = plans.emplace(key, MakePlan(op)).first;
  } else if (!(it->second.name == op.operator_name())) {
    it->second = MakePlan(op);
  }
  return it->second;
}

template <typename Fn>
void ForEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorVector()) fn(tensor);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toList()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

// The one openreg device the op runs on, with PyTorch's error for mixes.
// As on CUDA, CPU tensors are accepted only as 0-dim values that the op
// reads, and as the index tensors of index/index_put.
c10::DeviceIndex CommonDevice(const c10::OperatorHandle& op, const OpPlan& plan,
                              c10::ArrayRef<c10::IValue> arguments) {
  std::optional<c10::Device> device;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const bool host_indices = static_cast<int>(i) == plan.host_indices_argument;
    const bool read_only = !plan.written[i];
    ForEachTensor(arguments[i], [&](const at::Tensor& tensor) {
      if (!tensor.defined()) return;
      if (!tensor.is_privateuseone()) {
        if (host_indices || (read_only && tensor.dim() == 0)) return;
        TORCH_CHECK(!device.has_value(),
                    "Expected all tensors to be on the same device, but found "
                    "at least two devices, ",
                    *device, " and ", tensor.device(), "!");
        TORCH_CHECK(false,
                    "Expected all tensors to be on the same device, but found "
                    "at least two devices, ",
                    tensor.device(), " and openreg! (", op.operator_name(),
                    ")");
      }
      if (!device.has_value()) {
        device = tensor.device();
      } else {
        TORCH_CHECK(*device == tensor.device(),
                    "Expected all tensors to be on the same device, but found "
                    "at least two devices, ",
                    *device, " and ", tensor.device(), "!");
      }
    });
  }
  if (device.has_value()) return device->index();
  for (const c10::IValue& argument : arguments) {
    if (argument.isDevice() && argument.toDevice().type() == kType &&
        argument.toDevice().has_index()) {
      return argument.toDevice().index();
    }
  }
  return c10::impl::getDeviceGuardImpl(kType)->getDevice().index();
}

// A meta tensor with the same layout. View ops also need the storage size
// and offset so that the Meta kernel computes the view's offset.
at::Tensor ToMeta(const at::Tensor& tensor, bool keep_storage) {
  if (!tensor.defined()) return tensor;
  if (!tensor.is_privateuseone() && tensor.dim() == 0) return tensor;
  const at::TensorOptions options =
      at::TensorOptions().dtype(tensor.scalar_type()).device(at::kMeta);
  if (!keep_storage) {
    return at::empty_strided(tensor.sizes(), tensor.strides(), options);
  }
  const int64_t itemsize = static_cast<int64_t>(tensor.itemsize());
  const int64_t storage_elements =
      (static_cast<int64_t>(tensor.storage().nbytes()) + itemsize - 1) /
      itemsize;
  return at::empty({storage_elements}, options)
      .as_strided(tensor.sizes(), tensor.strides(), tensor.storage_offset());
}

at::Tensor EmptyStandIn(const at::Tensor& out) {
  if (!out.defined() || out.numel() == 0) return ToMeta(out, false);
  return at::empty(
      {0}, at::TensorOptions().dtype(out.scalar_type()).device(at::kMeta));
}

c10::IValue ToMetaValue(const c10::IValue& value, bool keep_storage) {
  if (value.isTensor()) return ToMeta(value.toTensor(), keep_storage);
  if (value.isTensorList()) {
    std::vector<at::Tensor> tensors;
    for (const at::Tensor& tensor : value.toTensorVector()) {
      tensors.push_back(ToMeta(tensor, keep_storage));
    }
    return tensors;
  }
  if (value.isList()) {
    c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList converted(list.elementType());
    for (const c10::IValue& element : list) {
      converted.push_back(ToMetaValue(element, keep_storage));
    }
    return converted;
  }
  return value;
}

bool AllStrided(const std::vector<c10::IValue>& outputs) {
  for (const c10::IValue& output : outputs) {
    bool strided = true;
    ForEachTensor(output, [&](const at::Tensor& tensor) {
      strided =
          strided && (!tensor.defined() || tensor.layout() == at::kStrided);
    });
    if (!strided) return false;
  }
  return true;
}

// Some of PyTorch's Meta kernels (pow_, atan2_, fmod_, ...) resize `self`
// of an in-place op to the broadcast shape, where CPU's kernel refuses
// ("output with shape [2] doesn't match the broadcast shape [3, 2]"): such
// a call runs synchronously, and CPU's kernel decides.
// The tensors of the in-place arguments of `values`, lists flattened.
std::vector<at::Tensor> InPlaceTensors(const OpPlan& plan,
                                       c10::ArrayRef<c10::IValue> values) {
  std::vector<at::Tensor> tensors;
  for (size_t index : plan.written_in_place) {
    ForEachTensor(values[index],
                  [&](const at::Tensor& tensor) { tensors.push_back(tensor); });
  }
  return tensors;
}

bool ResizedInPlace(const OpPlan& plan, c10::ArrayRef<c10::IValue> arguments,
                    const std::vector<at::Tensor>& stand_ins) {
  const std::vector<at::Tensor> reals = InPlaceTensors(plan, arguments);
  if (reals.size() != stand_ins.size()) return true;
  for (size_t i = 0; i < stand_ins.size(); ++i) {
    if (stand_ins[i].sizes() != reals[i].sizes()) return true;
  }
  return false;
}

// The Meta kernel's answer for one call.
struct MetaAnswer {
  // Null when the Meta kernel cannot answer (data-dependent shape, no Meta
  // support for these inputs): the op then runs synchronously.
  std::shared_ptr<const MetaResult> result;
  // A signature not seen before (a cache miss, or a call that cannot be
  // cached): its launch is checked, and `fresh` is cached under `key` only
  // once the kernel has accepted it. PyTorch's Meta kernels lack some of
  // the checks CPU's kernels make (dtype support, dim wrapping, casting
  // into in-place results), and this makes all of them raise at the call.
  std::shared_ptr<MetaResult> fresh;
  std::string key;  // empty: not cacheable
};

MetaAnswer RunMeta(const c10::OperatorHandle& op, const OpPlan& plan,
                   c10::ArrayRef<c10::IValue> arguments, bool keep_storage) {
  thread_local std::string key;
  const bool cacheable = BuildMetaCacheKey(op, plan.meta_key_traits, arguments,
                                           keep_storage, &key);
  if (cacheable) {
    std::shared_ptr<const MetaResult> hit = FindMetaResult(key);
    // The key names the op by its schema's address, which a destroyed
    // Python library can hand to another op: a hit must fit this schema.
    if (hit != nullptr &&
        (hit->unavailable ||
         hit->outputs.size() == op.schema().returns().size())) {
      return {hit->unavailable ? nullptr : std::move(hit), nullptr, {}};
    }
  }
  // A miss runs a Meta kernel, which may re-enter the fallback (and reuse
  // the key buffer): keep this call's key.
  std::string miss_key = cacheable ? key : std::string();
  torch::jit::Stack stack;
  stack.reserve(arguments.size());
  const std::vector<c10::Argument>& declared = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    // An out= stand-in has no elements: the Meta kernel resizes it without
    // a warning (its warning, when Python's, has other words than CPU's),
    // and MatchLayout gives CPU's warning at every call that resizes.
    stack.push_back(declared[i].is_out() && arguments[i].isTensor()
                        ? EmptyStandIn(arguments[i].toTensor())
                        : ToMetaValue(arguments[i], keep_storage));
  }
  const std::vector<at::Tensor> in_place_stand_ins =
      InPlaceTensors(plan, stack);
  auto result = std::make_shared<MetaResult>();
  try {
    const c10::DispatchKeySet meta_keys(c10::DispatchKey::Meta);
    if (const c10::KernelFunction* cpp_meta = CppMetaKernel(op)) {
      cpp_meta->callBoxed(op, meta_keys, &stack);
    } else {
      op.redispatchBoxed(meta_keys, &stack);
    }
    result->outputs = std::move(stack);
    // A sparse result's number of non-zeros depends on values.
    result->unavailable = !AllStrided(result->outputs) ||
                          ResizedInPlace(plan, arguments, in_place_stand_ins);
    MatchCpuOutputLayout(op, arguments, &result->outputs);
  } catch (const std::exception&) {
    // The synchronous path runs the real kernel and reports real errors.
    result->unavailable = true;
  }
  if (result->unavailable) {
    if (cacheable) StoreMetaResult(std::move(miss_key), result);
    return {nullptr, nullptr, {}};
  }
  return {result, result, std::move(miss_key)};
}

// A client-side view of `base`'s storage with the Meta kernel's layout.
at::Tensor MakeView(const at::Tensor& base, const at::Tensor& meta) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(),
      meta.dtype());
  impl->set_sizes_and_strides(meta.sizes(), meta.strides(),
                              meta.storage_offset());
  return at::Tensor(std::move(impl));
}

// out= tensors are resized the way the Meta kernel resized their stand-ins.
// An out= of the right size keeps its layout, as on CPU (resize_output
// leaves it alone and the kernel writes through it), even where a Meta
// kernel restrides its stand-in (sort.values).
void MatchLayout(const at::Tensor& real, const at::Tensor& meta) {
  if (real.sizes() == meta.sizes()) return;
  // CPU's deprecation warning, in its words, when an out= with elements is
  // resized (an in-place self never is: ResizedInPlace).
  at::native::resize_output_check(real, meta.sizes());
  const int64_t span = StridedSpanElements(meta.sizes(), meta.strides());
  if (span != 0) {
    EnsureStorageBytes(real.storage(),
                       (real.storage_offset() + span) * real.itemsize());
  }
  real.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(),
                                                    meta.strides());
}

// An op's output, on the device the fallback's guard made current: the
// allocator directly, not the empty_strided op (which fills under
// deterministic mode; an output is written by its op).
at::Tensor AllocateLike(const at::Tensor& meta) {
  if (!meta.defined()) return meta;
  return at::detail::empty_strided_generic(
      meta.sizes(), meta.strides(), &GetDeviceAllocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), meta.scalar_type());
}

// Turns one Meta result into the real result: the aliased argument (in
// place / out=), a client-side view, or freshly allocated device memory.
at::Tensor PlanTensor(const c10::AliasInfo* alias, const at::Tensor& meta,
                      const at::Tensor& aliased_element, bool* computed) {
  if (alias == nullptr) {
    *computed = true;
    return AllocateLike(meta);
  }
  if (alias->isWrite()) {
    *computed = true;
    MatchLayout(aliased_element, meta);
    return aliased_element;
  }
  return MakeView(aliased_element, meta);
}

// Step 1: a blocked op must not touch the device at all.
void CheckNotBlocked(const c10::OperatorHandle& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !IsOpBlocked(op.operator_name()), "\"", op.operator_name(),
      "\" is not implemented for openreg (it is on the block list: "
      "OPENREG_BLOCKED_OPS / torch_openreg.block_op())");
}

// Step 3a, the usual path: the Meta kernel's results become the real ones
// (fresh device memory, the aliased argument, or a client-side view), and
// the op is enqueued unless every result is a pure view. Returns at once,
// unless `checked_warnings` asks for a checked launch: then it waits for
// the kernel and stores its warnings there.
OpResults RunAsynchronous(const c10::OperatorHandle& op, const OpPlan& plan,
                          c10::ArrayRef<c10::IValue> arguments,
                          const MetaResult& meta, c10::DeviceIndex device,
                          std::vector<c10::Warning>* checked_warnings) {
  const c10::FunctionSchema& schema = op.schema();
  OpResults results;
  results.reserve(schema.returns().size());
  c10::SmallVector<at::Tensor, 2> outputs;  // inline, as OpResults
  bool needs_launch = schema.returns().empty();
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const c10::AliasInfo* alias = plan.return_alias[i];
    const std::optional<size_t>& source = plan.aliased_argument[i];
    TORCH_CHECK(alias == nullptr || source.has_value(),
                "openreg: cannot find the argument aliased by a return of ",
                schema);
    const c10::IValue& meta_value = meta.outputs[i];
    bool computed = false;
    if (meta_value.isTensor()) {
      at::Tensor real = PlanTensor(
          alias, meta_value.toTensor(),
          source ? arguments[*source].toTensor() : at::Tensor(), &computed);
      outputs.push_back(real);
      results.emplace_back(std::move(real));
    } else {
      std::vector<at::Tensor> metas = meta_value.toTensorVector();
      // Views of one tensor (split, unbind) or elementwise aliases of a
      // tensor list.
      std::vector<at::Tensor> aliased;
      if (source && arguments[*source].isTensor()) {
        aliased.assign(metas.size(), arguments[*source].toTensor());
      } else if (source) {
        aliased = arguments[*source].toTensorVector();
      }
      std::vector<at::Tensor> reals;
      for (size_t j = 0; j < metas.size(); ++j) {
        const at::Tensor base = source ? aliased.at(j) : at::Tensor();
        reals.push_back(PlanTensor(alias, metas[j], base, &computed));
        outputs.push_back(reals.back());
      }
      results.emplace_back(std::move(reals));
    }
    needs_launch = needs_launch || computed;
  }
  if (!needs_launch) return results;
  if (checked_warnings != nullptr) {
    *checked_warnings = LaunchChecked(op, arguments, outputs, device);
  } else {
    LaunchAsync(op, arguments, outputs, device);
  }
  return results;
}

// Step 3b, for ops without a Meta kernel, with data-dependent shapes or
// non-tensor results: the daemon runs the op now and allocates its
// results; in-place and out= results stay the client's arguments.
OpResults RunSynchronous(const c10::OperatorHandle& op, const OpPlan& plan,
                         c10::ArrayRef<c10::IValue> arguments,
                         c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  const proto::OpReply reply = LaunchSync(op, arguments, device);
  RaiseWarnings(KernelWarnings(reply));
  TORCH_CHECK(
      static_cast<size_t>(reply.results_size()) == schema.returns().size(),
      "openreg: the daemon returned ", reply.results_size(), " results for ",
      schema.operator_name(), ", expected ", schema.returns().size());
  OpResults results;
  results.reserve(schema.returns().size());
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const c10::AliasInfo* alias = plan.return_alias[i];
    std::optional<size_t> source;
    if (alias != nullptr && alias->isWrite()) {
      source = plan.aliased_argument[i];
    }
    if (!source) {
      c10::IValue result = DecodeResult(reply.results(i));
      // A kernel may return an undefined tensor for a `Tensor` return
      // (e.g. a bias gradient without bias); the daemon sends it as none,
      // and a non-optional Tensor return must be unboxed as a Tensor.
      if (result.isNone() && schema.returns()[i].real_type()->kind() ==
                                 c10::TypeKind::TensorType) {
        result = at::Tensor();
      }
      results.push_back(std::move(result));
      continue;
    }
    // In place / out=: the daemon wrote through the argument's memory,
    // unless the kernel had to resize an out= tensor: then it returns the
    // result, and the argument is resized and filled here.
    const c10::IValue& argument = arguments[*source];
    if (reply.results(i).has_sparse_coo() && argument.isTensor()) {
      AdoptSparse(argument.toTensor(),
                  DecodeResult(reply.results(i)).toTensor());
    } else if (reply.results(i).has_tensor() && argument.isTensor()) {
      const at::Tensor resized = WrapDaemonTensor(reply.results(i).tensor());
      const at::Tensor& out = argument.toTensor();
      out.resize_(resized.sizes());
      out.copy_(resized);
    }
    results.push_back(argument);
  }
  return results;
}

// Step 3: the op run the way its Meta answer allows.
OpResults RunWithMetaAnswer(const c10::OperatorHandle& op, const OpPlan& plan,
                            c10::ArrayRef<c10::IValue> arguments,
                            c10::DeviceIndex device, MetaAnswer* meta) {
  if (meta->result == nullptr) {
    return RunSynchronous(op, plan, arguments, device);
  }
  if (meta->fresh == nullptr) {
    OpResults results = RunAsynchronous(op, plan, arguments, *meta->result,
                                        device, /*checked_warnings=*/nullptr);
    RaiseWarningsAtCall(meta->result->warnings);
    return results;
  }
  if (CurrentStreamCaptures(device)) {
    // A capture cannot wait for the check: the launch is recorded
    // unchecked, its errors surface at replay (docs/GRAPHS.md), and the
    // unchecked Meta result is not cached.
    return RunAsynchronous(op, plan, arguments, *meta->result, device,
                           /*checked_warnings=*/nullptr);
  }
  OpResults results = RunAsynchronous(op, plan, arguments, *meta->result,
                                      device, &meta->fresh->warnings);
  if (!meta->key.empty()) {
    StoreMetaResult(std::move(meta->key), meta->fresh);
  }
  RaiseWarningsAtCall(meta->fresh->warnings);
  return results;
}

// The steps of both fallbacks; `meta_allowed` is false for ops with sparse
// or quantized arguments, which always run synchronously.
void Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
              bool meta_allowed) {
  CheckNotBlocked(op);
  // Step 2: the op's plan (cached per op), its device, and its results'
  // metadata from the Meta kernel (cached by argument metadata).
  const size_t num_arguments = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> arguments =
      torch::jit::last(*stack, num_arguments);
  const OpPlan& plan = PlanFor(op);
  const c10::DeviceIndex device = CommonDevice(op, plan, arguments);
  // Most ops run on the current device, where a guard would only read it
  // twice more (about 2% of a small op's client instructions).
  c10::OptionalDeviceGuard guard;
  if (device != c10::impl::getDeviceGuardImpl(kType)->getDevice().index()) {
    guard.reset_device(c10::Device(kType, device));
  }
  MetaAnswer meta = meta_allowed && plan.meta_usable
                        ? RunMeta(op, plan, arguments, plan.returns_view)
                        : MetaAnswer{};
  // Step 3: run it (checked, the first time these arguments' metadata is
  // seen), and raise the kernel's warnings.
  OpResults results = RunWithMetaAnswer(op, plan, arguments, device, &meta);
  // Step 4: the results replace the arguments on the stack.
  torch::jit::drop(*stack, num_arguments);
  for (c10::IValue& result : results) {
    torch::jit::push(*stack, std::move(result));
  }
}

}  // namespace

void RemoteSynchronousFallback(const c10::OperatorHandle& op,
                               torch::jit::Stack* stack) {
  Fallback(op, stack, /*meta_allowed=*/false);
}

void RemoteFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Fallback(op, stack, /*meta_allowed=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>());
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(
      torch::CppFunction::makeFromBoxedFunction<&RemoteSynchronousFallback>());
}

// Composite ops whose shared implementation hands unknown backends to
// *_overrideable stubs that only out-of-tree kernels implement: routed to
// the daemon whole, where the CPU implementation runs.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution",
         torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>());
  m.impl("convolution_backward",
         torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>());
  // Shared kernels that refuse other devices than CPU, CUDA and XPU by a
  // device-type check ("mode only supports CPU, CUDA and XPU device
  // type"); in torch 2.13 only mode.values is reachable from openreg
  // (docs/ARCHITECTURE.md lists how this was established).
  m.impl("mode.values",
         torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>());
}

}  // namespace openreg::torch_backend
