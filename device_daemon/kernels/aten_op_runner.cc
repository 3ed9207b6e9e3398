// The OpRunner: runs one launch as three parts, each an object on this
// stack frame: the decoder (launch_decoder.h), the reply (launch_reply.h)
// and the kernel launch over them (kernel_launch.h). Here is what
// surrounds every launch: inference mode, the launch's ATen settings, the
// kernel's host workspace, and a kernel's exceptions turned into errors.
#include "device_daemon/kernels/aten_op_runner.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "data_plane/monotonic_clock.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/openmp_worker_placement.h"
#include "device_daemon/execution/command_timing.h"
#include "device_daemon/kernels/decoded_launch.h"
#include "device_daemon/kernels/kernel_launch.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/launch_decoder.h"
#include "device_daemon/kernels/launch_error.h"
#include "device_daemon/kernels/launch_reply.h"
#include "device_daemon/kernels/launch_threads.h"
#include "device_daemon/kernels/op_table.h"
#include "device_daemon/kernels/pointwise_kernel.h"
#include "device_daemon/sessions/session.h"
#include "op_codec/error_classes.h"
#include "op_codec/kernel_settings.h"

namespace openreg::daemon {
namespace {

int64_t DecodeAndKernel(const CommandTiming& timing) {
  return timing.nanoseconds[static_cast<int>(CostStage::kDecode)] +
         timing.nanoseconds[static_cast<int>(CostStage::kKernel)];
}

}  // namespace

AtenOpRunner::AtenOpRunner(uint64_t workspace_limit_bytes, bool share_cores)
    : workspace_limit_bytes_(workspace_limit_bytes),
      core_sharing_(share_cores) {
  c10::WarningUtils::set_warnAlways(true);
  KernelWorkspace::Install();
}

absl::Status AtenOpRunner::Run(const StreamContext& context,
                               const proto::LaunchOp& op, uint64_t sequence,
                               WrittenTensors* written) {
  return RunLaunch(context, op, sequence, written, /*decoded=*/nullptr,
                   /*replaying=*/false);
}

absl::Status AtenOpRunner::RunRepeated(
    const StreamContext& context, const proto::LaunchOp& op, uint64_t sequence,
    WrittenTensors* written, std::unique_ptr<PreparedLaunch>* prepared) {
  if (op.synchronous() || op.has_default_generator()) {
    return Run(context, op, sequence, written);
  }
  DeviceCounters& counters =
      context.session->devices().counters(context.device);
  // Only this runner fills `prepared`.
  auto* kept = static_cast<DecodedLaunch*>(prepared->get());
  if (kept != nullptr) {
    if (kept->Acquire(*context.session)) {
      counters.graph_launches_reused.fetch_add(1, std::memory_order_relaxed);
      // A fault hook that reads what the launch wrote (`written`) sees
      // ATen's run, as it would without graphs.
      if (const PointwiseKernel* pointwise = kept->pointwise();
          pointwise != nullptr && written == nullptr) {
        {
          const StageTimer kernel(context.timing, CostStage::kKernel);
          pointwise->Run();
        }
        kept->Release();
        counters.graph_launches_pointwise.fetch_add(1,
                                                    std::memory_order_relaxed);
        return absl::OkStatus();
      }
      absl::Status status =
          RunLaunch(context, op, sequence, written, kept, /*replaying=*/true);
      kept->Release();
      if (!status.ok() || !kept->Verify()) prepared->reset();
      return status;
    }
    prepared->reset();  // memory was freed since: decode again
  }
  counters.graph_launches_decoded.fetch_add(1, std::memory_order_relaxed);
  auto recording =
      std::make_unique<DecodedLaunch>(context.session->memory_generation());
  absl::Status status = RunLaunch(context, op, sequence, written,
                                  recording.get(), /*replaying=*/false);
  recording->Release();
  const ResolvedOp* const resolved = ResolveOp(op.name(), op.overload());
  if (status.ok() && resolved != nullptr &&
      recording->Keepable(resolved->handle.schema()) && recording->Verify()) {
    absl::StatusOr<op_codec::KernelSettings> settings =
        op_codec::DecodeKernelSettings(op.settings());
    if (settings.ok()) {
      auto find = [&recording](const proto::TensorRef* ref, bool growable) {
        return recording->FindTensor(ref, growable);
      };
      if (std::optional<PointwiseKernel> pointwise =
              PointwiseKernel::Match(op, find, *settings)) {
        recording->KeepPointwise(*pointwise);
      }
    }
    *prepared = std::move(recording);
  }
  return status;
}

absl::Status AtenOpRunner::RunLaunch(const StreamContext& context,
                                     const proto::LaunchOp& op,
                                     uint64_t sequence, WrittenTensors* written,
                                     DecodedLaunch* decoded, bool replaying) {
  // Plain inference: no autograd bookkeeping for daemon-side tensors.
  c10::InferenceMode inference_mode;
  StageTimer settings_stage(context.timing, CostStage::kSettings);
  const ResolvedOp* const resolved = ResolveOp(op.name(), op.overload());
  LaunchDecoder decoder(context, op);
  if (decoded != nullptr) {
    if (replaying) {
      decoder.Replay(decoded);
    } else {
      decoder.Record(decoded);
    }
  }
  LaunchReply reply(context, op, decoder);
  op_codec::KernelSettings settings;
  if (op.has_settings()) {
    absl::StatusOr<op_codec::KernelSettings> decoded =
        op_codec::DecodeKernelSettings(op.settings());
    if (!decoded.ok()) {
      return MakeError(
          proto::INVALID_VALUE,
          absl::StrCat(OpName(op), ": settings: ", decoded.status().message()));
    }
    settings = *decoded;
  }
  // The client's intra-op threads, or one where that gives the same bits.
  settings.intra_op_threads = LaunchIntraOpThreads(
      op, resolved,
      settings.intra_op_threads > 0 ? settings.intra_op_threads
                                    : op_codec::DefaultIntraOpThreads());
  // Busy: not asleep waiting for this stream's work, for room in its ring,
  // nor for this launch's reply. Read only for a multi-threaded launch
  // (core_sharing.h): most launches run on one thread.
  const bool client_busy =
      settings.intra_op_threads > 1 && !op.synchronous() &&
      context.slot != nullptr &&
      context.slot->completed.sleepers.load(std::memory_order_relaxed) == 0 &&
      context.slot->ring.head.sleepers.load(std::memory_order_relaxed) == 0;
  KernelLaunch launch(op, resolved, decoder, reply, context.timing,
                      &core_sharing_, client_busy, settings,
                      context.session != nullptr
                          ? &context.session->devices()
                                 .counters(context.device)
                                 .launches_pointwise
                          : nullptr);
  const KernelSettingsGate::Pass pass = settings_gate_.Enter(settings);
  op_codec::ApplyThreadSettings(settings);
  KeepOpenMpWorkersOffThisCpu(settings.intra_op_threads);
  settings_stage.Stop();
  absl::Status status;
  // What the launch spends outside its decode and kernel stages is its
  // reply: out= stand-ins, copies into place, the reply record.
  CommandTiming* const timing =
      context.timing != nullptr && context.timing->enabled ? context.timing
                                                           : nullptr;
  const int64_t launch_start = timing != nullptr ? MonotonicNanoseconds() : 0;
  const int64_t inner_before = timing != nullptr ? DecodeAndKernel(*timing) : 0;
  try {
    const KernelWorkspace::Scope workspace(workspace_limit_bytes_, op.name(),
                                           op.overload());
    status = launch.Run(sequence, written);
  } catch (const c10::Error& error) {
    // The kernel's own message, unchanged: the error record names the op,
    // and the client adds where and when it ran after the message. Its c10
    // class travels as its code (op_codec/error_classes.h).
    status = MakeError(op_codec::CodeOfKernelError(error),
                       error.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    status = KernelFailureError(
        absl::StrCat(OpName(op), " failed: out of host memory in the daemon"));
  } catch (const std::exception& error) {
    status =
        KernelFailureError(absl::StrCat(OpName(op), " failed: ", error.what()));
  } catch (...) {
    status = KernelFailureError(
        absl::StrCat(OpName(op), " failed with an unknown exception"));
  }
  if (!status.ok()) reply.ReleaseResults();
  if (timing != nullptr) {
    timing->Add(CostStage::kReply,
                MonotonicNanoseconds() - launch_start -
                    (DecodeAndKernel(*timing) - inner_before));
  }
  return status;
}

absl::StatusOr<int> AtenOpRunner::ApplyModuleSettings(
    const proto::KernelSettings& wire) {
  absl::StatusOr<op_codec::KernelSettings> settings =
      op_codec::DecodeKernelSettings(wire);
  if (!settings.ok()) return settings.status();
  op_codec::ApplyThreadSettings(*settings);
  const int threads = at::get_num_threads();
  KeepOpenMpWorkersOffThisCpu(threads);
  return threads;
}

}  // namespace openreg::daemon
