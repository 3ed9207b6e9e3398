// Whether a kernel run with fewer intra-op threads gives the bits of its
// run with more, for one launch's signature: both run on private copies of
// the launch's arguments and every tensor they return or write is compared
// byte for byte. The fewer-thread run is the kernel itself or another way
// to compute its result (core_sharing.h).
//
// Floating-point and complex arguments are replaced by normal draws of a
// fixed seed (the launch's own values could be degenerate: a zero gradient
// sums to zero in any order); other tensors keep their values (indices must
// stay valid), copied when the kernel writes them. The copies have the
// arguments' sizes, strides and alignment, so the kernel takes the paths it
// takes on the launch's own tensors. Device memory is never touched.
//
// What it cannot see: a kernel that splits its work differently only for
// some values (no ATen, MKL or oneDNN kernel known to do so). A kernel that
// throws on the probe's values, an op that draws random numbers (a
// Generator argument, or ATen's nondeterministic_seeded tag), an op outside
// ATen (a --kernel_library op may have effects beyond its tensors) and
// arguments this does not copy (sparse tensors, objects) count as
// "differs".
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_THREAD_COUNT_PROBE_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_THREAD_COUNT_PROBE_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace openreg::daemon {

// The most bytes of tensors a probe copies (each of its two runs); a larger
// launch is not probed.
inline constexpr int64_t kThreadProbeMaxBytes = int64_t{64} << 20;

// What makes two launches of `handle` the same for the probe: the op, the
// thread count, and each argument's dtype, sizes, strides and alignment or
// value. nullopt when the launch cannot be probed (see above, or more than
// kThreadProbeMaxBytes of tensors).
std::optional<std::string> ThreadProbeSignature(
    const c10::OperatorHandle& handle, const torch::jit::Stack& stack,
    int threads);

// A way to run a kernel: calls `handle` on `stack` (the arguments, replaced
// by the results), on the calling thread's intra-op threads.
using KernelRun =
    std::function<void(const c10::OperatorHandle&, torch::jit::Stack*)>;

// Runs `candidate` on copies of `stack` at `fewer` intra-op threads and
// `handle`'s kernel on other copies at `more` (the calling thread's count
// is restored) and returns whether every result and written argument has
// the same bytes. False when a run throws. `stack` must be one
// ThreadProbeSignature accepted.
bool SameBitsWithFewerThreads(const c10::OperatorHandle& handle,
                              const torch::jit::Stack& stack,
                              const KernelRun& candidate, int fewer, int more);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_THREAD_COUNT_PROBE_H_
