// Runs a real openreg-daemon for runtime-client tests: its own socket in a
// fresh /tmp directory (unix socket paths must stay under 108 bytes, so
// never under $TEST_TMPDIR), stopped by pid when the test is done.
#ifndef OPENREG_TESTS_CPP_RUNTIME_TEST_DAEMON_H_
#define OPENREG_TESTS_CPP_RUNTIME_TEST_DAEMON_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace openreg {

// The daemon binary in the test's runfiles.
std::string DaemonBinaryPath();

// A fresh directory /tmp/openreg-test-XXXXXX.
std::string MakeSocketDirectory();

// Removes a directory made by MakeSocketDirectory and everything in it.
void RemoveSocketDirectory(const std::string& directory);

// Points the runtime client at `socket_path` with autospawn off.
void UseSocket(const std::string& socket_path);

class TestDaemon {
 public:
  TestDaemon() = default;
  TestDaemon(const TestDaemon&) = delete;
  TestDaemon& operator=(const TestDaemon&) = delete;
  ~TestDaemon();

  // Starts the daemon on `socket_path` with `extra_flags` and waits until
  // both its sockets accept connections. stderr goes to <dir>/daemon.log.
  absl::Status Start(const std::string& socket_path,
                     const std::vector<std::string>& extra_flags = {});
  // SIGTERM, then wait (SIGKILL after 10 s). Returns the exit status.
  int Stop();
  // SIGKILL and reap: the daemon dies without any cleanup.
  void Kill();

  // Sends `signal` (e.g. SIGSTOP to freeze the daemon).
  void Signal(int signal);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // The daemon's log so far (for failure messages).
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// One daemon for a whole test suite: a fresh socket directory, the daemon
// started there with `flags`, and the runtime client pointed at it.
// Destruction stops the daemon by pid and removes the directory (shut the
// runtime client down first).
class SuiteDaemon {
 public:
  SuiteDaemon() = default;
  SuiteDaemon(const SuiteDaemon&) = delete;
  SuiteDaemon& operator=(const SuiteDaemon&) = delete;
  ~SuiteDaemon();

  absl::Status Start(const std::vector<std::string>& flags);
  bool running() const { return daemon_.running(); }

 private:
  std::string directory_;
  TestDaemon daemon_;
};

}  // namespace openreg

#endif  // OPENREG_TESTS_CPP_RUNTIME_TEST_DAEMON_H_
