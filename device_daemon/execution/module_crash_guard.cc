#include "device_daemon/execution/module_crash_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

constexpr int kGuardedSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};

// Per thread: where to jump back to while inside a module's entry.
thread_local sigjmp_buf* t_return_point = nullptr;
thread_local void* t_fault_address = nullptr;

const char* SignalName(int signal) {
  switch (signal) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    default:
      return "a fault signal";
  }
}

void OnFaultSignal(int signal, siginfo_t* info, void* /*context*/) {
  sigjmp_buf* const back = t_return_point;
  if (back != nullptr) {
    t_return_point = nullptr;
    t_fault_address = info != nullptr ? info->si_addr : nullptr;
    siglongjmp(*back, signal);
  }
  // Not ours: the default action (a core dump), as without the handler.
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  raise(signal);
}

void InstallHandlers() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    for (int signal : kGuardedSignals) {
      struct sigaction action = {};
      action.sa_sigaction = &OnFaultSignal;
      action.sa_flags = SA_SIGINFO | SA_NODEFER;
      sigemptyset(&action.sa_mask);
      sigaction(signal, &action, nullptr);
    }
  });
}

}  // namespace

absl::StatusOr<int> CallModuleEntry(ModuleEntryFunction entry, void** arguments,
                                    uint32_t count, char* error,
                                    size_t error_size) {
  InstallHandlers();
  sigjmp_buf return_point;
  // Saves the signal mask: the jump back unblocks the signal it left.
  const int signal = sigsetjmp(return_point, /*savemask=*/1);
  if (signal != 0) {
    return KernelFailureError(absl::StrCat(
        "crashed with ", SignalName(signal), " at address 0x",
        absl::Hex(reinterpret_cast<uintptr_t>(t_fault_address)),
        "; the module's state is lost, so this process's openreg context "
        "is unusable (as after CUDA's illegal memory access): restart it"));
  }
  t_return_point = &return_point;
  const int result = entry(arguments, count, error, error_size);
  t_return_point = nullptr;
  return result;
}

}  // namespace openreg::daemon
