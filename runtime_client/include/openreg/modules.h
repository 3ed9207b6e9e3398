// Compiled modules (CUDA's cuModuleLoad / cuLaunchKernel): a shared library
// of kernels the client built, loaded into the daemon for this session and
// launched on device memory (data_plane/module_abi.h, docs/COMPILE.md).
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_MODULES_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_MODULES_H_

#include <cstdint>
#include <string>

#include "openreg/runtime.h"
#include "protos/commands.pb.h"

namespace openreg {

using ModuleId = uint64_t;

// Loads the shared library at `path` into the daemon for this session.
// kPermissionDenied when the trust model refuses it (the daemon runs as
// another uid, or the file is not the client's or root's, or others may
// write it), kInvalidValue when it is not a module of this ABI.
Error LoadModule(const std::string& path, ModuleId* module);

// Unloads `module`; launches already queued run first.
Error UnloadModule(ModuleId module);

// Enqueues the module's entry on `stream` (launch.module() names it; each
// tensor argument is checked against the session's allocations in the
// daemon). Returns at once; a failure is reported at the next
// synchronizing call, as for LaunchOp.
Error LaunchModuleKernel(const proto::LaunchModuleKernel& launch,
                         StreamId stream = kDefaultStream);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_MODULES_H_
