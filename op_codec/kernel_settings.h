// The ATen settings that change what a kernel computes, as one value both
// sides understand. A client's settings are process-wide (or, for
// flush-denormal, per thread) in its own process; its kernels run in the
// daemon, so each launch carries them (protos/commands.proto:
// KernelSettings) and the daemon runs the command with exactly them.
//
// The list, from torch 2.13's at::Context and c10 (what a CPU kernel
// reads): the default dtype; deterministic algorithms, their warn-only
// mode and fill-uninitialized-memory; oneDNN's fp32 matmul precision
// (torch.set_float32_matmul_precision); oneDNN
// (mkldnn) enabled, deterministic, TF32; fp16 reduced-precision reductions
// on CPU; flush-denormal. What is left out and why is in
// docs/ARCHITECTURE.md.
#ifndef OPENREG_OP_CODEC_KERNEL_SETTINGS_H_
#define OPENREG_OP_CODEC_KERNEL_SETTINGS_H_

#include <ATen/Context.h>
#include <c10/core/ScalarType.h>

#include "absl/status/statusor.h"
#include "protos/commands.pb.h"

namespace openreg::op_codec {

struct KernelSettings {
  // ATen's defaults, whatever the environment of either process says.
  c10::ScalarType default_dtype = c10::kFloat;
  bool deterministic_algorithms = false;
  bool deterministic_warn_only = false;
  bool fill_uninitialized_memory = true;
  // What torch.set_float32_matmul_precision sets for CPU kernels: oneDNN's
  // fp32 matmul precision (read as float32Precision(MKLDNN, MATMUL), a
  // third of the cost of float32MatmulPrecision() on the per-op path).
  at::Float32Precision mkldnn_matmul_precision = at::Float32Precision::NONE;
  bool mkldnn_enabled = true;
  bool deterministic_mkldnn = false;
  bool allow_fp16_reduction_cpu = false;
  bool allow_tf32_onednn = false;
  bool flush_denormal = false;  // per thread (the FPU's FTZ/DAZ bits)
  // Per thread; 0 = ATen's default, the host's processor count (whatever
  // OMP_NUM_THREADS says in either process).
  int intra_op_threads = 0;

  friend bool operator==(const KernelSettings& a, const KernelSettings& b);
  friend bool operator!=(const KernelSettings& a, const KernelSettings& b) {
    return !(a == b);
  }
};

// Whether `a` and `b` need the same process-wide ATen state: every setting
// but the thread count, which each thread applies for itself
// (ApplyThreadSettings), so kernels with different counts need not take
// turns (kernel_settings_gate.h).
bool SameProcessSettings(const KernelSettings& a, const KernelSettings& b);

// This process's settings, as the calling thread sees them.
KernelSettings CurrentKernelSettings();

// ATen's default intra-op thread count: the processors this process may
// run on (what OpenMP's default is without OMP_NUM_THREADS).
int DefaultIntraOpThreads();

// The most intra-op threads a launch may ask the daemon for.
inline constexpr int kMaxIntraOpThreads = 64;

// The fields that differ from ATen's defaults (nothing for the defaults:
// a launch with default settings carries no bytes for them).
void EncodeKernelSettings(const KernelSettings& settings,
                          proto::KernelSettings* out);
// INVALID_VALUE for a dtype or precision outside ATen's enums, or a thread
// count outside [1, kMaxIntraOpThreads].
absl::StatusOr<KernelSettings> DecodeKernelSettings(
    const proto::KernelSettings& settings);

// Makes `settings` this process's settings (flush-denormal: this
// thread's). Not thread-safe with kernels running: the daemon calls it
// through its KernelSettingsGate.
void ApplyProcessSettings(const KernelSettings& settings);
void ApplyThreadSettings(const KernelSettings& settings);
// Sets the calling thread's intra-op threads for OpenMP and MKL only
// (what ApplyThreadSettings does for the count). at::set_num_threads would
// also resize process-wide pools (pthreadpool) from whichever executor
// thread calls it.
void SetThreadIntraOpThreads(int threads);
// The per-thread flush-denormal bits alone (what a loop outside ATen
// needs: device_daemon/kernels/pointwise_kernel.h).
void ApplyThreadFlushDenormal(bool flush_denormal);

}  // namespace openreg::op_codec

#endif  // OPENREG_OP_CODEC_KERNEL_SETTINGS_H_
