// Integrator kernel libraries (--kernel_library): shared objects whose
// static initializers register operators and CPU kernels in the daemon's
// dispatcher (TORCH_LIBRARY, TORCH_LIBRARY_IMPL(ns, CPU, m)). OpRunner looks
// ops up by name, so these kernels then run for openreg tensors.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LIBRARIES_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LIBRARIES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace openreg::daemon {

// dlopens each library (RTLD_NOW, so that a missing symbol fails here and
// not in the middle of a kernel; RTLD_GLOBAL, so that libraries can use each
// other's symbols). The first failure is returned with its path and
// dlerror()'s message; libraries loaded before it stay loaded.
absl::Status LoadKernelLibraries(const std::vector<std::string>& paths);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LIBRARIES_H_
