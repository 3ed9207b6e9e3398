#include "device_daemon/kernels/kernel_launch.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/launch_error.h"
#include "device_daemon/kernels/pointwise_kernel.h"
#include "device_daemon/kernels/warn_once_probe.h"

namespace openreg::daemon {
namespace {

// Serializes the ops that borrow the daemon's CPU default generator (random
// ops without a Generator parameter): each reseeds it, runs, and must not
// interleave with another.
std::mutex g_default_generator_mutex;

// Collects the warnings a kernel raises on this thread (c10's warning
// handler is thread-local), for the client to raise again; each is encoded
// at once, while warn_once_probe.h can still tell a TORCH_WARN_ONCE.
class WarningCollector : public c10::WarningHandler {
 public:
  WarningCollector() { TakeWarnOnceMark(); }  // a stale mark is not ours
  void process(const c10::Warning& warning) override;
  const std::vector<proto::KernelWarning>& warnings() const {
    return warnings_;
  }

 private:
  std::vector<proto::KernelWarning> warnings_;
};

// Passes warnings on to the handler that was current, except ATen's
// "output ... was resized" warning: an op the client called without out=
// and the daemon runs as its out= overload may resize the output on the
// way (mse_loss.out with a reduction), which the functional op never warns
// about on CPU.
class OutVariantWarningFilter : public c10::WarningHandler {
 public:
  OutVariantWarningFilter() : next_(c10::WarningUtils::get_warning_handler()) {}
  void process(const c10::Warning& warning) override {
    if (absl::StartsWith(warning.msg(),
                         "An output with one or more elements was resized")) {
      TakeWarnOnceMark();
      return;
    }
    next_->process(warning);
  }

 private:
  c10::WarningHandler* const next_;
};

void EncodeWarning(const c10::Warning& warning, proto::KernelWarning* out) {
  out->set_message(warning.msg());
  out->set_once(TakeWarnOnceMark());
  out->set_deprecation(
      std::holds_alternative<c10::DeprecationWarning>(warning.type()));
  const c10::SourceLocation& where = warning.source_location();
  if (where.function != nullptr) out->set_function(where.function);
  if (where.file != nullptr) out->set_file(where.file);
  out->set_line(where.line);
}

void WarningCollector::process(const c10::Warning& warning) {
  EncodeWarning(warning, &warnings_.emplace_back());
}

}  // namespace

absl::Status KernelLaunch::Run(uint64_t sequence, WrittenTensors* written) {
  absl::Status ran = RunKernel(sequence);
  if (ran.ok() && written != nullptr && resolved_ != nullptr) {
    CollectWritten(resolved_->handle.schema(), written);
  }
  return ran;
}

absl::Status KernelLaunch::RunKernel(uint64_t sequence) {
  StageTimer decoding(timing_, CostStage::kDecode);
  if (resolved_ == nullptr) return UnknownOperator();
  absl::StatusOr<torch::jit::Stack> stack =
      decoder_.BuildStack(resolved_->handle.schema());
  if (!stack.ok()) return stack.status();
  if (absl::Status outputs = decoder_.ValidateOutputs(); !outputs.ok()) {
    return outputs;
  }
  decoding.Stop();
  if (!op_.synchronous()) {
    // Warnings of an asynchronous kernel (value-dependent ones: the checked
    // first launch of the signature replied with the others) wait in the
    // stream's mailbox for the client's next synchronization.
    WarningCollector collector;
    absl::Status ran;
    {
      const c10::WarningUtils::WarningHandlerGuard guard(&collector);
      ran = RunAsynchronous(*resolved_, &*stack);
    }
    reply_.PostWarnings(collector.warnings());
    return ran;
  }
  if (op_.outputs_size() == 0) {
    return RunSynchronous(resolved_->handle, &*stack, sequence);
  }
  return RunChecked(*resolved_, &*stack, sequence);
}

void KernelLaunch::CollectWritten(const c10::FunctionSchema& schema,
                                  WrittenTensors* written) const {
  written->assign(op_.outputs().begin(), op_.outputs().end());
  if (!written->empty()) return;
  // A synchronous launch's results, in memory the daemon allocated.
  written->assign(reply_.reply_tensors().begin(), reply_.reply_tensors().end());
  if (!written->empty()) return;
  // In-place and out= kernels write through their (mutable) arguments.
  const std::vector<c10::Argument>& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite() &&
        i < static_cast<size_t>(op_.arguments_size()) &&
        op_.arguments(static_cast<int>(i)).has_tensor()) {
      written->push_back(op_.arguments(static_cast<int>(i)).tensor());
    }
  }
}

absl::Status KernelLaunch::UnknownOperator() const {
  // Like an op without a kernel for a backend: NotImplementedError.
  return MakeError(
      proto::KERNEL_NOT_IMPLEMENTED_ERROR,
      absl::StrCat("unknown operator ", OpName(op_),
                   ": the daemon has no kernel for it (load the library "
                   "that defines it with --kernel_library)"));
}

absl::Status KernelLaunch::RunAsynchronous(const ResolvedOp& resolved,
                                           torch::jit::Stack* stack) {
  if (resolved.pointwise_loop) {
    if (std::optional<absl::Status> looped = RunAsLoop()) return *looped;
  }
  if (resolved.out_variant.has_value() &&
      static_cast<size_t>(op_.outputs_size()) ==
          resolved.handle.schema().returns().size()) {
    return RunOutVariant(*resolved.out_variant, stack);
  }
  ReplaceOutArguments(resolved.handle.schema(), stack, &out_arguments_);
  // The kernel allocates its results: let it allocate them in the client's
  // outputs (kernel_workspace.h, placement), so that the reply copies
  // nothing. Not the outputs of an in-place or out= op: those are its
  // arguments, which the kernel still reads. A lone Tensor[] return (a
  // functional foreach op's) has one output per element.
  std::vector<KernelWorkspace::Slot> slots;
  std::vector<int> slot_outputs;  // each slot's output
  const std::vector<c10::Argument>& returns =
      resolved.handle.schema().returns();
  const bool one_list =
      returns.size() == 1 &&
      returns[0].real_type()->kind() == c10::TypeKind::ListType &&
      returns[0].alias_info() == nullptr;
  if (one_list || returns.size() == static_cast<size_t>(op_.outputs_size())) {
    slots.reserve(op_.outputs_size());
    slot_outputs.reserve(op_.outputs_size());
    // Beyond the learned outputs (a foreach op's list), each output takes
    // the allocation of its size that a functional foreach op returns for
    // it: one result per element, in order, so the k-th output of a size
    // gets the k-th allocation of that size. Without this, every output
    // after the first eight whose size an earlier one had was copied (an
    // AdamW step's _foreach_sqrt spent 145 us a step in its reply). A
    // wrong guess costs a copy, as before (kernel_workspace.h).
    absl::flat_hash_map<size_t, int> earlier_outputs_of_size;
    for (int i = 0; i < op_.outputs_size(); ++i) {
      if (!one_list && returns[i].alias_info() != nullptr) continue;
      absl::StatusOr<at::Tensor> tensor = decoder_.DeviceTensor(op_.outputs(i));
      if (!tensor.ok()) return tensor.status();
      int same_size_before = 0;
      if (op_.outputs_size() > ResolvedOp::kLearnedOutputs &&
          tensor->numel() > 0) {
        same_size_before = earlier_outputs_of_size[tensor->nbytes()]++;
      }
      if (tensor->numel() > 0 && tensor->is_non_overlapping_and_dense()) {
        KernelWorkspace::Slot& slot = slots.emplace_back();
        slot.data = tensor->data_ptr();
        slot.bytes = tensor->nbytes();
        slot.take_ordinal = i < ResolvedOp::kLearnedOutputs
                                ? resolved.result_allocation[i]
                                : same_size_before;
        slot_outputs.push_back(i);
      }
    }
  }
  {
    const KernelWorkspace::Placement placement(&slots);
    Call(resolved.handle, stack);
  }
  std::vector<at::Tensor> returned = LaunchReply::ReturnedTensors(*stack);
  LearnResultAllocations(resolved, slots, slot_outputs, returned);
  return reply_.CopyToOutputs(std::move(returned));
}

std::optional<absl::Status> KernelLaunch::RunAsLoop() {
  if (op_.outputs_size() != 1) return std::nullopt;
  // The functional op's output is the client's memory; an in-place or out=
  // launch's is its argument's tensor.
  absl::StatusOr<at::Tensor> output = decoder_.OutputTensor(op_.outputs(0));
  if (!output.ok()) return output.status();
  auto find = [this, &output](const proto::TensorRef* ref,
                              bool /*growable*/) -> const at::Tensor* {
    if (ref == &op_.outputs(0)) return &*output;
    return decoder_.ArgumentTensor(ref);
  };
  const std::optional<PointwiseKernel> loop =
      PointwiseKernel::Match(op_, find, settings_);
  if (!loop.has_value() || loop->OperandsShareANaN()) return std::nullopt;
  const StageTimer kernel(timing_, CostStage::kKernel);
  if (timing_ != nullptr && timing_->enabled) timing_->kernel_threads = 1;
  loop->Run();
  if (pointwise_loops_ != nullptr) {
    pointwise_loops_->fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void KernelLaunch::LearnResultAllocations(
    const ResolvedOp& resolved, const std::vector<KernelWorkspace::Slot>& slots,
    const std::vector<int>& slot_outputs,
    const std::vector<at::Tensor>& returned) {
  if (returned.size() != static_cast<size_t>(op_.outputs_size())) return;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int output = slot_outputs[i];
    const at::Tensor& result = returned[output];
    if (output >= ResolvedOp::kLearnedOutputs || result.numel() == 0) {
      continue;
    }
    const void* memory = result.storage().data();
    if (memory == slots[i].data) continue;  // placed as asked
    // A result in memory of its own: if it was an allocation of the
    // output's size, that allocation is the one to place next time.
    const int ordinal = KernelWorkspace::AllocationOrdinal(slots[i], memory);
    if (ordinal >= 0) {
      resolved.result_allocation[output] = static_cast<uint8_t>(ordinal);
    }
  }
}

absl::Status KernelLaunch::RunSynchronous(const c10::OperatorHandle& handle,
                                          torch::jit::Stack* stack,
                                          uint64_t sequence) {
  ReplaceOutArguments(handle.schema(), stack, &out_arguments_);
  // The client waits for this reply, so the kernel's warnings reach it at
  // the call, as they would on CPU.
  WarningCollector collector;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&collector);
    Call(handle, stack);
  }
  FinishOutArguments(&out_arguments_);
  return reply_.WriteReply(handle.schema(), *stack, out_arguments_,
                           collector.warnings(), sequence);
}

absl::Status KernelLaunch::RunChecked(const ResolvedOp& resolved,
                                      torch::jit::Stack* stack,
                                      uint64_t sequence) {
  WarningCollector collector;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&collector);
    absl::Status ran = RunAsynchronous(resolved, stack);
    if (!ran.ok()) return ran;
  }
  return reply_.WriteReply(resolved.handle.schema(), /*stack=*/{},
                           out_arguments_, collector.warnings(), sequence);
}

absl::Status KernelLaunch::RunOutVariant(const c10::OperatorHandle& out_variant,
                                         torch::jit::Stack* stack) {
  // Some out= kernels resize their output on the way (mse_loss.out with a
  // reduction first writes the elementwise loss into it): the outputs are
  // growable, and one whose memory moved is copied back below.
  std::vector<const void*> client_memory;
  client_memory.reserve(op_.outputs_size());
  for (const proto::TensorRef& output : op_.outputs()) {
    absl::StatusOr<at::Tensor> tensor =
        decoder_.DeviceTensor(output, /*growable=*/true);
    if (!tensor.ok()) return tensor.status();
    client_memory.push_back(tensor->data_ptr());
    stack->push_back(*std::move(tensor));
  }
  {
    OutVariantWarningFilter filter;
    const c10::WarningUtils::WarningHandlerGuard guard(&filter);
    Call(out_variant, stack);
  }
  if (stack->size() != client_memory.size()) {
    return LaunchError(
        op_, proto::INTERNAL,
        absl::StrCat("the out= overload returned ", stack->size(),
                     " values for ", client_memory.size(), " outputs"));
  }
  for (size_t i = 0; i < client_memory.size(); ++i) {
    const at::Tensor& result = (*stack)[i].toTensor();
    const proto::TensorRef& ref = op_.outputs(static_cast<int>(i));
    if (result.data_ptr() == client_memory[i] &&
        result.sizes() ==
            c10::IntArrayRef(ref.sizes().data(), ref.sizes_size()) &&
        result.strides() ==
            c10::IntArrayRef(ref.strides().data(), ref.strides_size())) {
      continue;  // written in place
    }
    absl::StatusOr<at::Tensor> destination = decoder_.OutputTensor(ref);
    if (!destination.ok()) return destination.status();
    if (destination->sizes() != result.sizes()) {
      return LaunchError(op_, proto::KERNEL_FAILURE,
                         absl::StrCat("output ", i, " has shape ",
                                      ShapeString(destination->sizes()),
                                      " but the kernel produced ",
                                      ShapeString(result.sizes())));
    }
    destination->copy_(result);
  }
  return absl::OkStatus();
}

void KernelLaunch::Call(const c10::OperatorHandle& handle,
                        torch::jit::Stack* stack) {
  const StageTimer kernel(timing_, CostStage::kKernel);
  const int requested = at::get_num_threads();
  if (timing_ != nullptr && timing_->enabled) {
    timing_->kernel_threads = requested;
  }
  if (!op_.has_default_generator()) {
    if (core_sharing_ == nullptr) {
      handle.callBoxed(stack);
      return;
    }
    const int threads =
        core_sharing_->Run(handle, stack, requested, client_busy_);
    if (timing_ != nullptr && timing_->enabled) {
      timing_->fewer_threads = threads < requested;
    }
    return;
  }
  std::lock_guard<std::mutex> lock(g_default_generator_mutex);
  at::Generator cpu_default = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> seed_lock(cpu_default.mutex());
    cpu_default.set_current_seed(EngineSeed(op_.default_generator()));
  }
  handle.callBoxed(stack);
}

}  // namespace openreg::daemon
