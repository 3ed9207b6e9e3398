// Explicit PrivateUse1 kernels that replace the boxed fallback for hot ops
// (fast_path_ops.cc); see docs/EXTENDING.md, "Per-op overrides".
#ifndef OPENREG_TORCH_BACKEND_KERNELS_FAST_PATH_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_FAST_PATH_OPS_H_

#include <cstdint>

namespace openreg::torch_backend {

// How many launches the fast paths made (without a Meta kernel call), for
// tests and benchmarks.
uint64_t FastPathLaunchCount();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_FAST_PATH_OPS_H_
