// The real openreg-daemon binary: startup line, single instance, flags,
// SIGTERM and idle exit.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace {

constexpr char kBinary[] = "device_daemon/server/openreg-daemon";

struct Process {
  pid_t pid = -1;
  std::string stderr_path;
};

// Starts the daemon with `flags` and this process's environment plus
// `environment` ("NAME=value" each); its stderr goes to a file.
Process Spawn(const std::vector<std::string>& flags,
              const std::string& stderr_path,
              const std::vector<std::string>& environment = {}) {
  Process process;
  process.stderr_path = stderr_path;
  process.pid = fork();
  if (process.pid == 0) {
    const int fd =
        open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    for (const std::string& variable : environment) {
      putenv(const_cast<char*>(variable.c_str()));
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(kBinary));
    for (const std::string& flag : flags) {
      argv.push_back(const_cast<char*>(flag.c_str()));
    }
    argv.push_back(nullptr);
    execv(kBinary, argv.data());
    _exit(127);
  }
  return process;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Waits for the process to exit; returns its exit code, or -1 on timeout
// (then kills it).
int WaitForExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// A process's environment, each variable on a line of its own, "\n"
// first: "\nNAME=value\n" finds a variable exactly.
std::string EnvironmentOf(pid_t pid) {
  std::string environment = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  std::replace(environment.begin(), environment.end(), '\0', '\n');
  return "\n" + environment;
}

// Polls until the file at `path` contains `text`.
bool WaitForText(const std::string& path, const std::string& text,
                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (ReadFile(path).find(text) == std::string::npos) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

bool WaitForFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (access(path.c_str(), F_OK) == 0) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

class DaemonBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/openreg-binary-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    // A socket in a directory that does not exist yet: the daemon creates
    // it with mode 0700.
    socket_ = directory_ + "/run/d.sock";
  }
  void TearDown() override {
    for (const char* name :
         {"/run/d.sock", "/run/d.sock.attach", "/run/d.sock.lock", "/first.err",
          "/second.err", "/bad.err", "/idle.err"}) {
      unlink((directory_ + name).c_str());
    }
    rmdir((directory_ + "/run").c_str());
    rmdir(directory_.c_str());
  }

  // Starts the daemon with `flags` (and --socket) and `environment`,
  // checks that it serves as the process it was started as (re-executing
  // itself for its OpenMP wait keeps the pid), stops it, and returns the
  // environment it served with ("" after a failure).
  std::string EnvironmentOfAServingDaemon(
      std::vector<std::string> flags,
      const std::vector<std::string>& environment = {}) {
    flags.push_back("--socket=" + socket_);
    Process daemon = Spawn(flags, directory_ + "/first.err", environment);
    std::string served;
    if (WaitForFile(socket_, absl::Seconds(20))) {
      EXPECT_EQ(ReadFile(socket_ + ".lock"), absl::StrCat(daemon.pid, "\n"));
      served = EnvironmentOf(daemon.pid);
    } else {
      ADD_FAILURE() << "no socket: " << ReadFile(daemon.stderr_path);
    }
    EXPECT_EQ(kill(daemon.pid, SIGTERM), 0);
    EXPECT_EQ(WaitForExit(daemon.pid, absl::Seconds(20)), 0)
        << ReadFile(daemon.stderr_path);
    return served;
  }

  std::string directory_;
  std::string socket_;
};

TEST_F(DaemonBinaryTest, ServesRefusesASecondInstanceAndStopsOnSigterm) {
  Process first = Spawn({"--socket=" + socket_, "--devices=3",
                         "--memory_per_device=64MiB", "--log_level=info"},
                        directory_ + "/first.err");
  ASSERT_TRUE(WaitForFile(socket_, absl::Seconds(20)))
      << ReadFile(first.stderr_path);
  ASSERT_TRUE(WaitForFile(socket_ + ".attach", absl::Seconds(5)));
  // The line is written just after the sockets appear.
  EXPECT_TRUE(WaitForText(first.stderr_path,
                          absl::StrCat("openreg-daemon: serving 3 devices x "
                                       "64.00 MiB on ",
                                       socket_, " (pid ", first.pid, ")"),
                          absl::Seconds(5)))
      << ReadFile(first.stderr_path);
  EXPECT_EQ(ReadFile(socket_ + ".lock"), absl::StrCat(first.pid, "\n"));

  Process second = Spawn({"--socket=" + socket_}, directory_ + "/second.err");
  EXPECT_EQ(WaitForExit(second.pid, absl::Seconds(20)), 1);
  EXPECT_EQ(ReadFile(second.stderr_path),
            absl::StrCat("openreg-daemon: another daemon (pid ", first.pid,
                         ") already serves ", socket_, "\n"));

  ASSERT_EQ(kill(first.pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(first.pid, absl::Seconds(20)), 0)
      << ReadFile(first.stderr_path);
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);
  EXPECT_NE(access((socket_ + ".attach").c_str(), F_OK), 0);
}

TEST_F(DaemonBinaryTest, RestartsAfterACrashWithoutManualCleanup) {
  Process crashed = Spawn({"--socket=" + socket_}, directory_ + "/first.err");
  // The gRPC socket is created last.
  ASSERT_TRUE(WaitForFile(socket_ + ".attach", absl::Seconds(20)));
  ASSERT_TRUE(WaitForFile(socket_, absl::Seconds(20)));
  kill(crashed.pid, SIGKILL);
  WaitForExit(crashed.pid, absl::Seconds(10));
  ASSERT_EQ(access(socket_.c_str(), F_OK), 0);  // stale socket left behind

  Process next = Spawn({"--socket=" + socket_}, directory_ + "/second.err");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ReadFile(next.stderr_path).find("serving") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(ReadFile(next.stderr_path).find("serving"), std::string::npos)
      << ReadFile(next.stderr_path);
  kill(next.pid, SIGINT);
  EXPECT_EQ(WaitForExit(next.pid, absl::Seconds(20)), 0);
}

TEST_F(DaemonBinaryTest, RejectsBadFlags) {
  // Each bad value is reported with the flag's name.
  const std::pair<const char*, const char*> cases[] = {
      {"--devices=0", "devices"},
      {"--devices=65", "devices"},
      {"--memory_per_device=2GB", "memory_per_device"},
      {"--memory_per_device=100", "memory_per_device"},
      {"--log_level=chatty", "log_level"},
      {"--idle_exit_seconds=-1", "idle_exit_seconds"},
      {"--openmp_wait=nap", "openmp_wait"},
  };
  for (const auto& [flag, name] : cases) {
    Process bad = Spawn({flag, "--socket=" + socket_}, directory_ + "/bad.err");
    EXPECT_NE(WaitForExit(bad.pid, absl::Seconds(20)), 0) << flag;
    const std::string output = ReadFile(bad.stderr_path);
    EXPECT_NE(output.find(name), std::string::npos) << flag << ": " << output;
  }
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);
}

TEST_F(DaemonBinaryTest, SleepingOpenMpWorkersKeepThePidAndTheFlags) {
  // libgomp reads its wait policy when it loads: the daemon re-executes
  // itself with it, as the same process.
  Process daemon =
      Spawn({"--socket=" + socket_, "--openmp_wait=sleep", "--devices=3"},
            directory_ + "/first.err");
  ASSERT_TRUE(WaitForFile(socket_, absl::Seconds(20)))
      << ReadFile(daemon.stderr_path);
  EXPECT_TRUE(
      WaitForText(daemon.stderr_path, "serving 3 devices", absl::Seconds(5)))
      << ReadFile(daemon.stderr_path);
  EXPECT_EQ(ReadFile(socket_ + ".lock"), absl::StrCat(daemon.pid, "\n"));
  const std::string environment = EnvironmentOf(daemon.pid);
  EXPECT_NE(environment.find("\nOMP_WAIT_POLICY=PASSIVE\n"), std::string::npos);
  ASSERT_EQ(kill(daemon.pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(daemon.pid, absl::Seconds(20)), 0)
      << ReadFile(daemon.stderr_path);
}

TEST_F(DaemonBinaryTest, ShortSpinningOpenMpWorkersKeepThePid) {
  const std::string environment =
      EnvironmentOfAServingDaemon({"--openmp_wait=short"});
  EXPECT_NE(environment.find("\nGOMP_SPINCOUNT=3000\n"), std::string::npos);
  EXPECT_EQ(environment.find("\nOMP_WAIT_POLICY="), std::string::npos);
}

TEST_F(DaemonBinaryTest, OpenMpWorkersSpinBoundedByDefault) {
  const std::string environment = EnvironmentOfAServingDaemon({});
  // The count the flag's help names (a black-box check of the binary).
  EXPECT_NE(environment.find("\nGOMP_SPINCOUNT=60000\n"), std::string::npos);
  EXPECT_EQ(environment.find("\nOMP_WAIT_POLICY="), std::string::npos);
}

TEST_F(DaemonBinaryTest, AnEnvironmentsOwnOpenMpWaitOutranksTheDefault) {
  const std::string environment =
      EnvironmentOfAServingDaemon({}, {"GOMP_SPINCOUNT=1234"});
  EXPECT_NE(environment.find("\nGOMP_SPINCOUNT=1234\n"), std::string::npos);
  EXPECT_EQ(environment.find("\nOMP_WAIT_POLICY="), std::string::npos);
}

TEST_F(DaemonBinaryTest, ExitsWhenIdle) {
  Process idle = Spawn(
      {"--socket=" + socket_, "--idle_exit_seconds=1", "--log_level=info"},
      directory_ + "/idle.err");
  EXPECT_EQ(WaitForExit(idle.pid, absl::Seconds(30)), 0)
      << ReadFile(idle.stderr_path);
  EXPECT_NE(ReadFile(idle.stderr_path).find("no client for 1s"),
            std::string::npos)
      << ReadFile(idle.stderr_path);
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);
}

}  // namespace
