// The kernel settings a launch carries (op_codec/kernel_settings.h): the
// launching thread's, with an autograd worker's intra-op thread count
// brought up to the process's at each backward pass.
//
// Why: an openreg tensor's backward ops are launched from the autograd
// engine's worker thread for the device, as on CUDA, not from the thread
// that called backward(). ATen's intra-op count is per thread once set
// (torch.set_num_threads sets the caller's and the process's count; another
// thread keeps the count it started with), so without this a backward pass
// after torch.set_num_threads(n) ran its kernels in the daemon with the
// worker's old count, and gave other bits than CPU eager's backward at n
// (which runs on the calling thread). Each new graph task on the worker
// re-reads the process's count (at::init_num_threads), once per pass.
// Flush-denormal is the thread's own MXCSR in ATen too, and is not carried
// over: a backward pass on openreg flushes denormals only if the worker
// does.
#ifndef OPENREG_TORCH_BACKEND_LAUNCH_SETTINGS_H_
#define OPENREG_TORCH_BACKEND_LAUNCH_SETTINGS_H_

#include "op_codec/kernel_settings.h"

namespace openreg::torch_backend {

op_codec::KernelSettings LaunchSettings();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_LAUNCH_SETTINGS_H_
