#include "device_daemon/kernels/core_sharing.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/layer_norm_backward_in_chunks.h"
#include "device_daemon/kernels/thread_count_probe.h"
#include "op_codec/kernel_settings.h"

namespace openreg::daemon {
namespace {

// How a launch runs with fewer threads than `requested`.
struct FewerThreadRun {
  int threads = 0;
  KernelRun run;
};

FewerThreadRun FewerThreadRunFor(const c10::OperatorHandle& handle,
                                 int requested) {
  if (IsLayerNormBackward(handle)) {
    return {requested - 1, [requested](const c10::OperatorHandle& kernel,
                                       torch::jit::Stack* stack) {
              RunLayerNormBackwardInChunks(kernel, stack, requested);
            }};
  }
  return {requested - 1,
          [](const c10::OperatorHandle& kernel, torch::jit::Stack* stack) {
            kernel.callBoxed(stack);
          }};
}

// Restores the calling thread's intra-op threads when destroyed.
class RestoreThreads {
 public:
  explicit RestoreThreads(int threads) : threads_(threads) {}
  RestoreThreads(const RestoreThreads&) = delete;
  RestoreThreads& operator=(const RestoreThreads&) = delete;
  ~RestoreThreads() { op_codec::SetThreadIntraOpThreads(threads_); }

 private:
  const int threads_;
};

}  // namespace

int CoreSharing::Run(const c10::OperatorHandle& handle,
                     torch::jit::Stack* stack, int requested,
                     bool client_busy) {
  std::optional<std::string> key;
  if (enabled_ && client_busy && requested > 1) {
    key = ThreadProbeSignature(handle, *stack, requested);
  }
  if (!key.has_value()) {
    handle.callBoxed(stack);
    return requested;
  }
  Verdict verdict = Verdict::kDiffers;
  {
    const absl::MutexLock lock(&mutex_);
    auto found = verdicts_.find(*key);
    if (found == verdicts_.end()) {
      if (verdicts_.size() < kMaxSignatures) {
        verdicts_.emplace(*key, Verdict::kSeenOnce);
      }
    } else {
      verdict = found->second;
      // Another executor's launch of it may be probing: that one decides.
      if (verdict == Verdict::kSeenOnce) found->second = Verdict::kProbing;
    }
  }
  const FewerThreadRun fewer = FewerThreadRunFor(handle, requested);
  if (verdict == Verdict::kSeenOnce) {
    // Outside the lock: the probe runs the kernel twice.
    bool same = false;
    {
      std::vector<KernelWorkspace::Slot> no_slots;
      const KernelWorkspace::Placement no_placement(&no_slots);
      same = SameBitsWithFewerThreads(handle, *stack, fewer.run, fewer.threads,
                                      requested);
    }
    verdict = same ? Verdict::kSameBits : Verdict::kDiffers;
    const absl::MutexLock lock(&mutex_);
    verdicts_[*key] = verdict;
  }
  if (verdict != Verdict::kSameBits) {
    handle.callBoxed(stack);
    return requested;
  }
  op_codec::SetThreadIntraOpThreads(fewer.threads);
  const RestoreThreads restore(requested);
  fewer.run(handle, stack);
  return fewer.threads;
}

}  // namespace openreg::daemon
