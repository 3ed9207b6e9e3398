#include "device_daemon/base/thread_cpu.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace openreg::daemon {

void NameThisThread(absl::string_view name) {
  // Linux keeps 15 characters and a terminator; longer names are refused.
  const std::string kept(name.substr(0, 15));
  pthread_setname_np(pthread_self(), kept.c_str());
}

pid_t ThisThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

absl::flat_hash_map<pid_t, ThreadCpu> ReadThreadCpu() {
  absl::flat_hash_map<pid_t, ThreadCpu> threads;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return threads;
  while (const dirent* entry = readdir(tasks)) {
    int tid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &tid)) continue;  // "." and ".."
    const std::string dir = absl::StrCat("/proc/self/task/", tid, "/");
    // schedstat: nanoseconds on a CPU, waiting for one, timeslices.
    std::ifstream schedstat(dir + "schedstat");
    uint64_t cpu_ns = 0;
    if (!(schedstat >> cpu_ns)) continue;  // it ended meanwhile
    ThreadCpu& thread = threads[static_cast<pid_t>(tid)];
    thread.cpu_ns = cpu_ns;
    std::ifstream comm(dir + "comm");
    std::getline(comm, thread.name);
  }
  closedir(tasks);
  return threads;
}

}  // namespace openreg::daemon
