#include "tests/cpp/runtime_test_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/unix_socket.h"
#include "gtest/gtest.h"

namespace openreg {
namespace {

bool Accepts(const std::string& path) {
  absl::StatusOr<int> fd = ConnectUnix(path);
  if (!fd.ok()) return false;
  close(*fd);
  return true;
}

// Waits up to `timeout` for `pid` to exit; returns its wait status or -1.
int WaitForExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return -1;
    if (absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// In a sanitizer build (--config=asan/ubsan/tsan) the daemon's reports go to
// its log, which nobody else reads: a report there fails the running test.
void ExpectNoSanitizerReport(const std::string& log) {
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "WARNING: ThreadSanitizer", ": runtime error: "}) {
    if (log.find(marker) != std::string::npos) {
      ADD_FAILURE() << "the daemon reported \"" << marker << "\":\n" << log;
      return;
    }
  }
}

}  // namespace

std::string DaemonBinaryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir != nullptr) {
    std::string path =
        absl::StrCat(srcdir, "/openreg/device_daemon/server/openreg-daemon");
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  // The test's working directory is the runfiles root of the workspace.
  return std::filesystem::absolute("device_daemon/server/openreg-daemon")
      .string();
}

std::string MakeSocketDirectory() {
  char pattern[] = "/tmp/openreg-test-XXXXXX";
  const char* directory = mkdtemp(pattern);
  return directory == nullptr ? std::string() : std::string(directory);
}

void RemoveSocketDirectory(const std::string& directory) {
  if (directory.rfind("/tmp/openreg-test-", 0) != 0) return;  // be careful
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
}

void UseSocket(const std::string& socket_path) {
  setenv("OPENREG_DAEMON_SOCKET", socket_path.c_str(), 1);
  setenv("OPENREG_AUTOSPAWN", "0", 1);
}

SuiteDaemon::~SuiteDaemon() {
  if (daemon_.running()) daemon_.Stop();
  if (!directory_.empty()) RemoveSocketDirectory(directory_);
}

absl::Status SuiteDaemon::Start(const std::vector<std::string>& flags) {
  directory_ = MakeSocketDirectory();
  if (directory_.empty()) {
    return absl::InternalError("cannot create a socket directory in /tmp");
  }
  const std::string socket = directory_ + "/daemon.sock";
  absl::Status started = daemon_.Start(socket, flags);
  if (started.ok()) UseSocket(socket);
  return started;
}

TestDaemon::~TestDaemon() {
  if (running()) Stop();
}

absl::Status TestDaemon::Start(const std::string& socket_path,
                               const std::vector<std::string>& extra_flags) {
  const std::string binary = DaemonBinaryPath();
  log_path_ = absl::StrCat(socket_path.substr(0, socket_path.rfind('/')),
                           "/daemon.log");
  std::vector<std::string> arguments = {binary,
                                        absl::StrCat("--socket=", socket_path)};
  arguments.insert(arguments.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int log =
        open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (log >= 0) dup2(log, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!Accepts(socket_path) || !Accepts(AttachSocketPath(socket_path))) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      ExpectNoSanitizerReport(Log());
      return absl::UnavailableError(absl::StrCat("the daemon ", binary,
                                                 " exited early (status ",
                                                 status, "): ", Log()));
    }
    if (absl::Now() >= deadline) {
      Kill();
      return absl::DeadlineExceededError(
          absl::StrCat("the daemon did not start listening: ", Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

int TestDaemon::Stop() {
  if (!running()) return -1;
  kill(pid_, SIGTERM);
  int status = WaitForExit(pid_, absl::Seconds(10));
  if (status == -1) {
    kill(pid_, SIGKILL);
    status = WaitForExit(pid_, absl::Seconds(10));
  }
  pid_ = -1;
  ExpectNoSanitizerReport(Log());
  return status;
}

void TestDaemon::Signal(int signal) {
  if (running()) kill(pid_, signal);
}

void TestDaemon::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  WaitForExit(pid_, absl::Seconds(10));
  pid_ = -1;
  ExpectNoSanitizerReport(Log());
}

std::string TestDaemon::Log() const {
  std::ifstream file(log_path_);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

}  // namespace openreg
