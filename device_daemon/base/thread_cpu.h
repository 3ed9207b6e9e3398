// The daemon's threads and the CPU each has used, from /proc/self/task: how
// the cost profile tells the executors' own CPU from their OpenMP workers'
// (which spin after every parallel region) and from everything else.
//
// Threads are told apart by name: an executor names itself (kExecutorName
// plus its device) before it starts any thread, and a thread inherits the
// name of the thread that started it, so libgomp's workers of an
// executor's team carry the executor's name. (So would a thread that a
// kernel library's kernel started; the daemon's own code starts none from
// an executor but the executors' spares, which register as executors.)
#ifndef OPENREG_DEVICE_DAEMON_BASE_THREAD_CPU_H_
#define OPENREG_DEVICE_DAEMON_BASE_THREAD_CPU_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace openreg::daemon {

// The name prefix of executor threads ("or-exec-d0" for device 0's).
inline constexpr absl::string_view kExecutorName = "or-exec-d";

// Names the calling thread (at most 15 characters are kept, as Linux
// keeps), so that `top -H`, gdb and the cost profile can tell it apart.
void NameThisThread(absl::string_view name);

// The calling thread's id (gettid).
pid_t ThisThreadId();

struct ThreadCpu {
  std::string name;
  uint64_t cpu_ns = 0;  // on a CPU since the thread started (schedstat)
};

// Every thread of this process now, by thread id. A thread that ends while
// it is read is left out.
absl::flat_hash_map<pid_t, ThreadCpu> ReadThreadCpu();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_THREAD_CPU_H_
