// Tells a kernel's TORCH_WARN_ONCE warnings from its TORCH_WARN ones, so
// that each client can apply "once per process" itself.
//
// The daemon runs kernels with c10's warn-always on (aten_op_runner.h): the
// once-state of TORCH_WARN_ONCE is a static inside libtorch, shared by every
// client, so "once" must be decided per client, in the client. But a
// c10::Warning does not say which macro raised it. TORCH_WARN_ONCE is the
// only caller of c10::WarningUtils::get_warnAlways() right before it warns;
// the daemon binary defines that function itself (exported, so libtorch's
// calls bind to it ahead of libc10's) and marks the calling thread, and the
// daemon's warning handler takes the mark with the warning that follows.
//
// Written by hand because no library hooks this; it relies only on ELF
// symbol interposition (the daemon links libc10 dynamically). Linked into
// the openreg-daemon binary alone; tests check it end to end.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_WARN_ONCE_PROBE_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_WARN_ONCE_PROBE_H_

namespace openreg::daemon {

// True when a TORCH_WARN_ONCE check ran on this thread since the last call
// (then the warning being handled is a once-warning); clears the mark.
bool TakeWarnOnceMark();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_WARN_ONCE_PROBE_H_
