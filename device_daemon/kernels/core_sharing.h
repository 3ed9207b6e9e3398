// Leaves a core to a busy client: how a launch's kernel runs while its
// client is running.
//
// A launch asks for its client's intra-op count N (launch_threads.h keeps
// N wherever one thread could change the bits). While the client is busy
// (enqueueing, not asleep waiting for the stream), its Python needs a core.
// A kernel on N threads wakes OpenMP workers, and after each parallel
// region libgomp's workers spin for up to milliseconds: on a 2-core host
// that spinning takes the client's core, and the client, which feeds the
// stream, slows down (docs/ARCHITECTURE.md, "The cost of one op"). So
// while its client is busy a launch runs with fewer threads, in a way that
// gives the bits of N threads for the launch's signature:
//
// - the kernel itself on N-1 threads (most matrix products: MKL splits
//   them the same way on both), or
// - layer norm's backward, its kernel once per each of N row chunks on one
//   thread, side by side on N-1 (layer_norm_backward_in_chunks.h).
//
// A probe (thread_count_probe.h) checks the bits once per signature, on its
// second busy launch (a signature seen once is likely a one-off, not worth
// the probe's two extra runs), and the verdict is kept. Launches whose
// signature differs, or is new, keep N threads. While the client sleeps
// (a synchronize, `.item()`, waiting for room in its ring, a launch it
// waits for), launches get all N threads. Either way the bits are the
// kernel's at N threads: the thread count follows the client's timing,
// the result does not.
//
// Thread-safe: the daemon's executors share one. It remembers up to
// kMaxSignatures signatures; launches of others keep N threads.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_CORE_SHARING_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_CORE_SHARING_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace openreg::daemon {

class CoreSharing {
 public:
  static constexpr size_t kMaxSignatures = 4096;

  // Off (`enabled` false: openreg-daemon --share_cores=false), every launch
  // keeps its count.
  explicit CoreSharing(bool enabled) : enabled_(enabled) {}

  // Runs `handle` on `stack` (the launch's built arguments, replaced by its
  // results) and returns the intra-op threads it ran with: `requested`
  // (the calling thread's count) or fewer, as above. May run the probe
  // first; the probe's copies never take the client's outputs
  // (kernel_workspace.h, placement), the run itself may. Kernel errors
  // pass through.
  int Run(const c10::OperatorHandle& handle, torch::jit::Stack* stack,
          int requested, bool client_busy);

 private:
  enum class Verdict { kSeenOnce, kProbing, kSameBits, kDiffers };

  const bool enabled_;
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Verdict> verdicts_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_CORE_SHARING_H_
