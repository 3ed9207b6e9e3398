// The binary interface of a compiled module (LoadModule in control.proto,
// LaunchModuleKernel in commands.proto): a shared library the client built
// (torch.compile's kernels) and the daemon loads into a session, as CUDA's
// cuModuleLoad / cuLaunchKernel. Written once here: the daemon looks these
// symbols up, the torch backend exports them to the Python code generator
// that writes a module's entry point.
//
// A module exports:
//   extern "C" uint32_t openreg_module_abi(void);   // == kModuleAbiVersion
//   extern "C" int openreg_module_entry(void** arguments,
//                                       uint32_t argument_count,
//                                       char* error, size_t error_size);
// `arguments[i]` is, for a tensor argument, its element 0 in daemon memory
// (after the daemon checked the tensor's extent against the session's
// allocations) and, for a scalar, the address of an int64_t or a double.
// The entry returns 0, or non-zero with a NUL-terminated message in `error`
// (a C++ exception must not leave it: the entry catches and reports it).
#ifndef OPENREG_DATA_PLANE_MODULE_ABI_H_
#define OPENREG_DATA_PLANE_MODULE_ABI_H_

#include <cstddef>
#include <cstdint>

namespace openreg {

inline constexpr uint32_t kModuleAbiVersion = 1;
inline constexpr char kModuleAbiSymbol[] = "openreg_module_abi";
inline constexpr char kModuleEntrySymbol[] = "openreg_module_entry";

using ModuleAbiFunction = uint32_t (*)();
using ModuleEntryFunction = int (*)(void** arguments, uint32_t argument_count,
                                    char* error, size_t error_size);

// Bounds the work of decoding one launch.
inline constexpr int kMaxModuleArguments = 4096;
// Room the daemon gives an entry for its error message.
inline constexpr size_t kModuleErrorBytes = 1024;

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_MODULE_ABI_H_
