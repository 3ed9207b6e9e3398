// What the daemon can learn of a client process from /proc, for operators
// (openreg-ctl sessions, the attach log line).
#ifndef OPENREG_DEVICE_DAEMON_BASE_PROCESS_INFO_H_
#define OPENREG_DEVICE_DAEMON_BASE_PROCESS_INFO_H_

#include <sys/types.h>

#include <string>

namespace openreg::daemon {

// The process's command line on one line: its arguments joined by spaces,
// line breaks inside them made spaces; "" when it cannot be read (the
// process is gone).
std::string ProcessCommandLine(pid_t pid);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_PROCESS_INFO_H_
