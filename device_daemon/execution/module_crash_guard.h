// Runs a compiled module's entry (data_plane/module_abi.h) so that a crash
// in it fails the launch instead of ending the daemon, where that can be
// done: a synchronous fault signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL) raised
// on the launching thread while it is inside the entry jumps back out of
// the module (sigsetjmp / siglongjmp), and the caller gets an error naming
// the signal and the faulting address.
//
// Best effort, as CUDA's "illegal memory access" is: the module's state
// (and anything it held, a lock or a half-written output) is not
// recovered, so the caller makes the error sticky for the session. A crash
// on another thread (a kernel's OpenMP worker), a stack overflow (no
// alternate stack) or a corrupted heap still takes the daemon down, as
// does any fault signal outside a module: the handler passes those on to
// the default action.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_MODULE_CRASH_GUARD_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_MODULE_CRASH_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data_plane/module_abi.h"

namespace openreg::daemon {

// What the entry returned; a crash is a KERNEL_FAILURE whose message says
// "crashed with" the signal and the address. Installs the handlers on
// first use.
absl::StatusOr<int> CallModuleEntry(ModuleEntryFunction entry, void** arguments,
                                    uint32_t count, char* error,
                                    size_t error_size);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_MODULE_CRASH_GUARD_H_
