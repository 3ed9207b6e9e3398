// The runtime client without a daemon: clear errors, fast, and autospawn.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/unix_socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

class DaemonUnavailableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    UseSocket(socket_);
    unsetenv("OPENREG_DAEMON_BINARY");
  }
  void TearDown() override {
    Shutdown();
    RemoveSocketDirectory(directory_);
  }

  std::string directory_;
  std::string socket_;
};

TEST_F(DaemonUnavailableTest, CallsFailFastWithInstructions) {
  EXPECT_EQ(DefaultSocketPath(), socket_);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Init(), Error::kDaemonUnavailable);
  const std::string message = GetLastErrorMessage();
  EXPECT_THAT(message, HasSubstr("no daemon is listening on " + socket_));
  EXPECT_THAT(message, HasSubstr("openreg-daemon --socket=" + socket_));
  EXPECT_THAT(message, HasSubstr("OPENREG_AUTOSPAWN=0"));
  int count = 0;
  EXPECT_EQ(GetDeviceCount(&count), Error::kDaemonUnavailable);
  void* pointer = nullptr;
  EXPECT_EQ(Malloc(&pointer, 16), Error::kDaemonUnavailable);
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kDaemonUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_FALSE(IsConnected());
  EXPECT_EQ(LastSubmitted(kDefaultStream), 0u);
  // No connection needed for these.
  int device = -1;
  EXPECT_EQ(GetDevice(&device), Error::kSuccess);
  EXPECT_EQ(Shutdown(), Error::kSuccess);
}

TEST_F(DaemonUnavailableTest, AutospawnWithoutKnownBinary) {
  unsetenv("OPENREG_AUTOSPAWN");
  EXPECT_EQ(Init(), Error::kDaemonUnavailable);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("OPENREG_DAEMON_BINARY"));
}

TEST_F(DaemonUnavailableTest, AutospawnNonExecutableBinary) {
  unsetenv("OPENREG_AUTOSPAWN");
  setenv("OPENREG_DAEMON_BINARY", "/nonexistent/openreg-daemon", 1);
  EXPECT_EQ(Init(), Error::kDaemonUnavailable);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("/nonexistent/openreg-daemon"));
}

TEST_F(DaemonUnavailableTest, AutospawnStartsADaemon) {
  unsetenv("OPENREG_AUTOSPAWN");
  setenv("OPENREG_IDLE_EXIT_SECONDS", "1", 1);
  setenv("OPENREG_DAEMON_ARGS", " --devices=3  --memory_per_device=64MiB ", 1);
  SetDaemonBinary(DaemonBinaryPath());
  ASSERT_EQ(Init(), Error::kSuccess) << GetLastErrorMessage();
  unsetenv("OPENREG_DAEMON_ARGS");
  SetDaemonBinary("");

  // The daemon's pid, to stop it for sure at the end.
  pid_t daemon_pid = -1;
  {
    absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
    ASSERT_TRUE(fd.ok()) << fd.status();
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(*fd);
    close(*fd);
    ASSERT_TRUE(peer.ok()) << peer.status();
    daemon_pid = peer->pid;
  }
  ASSERT_GT(daemon_pid, 0);
  EXPECT_NE(daemon_pid, getpid());

  int count = 0;
  EXPECT_EQ(GetDeviceCount(&count), Error::kSuccess);
  EXPECT_EQ(count, 3);  // $OPENREG_DAEMON_ARGS reached the daemon
  EXPECT_EQ(access((directory_ + "/daemon.log").c_str(), F_OK), 0);

  // Without clients, the daemon exits after its idle limit.
  ASSERT_EQ(Shutdown(), Error::kSuccess);
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (kill(daemon_pid, 0) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const bool exited = kill(daemon_pid, 0) != 0;
  if (!exited) kill(daemon_pid, SIGTERM);
  EXPECT_TRUE(exited) << "the autospawned daemon did not idle-exit";
  unsetenv("OPENREG_IDLE_EXIT_SECONDS");
}

// Runs only inside the child processes of RacingClientsShareOneDaemon.
TEST_F(DaemonUnavailableTest, DISABLED_RacingChild) {
  UseSocket(std::getenv("OPENREG_TEST_RACE_SOCKET"));
  unsetenv("OPENREG_AUTOSPAWN");
  SetDaemonBinary(std::getenv("OPENREG_TEST_RACE_BINARY"));
  ASSERT_EQ(Init(), Error::kSuccess) << GetLastErrorMessage();
  int count = 0;
  ASSERT_EQ(GetDeviceCount(&count), Error::kSuccess);
  ASSERT_EQ(Shutdown(), Error::kSuccess);
}

TEST_F(DaemonUnavailableTest, RacingClientsShareOneDaemon) {
  // Several processes find no daemon at once and each starts one; the
  // losers exit (the winner holds the daemon's lock) and every client ends
  // up attached to the winner.
  setenv("OPENREG_TEST_RACE_SOCKET", socket_.c_str(), 1);
  setenv("OPENREG_TEST_RACE_BINARY", DaemonBinaryPath().c_str(), 1);
  setenv("OPENREG_IDLE_EXIT_SECONDS", "2", 1);
  std::string self(4096, '\0');
  self.resize(readlink("/proc/self/exe", self.data(), self.size()));
  std::vector<std::string> arguments = {
      self, "--gtest_also_run_disabled_tests",
      "--gtest_filter=DaemonUnavailableTest.DISABLED_RacingChild"};
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t child = -1;
    ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv.data(),
                          environ),
              0);
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a racing client failed (status " << status << ")";
  }
  unsetenv("OPENREG_IDLE_EXIT_SECONDS");
  // Stop every daemon the clients started, by the pids their spawn lines
  // in the log name, before the directory goes away: a late loser could
  // otherwise recreate it and serve there until its idle limit.
  std::ifstream log(directory_ + "/daemon.log");
  std::vector<pid_t> daemons;
  for (std::string line; std::getline(log, line);) {
    const size_t label = line.find("(daemon pid ");
    if (label != std::string::npos) {
      daemons.push_back(std::atoi(line.c_str() + label + 12));
    }
  }
  EXPECT_FALSE(daemons.empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  for (pid_t daemon : daemons) {
    if (daemon <= 0) continue;
    kill(daemon, SIGTERM);
    while (kill(daemon, 0) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_NE(kill(daemon, 0), 0) << "daemon " << daemon << " did not exit";
  }
}

}  // namespace
}  // namespace openreg
