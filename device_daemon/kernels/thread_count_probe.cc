#include "device_daemon/kernels/thread_count_probe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device_daemon/kernels/warn_once_probe.h"
#include "op_codec/kernel_settings.h"

namespace openreg::daemon {
namespace {

// Copies keep their original's address modulo this (a cache line: what
// vectorized kernels and MKL's packing look at).
constexpr uintptr_t kAlignment = 64;
// Any fixed seed: both runs of a probe draw the same values.
constexpr uint64_t kProbeSeed = 0x6f70656e726567;

// Elements from a tensor's first element to its last, in memory.
int64_t SpanElements(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    span += (tensor.size(dim) - 1) * tensor.stride(dim);
  }
  return span;
}

bool Copyable(const at::Tensor& tensor) {
  if (!tensor.defined()) return true;
  if (tensor.layout() != at::kStrided || !tensor.device().is_cpu()) {
    return false;
  }
  for (const int64_t stride : tensor.strides()) {
    if (stride < 0) return false;
  }
  return true;
}

// Appends `tensor`'s part of the signature; false if it cannot be copied.
bool AppendTensor(const at::Tensor& tensor, std::string* key, int64_t* bytes) {
  if (!Copyable(tensor)) return false;
  if (!tensor.defined()) {
    key->append("T-;");
    return true;
  }
  absl::StrAppend(
      key, "T", static_cast<int>(tensor.scalar_type()), "[",
      absl::StrJoin(tensor.sizes(), ","), "][",
      absl::StrJoin(tensor.strides(), ","), "]@",
      reinterpret_cast<uintptr_t>(tensor.const_data_ptr()) % kAlignment, ";");
  *bytes += SpanElements(tensor) * static_cast<int64_t>(tensor.itemsize());
  return true;
}

// Appends `value`'s part of the signature; false if the probe cannot run
// a launch with it.
bool AppendValue(const c10::IValue& value, std::string* key, int64_t* bytes) {
  if (value.isTensor()) return AppendTensor(value.toTensor(), key, bytes);
  if (value.isTensorList()) {
    key->append("L(");
    for (const at::Tensor& item : value.toTensorList()) {
      if (!AppendTensor(item, key, bytes)) return false;
    }
    key->append(");");
    return true;
  }
  if (value.isList()) {  // List[Optional[Tensor]], int and float lists, ...
    const bool optional_tensors = value.isOptionalTensorList();
    key->append("L(");
    for (const c10::IValue& item : value.toListRef()) {
      // ProbeValue copies the tensors of these two kinds of list only.
      if (item.isTensor() && !optional_tensors) return false;
      if (!AppendValue(item, key, bytes)) return false;
    }
    key->append(");");
    return true;
  }
  if (value.isNone()) {
    key->append("N;");
  } else if (value.isBool()) {
    absl::StrAppend(key, "B", value.toBool(), ";");
  } else if (value.isInt()) {
    absl::StrAppend(key, "I", value.toInt(), ";");
  } else if (value.isSymInt()) {
    const std::optional<int64_t> concrete = value.toSymInt().maybe_as_int();
    if (!concrete.has_value()) return false;
    absl::StrAppend(key, "I", *concrete, ";");
  } else if (value.isDouble()) {
    // Every bit: a kernel may take another path for another scale.
    double number = value.toDouble();
    uint64_t bits = 0;
    std::memcpy(&bits, &number, sizeof(bits));
    absl::StrAppend(key, "D", bits, ";");
  } else if (value.isComplexDouble()) {
    const c10::complex<double> number = value.toComplexDouble();
    uint64_t bits[2] = {};
    std::memcpy(&bits[0], &number, sizeof(bits));
    absl::StrAppend(key, "C", bits[0], ",", bits[1], ";");
  } else if (value.isString()) {
    absl::StrAppend(key, "S", value.toStringRef().size(), ":",
                    value.toStringRef(), ";");
  } else if (value.isDevice()) {
    absl::StrAppend(key, "V", value.toDevice().str(), ";");
  } else {
    return false;  // a Generator, an object, a tuple, ...
  }
  return true;
}

// A copy of `tensor` with its sizes, strides and alignment: normal draws
// from `generator` if it holds floating-point or complex numbers, its own
// bytes otherwise.
at::Tensor ProbeCopy(const at::Tensor& tensor, const at::Generator& generator) {
  if (!tensor.defined()) return tensor;
  const int64_t item = static_cast<int64_t>(tensor.itemsize());
  const int64_t offset = static_cast<int64_t>(
      (reinterpret_cast<uintptr_t>(tensor.const_data_ptr()) % kAlignment) /
      item);
  const int64_t span = SpanElements(tensor);
  at::Tensor memory = at::empty({offset + span}, tensor.options());
  if (tensor.is_floating_point() || tensor.is_complex()) {
    memory.normal_(0.0, 1.0, generator);
  } else if (span > 0) {
    std::memcpy(static_cast<char*>(memory.data_ptr()) + offset * item,
                tensor.const_data_ptr(), span * item);
  }
  return memory.as_strided(tensor.sizes(), tensor.strides(), offset);
}

c10::IValue ProbeValue(const c10::IValue& value,
                       const at::Generator& generator) {
  if (value.isTensor()) return ProbeCopy(value.toTensor(), generator);
  if (value.isTensorList()) {
    c10::List<at::Tensor> copies;
    for (const at::Tensor& item : value.toTensorList()) {
      copies.push_back(ProbeCopy(item, generator));
    }
    return copies;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> copies;
    for (const c10::IValue& item : value.toListRef()) {
      copies.push_back(item.isNone() ? std::nullopt
                                     : std::optional<at::Tensor>(ProbeCopy(
                                           item.toTensor(), generator)));
    }
    return copies;
  }
  return value;  // immutable
}

void CollectTensors(const c10::IValue& value, std::vector<at::Tensor>* out) {
  if (value.isTensor()) {
    out->push_back(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      CollectTensors(item, out);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      CollectTensors(item, out);
    }
  }
}

// The tensors of one run at `threads`: its copies of the arguments (the
// kernel may write them), then its results.
std::vector<at::Tensor> RunOnCopies(const c10::OperatorHandle& handle,
                                    const torch::jit::Stack& stack,
                                    const KernelRun& run, int threads) {
  const at::Generator generator =
      at::make_generator<at::CPUGeneratorImpl>(kProbeSeed);
  torch::jit::Stack arguments;
  arguments.reserve(stack.size());
  for (const c10::IValue& value : stack) {
    arguments.push_back(ProbeValue(value, generator));
  }
  torch::jit::Stack call = arguments;
  op_codec::SetThreadIntraOpThreads(threads);
  run(handle, &call);
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& value : arguments) CollectTensors(value, &tensors);
  for (const c10::IValue& value : call) CollectTensors(value, &tensors);
  return tensors;
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  const at::Tensor dense_a = a.contiguous();
  const at::Tensor dense_b = b.contiguous();
  return std::memcmp(dense_a.const_data_ptr(), dense_b.const_data_ptr(),
                     dense_a.nbytes()) == 0;
}

// The probe's runs warn as the launch's own run will: drop theirs.
class DiscardWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override { TakeWarnOnceMark(); }
};

}  // namespace

std::optional<std::string> ThreadProbeSignature(
    const c10::OperatorHandle& handle, const torch::jit::Stack& stack,
    int threads) {
  const c10::OperatorName& name = handle.operator_name();
  // ATen's ops only: a --kernel_library op may do more than write its
  // tensors (count its calls, log), and the probe runs it twice more.
  if (name.name.rfind("aten::", 0) != 0 ||
      handle.hasTag(at::Tag::nondeterministic_seeded)) {
    return std::nullopt;
  }
  std::string key =
      absl::StrCat(name.name, ".", name.overload_name, "|", threads, "|");
  int64_t bytes = 0;
  for (const c10::IValue& value : stack) {
    if (!AppendValue(value, &key, &bytes)) return std::nullopt;
  }
  if (bytes > kThreadProbeMaxBytes) return std::nullopt;
  return key;
}

bool SameBitsWithFewerThreads(const c10::OperatorHandle& handle,
                              const torch::jit::Stack& stack,
                              const KernelRun& candidate, int fewer, int more) {
  const int threads_before = at::get_num_threads();
  DiscardWarnings discard;
  const c10::WarningUtils::WarningHandlerGuard guard(&discard);
  bool same = false;
  try {
    const std::vector<at::Tensor> at_fewer =
        RunOnCopies(handle, stack, candidate, fewer);
    const std::vector<at::Tensor> at_more = RunOnCopies(
        handle, stack,
        [](const c10::OperatorHandle& kernel, torch::jit::Stack* arguments) {
          kernel.callBoxed(arguments);
        },
        more);
    same = at_fewer.size() == at_more.size();
    for (size_t i = 0; same && i < at_fewer.size(); ++i) {
      same = SameBytes(at_fewer[i], at_more[i]);
    }
  } catch (...) {
    // A kernel that fails on the probe's values: run at the full count.
    same = false;
  }
  op_codec::SetThreadIntraOpThreads(threads_before);
  return same;
}

}  // namespace openreg::daemon
