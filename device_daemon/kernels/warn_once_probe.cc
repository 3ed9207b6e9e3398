#include "device_daemon/kernels/warn_once_probe.h"

#include <dlfcn.h>

namespace openreg::daemon {
namespace {

thread_local bool t_once_check = false;

using GetWarnAlways = bool (*)() noexcept;

// libc10's own definition, which reads the flag set_warnAlways sets.
GetWarnAlways RealGetWarnAlways() {
  static const GetWarnAlways real = reinterpret_cast<GetWarnAlways>(
      dlsym(RTLD_NEXT, "_ZN3c1012WarningUtils14get_warnAlwaysEv"));
  return real;
}

}  // namespace

bool TakeWarnOnceMark() {
  const bool marked = t_once_check;
  t_once_check = false;
  return marked;
}

}  // namespace openreg::daemon

// Interposes c10::WarningUtils::get_warnAlways (see warn_once_probe.h).
namespace c10::WarningUtils {

bool get_warnAlways() noexcept {
  openreg::daemon::t_once_check = true;
  const auto real = openreg::daemon::RealGetWarnAlways();
  return real == nullptr || real();
}

}  // namespace c10::WarningUtils
