// Socket folder squatting (issue 13, finding 1): the daemon refuses a
// socket folder that another user owns or can write, and never follows a
// symlink or removes anything but its own socket in it.
#include "device_daemon/server/socket_directory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/server/instance_lock.h"
#include "device_daemon/server/unix_listener.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpp/runtime_test_daemon.h"
#include "tests/cpp/second_user.h"

namespace openreg::daemon {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

struct Exit {
  int code = -1;  // -1: still running after the timeout (then killed)
  std::string stderr_text;
};

// Runs the daemon on `socket` and waits for it to exit (a refused folder
// ends it at once); its stderr goes to `stderr_path`.
Exit RunDaemonUntilExit(const std::string& socket,
                        const std::string& stderr_path) {
  const std::string binary = DaemonBinaryPath();
  const std::string flag = "--socket=" + socket;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd =
        open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
    execl(binary.c_str(), binary.c_str(), flag.c_str(),
          "--memory_per_device=16MiB", static_cast<char*>(nullptr));
    _exit(127);
  }
  Exit result;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.stderr_text = ReadFile(stderr_path);
      return result;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  result.stderr_text = ReadFile(stderr_path);
  return result;
}

bool Exists(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

// A unix socket bound at `path`, left behind as a crashed daemon would.
void BindStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  close(fd);
}

class SocketDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    top_ = MakeSocketDirectory();
    ASSERT_FALSE(top_.empty());
    // A file of ours that a planted symlink points at.
    victim_ = top_ + "/precious";
    WriteFile(victim_, "precious data\n");
  }
  void TearDown() override { RemoveSocketDirectory(top_); }

  std::string top_;
  std::string victim_;
};

TEST_F(SocketDirectoryTest, CreatesAMissingFolderPrivate) {
  absl::StatusOr<SocketDirectory> directory =
      SocketDirectory::Open(top_ + "/run/d.sock");
  ASSERT_TRUE(directory.ok()) << directory.status();
  struct stat info;
  ASSERT_EQ(stat((top_ + "/run").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(info.st_uid, getuid());
  EXPECT_EQ(directory->path(), top_ + "/run");
  // A root-owned sticky folder such as /tmp is fine: nobody can replace
  // another user's file there.
  EXPECT_TRUE(SocketDirectory::Open("/tmp/openreg-never-created.sock").ok());
}

TEST_F(SocketDirectoryTest, RefusesAFolderOthersCanWrite) {
  const std::string folder = top_ + "/open";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  for (mode_t mode : {0777, 0770, 0722}) {
    ASSERT_EQ(chmod(folder.c_str(), mode), 0);
    absl::StatusOr<SocketDirectory> directory =
        SocketDirectory::Open(folder + "/d.sock");
    ASSERT_FALSE(directory.ok()) << mode;
    EXPECT_EQ(directory.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(directory.status().message(),
                HasSubstr(folder + " is writable by other users"));
    EXPECT_THAT(directory.status().message(), HasSubstr("chmod 700"));
  }
  // The daemon itself says so and exits.
  Exit daemon = RunDaemonUntilExit(folder + "/d.sock", top_ + "/daemon.err");
  EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
  EXPECT_THAT(daemon.stderr_text, HasSubstr("writable by other users"));
  EXPECT_FALSE(Exists(folder + "/d.sock.lock"));
  EXPECT_FALSE(Exists(folder + "/d.sock"));
}

TEST_F(SocketDirectoryTest, RefusesASymlinkInPlaceOfTheFolder) {
  const std::string real = top_ + "/real";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(symlink(real.c_str(), (top_ + "/link").c_str()), 0);
  absl::StatusOr<SocketDirectory> directory =
      SocketDirectory::Open(top_ + "/link/d.sock");
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(directory.status().message(), HasSubstr("symbolic link"));
}

TEST_F(SocketDirectoryTest, NeverWritesThroughASymlinkedLockFile) {
  const std::string folder = top_ + "/run";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(symlink(victim_.c_str(), (folder + "/d.sock.lock").c_str()), 0);
  Exit daemon = RunDaemonUntilExit(folder + "/d.sock", top_ + "/daemon.err");
  EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
  EXPECT_THAT(daemon.stderr_text,
              HasSubstr(folder + "/d.sock.lock is a symbolic link"));
  EXPECT_EQ(ReadFile(victim_), "precious data\n");

  // A hard link to our file is refused too: the pid would land in it.
  ASSERT_EQ(unlink((folder + "/d.sock.lock").c_str()), 0);
  ASSERT_EQ(link(victim_.c_str(), (folder + "/d.sock.lock").c_str()), 0);
  daemon = RunDaemonUntilExit(folder + "/d.sock", top_ + "/daemon.err");
  EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
  EXPECT_THAT(daemon.stderr_text, HasSubstr("single link"));
  EXPECT_EQ(ReadFile(victim_), "precious data\n");
}

// A client that waits for the socket file (a test's readiness check, an
// autospawning client) connects as soon as it sees it: the file never
// exists before the socket listens with its final mode.
TEST_F(SocketDirectoryTest, ASocketAcceptsConnectionsTheMomentItsFileAppears) {
  const std::string folder = top_ + "/ready";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  const std::string socket = folder + "/d.sock";
  absl::StatusOr<SocketDirectory> directory = SocketDirectory::Open(socket);
  ASSERT_TRUE(directory.ok()) << directory.status();
  const int watch = inotify_init1(IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, folder.c_str(), IN_CREATE | IN_MOVED_TO),
            0);
  for (int round = 0; round < 20; ++round) {
    UnixListener listener(&*directory, socket, "test socket");
    absl::Status opened;
    std::thread opener([&] { opened = listener.Open(); });
    bool appeared = false;
    while (!appeared) {
      alignas(inotify_event) char events[4096];
      const ssize_t size = read(watch, events, sizeof(events));
      ASSERT_GT(size, 0);
      for (char* at = events; at < events + size;) {
        const auto* event = reinterpret_cast<const inotify_event*>(at);
        if (event->len > 0 && std::string(event->name) == "d.sock") {
          appeared = true;
        }
        at += sizeof(inotify_event) + event->len;
      }
    }
    absl::StatusOr<int> client = ConnectUnix(socket);
    EXPECT_TRUE(client.ok()) << "round " << round << ": " << client.status();
    struct stat info;
    ASSERT_EQ(lstat(socket.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    if (client.ok()) close(*client);
    opener.join();
    ASSERT_TRUE(opened.ok()) << opened;
    listener.Close();
  }
  close(watch);
  // Nothing of the binding is left in the folder.
  EXPECT_EQ(rmdir(folder.c_str()), 0) << std::strerror(errno);
}

TEST_F(SocketDirectoryTest, RemovesOnlyItsOwnStaleSockets) {
  const std::string folder = top_ + "/run";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  const std::string socket = folder + "/d.sock";
  // A symlink where the socket goes: neither followed nor removed.
  ASSERT_EQ(symlink(victim_.c_str(), socket.c_str()), 0);
  Exit daemon = RunDaemonUntilExit(socket, top_ + "/daemon.err");
  EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
  EXPECT_THAT(daemon.stderr_text,
              HasSubstr(socket + " is a symbolic link, not a socket left by "
                                 "a daemon of uid "));
  EXPECT_EQ(ReadFile(victim_), "precious data\n");
  char target[256] = {};
  EXPECT_GT(readlink(socket.c_str(), target, sizeof(target) - 1), 0);

  // A regular file where the attach socket goes: not removed either.
  ASSERT_EQ(unlink(socket.c_str()), 0);
  WriteFile(socket + ".attach", "not a socket\n");
  daemon = RunDaemonUntilExit(socket, top_ + "/daemon.err");
  EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
  EXPECT_THAT(daemon.stderr_text,
              HasSubstr(socket + ".attach is a regular file"));
  EXPECT_EQ(ReadFile(socket + ".attach"), "not a socket\n");

  // Our own stale sockets are removed and the daemon serves.
  ASSERT_EQ(unlink((socket + ".attach").c_str()), 0);
  BindStaleSocket(socket);
  BindStaleSocket(socket + ".attach");
  TestDaemon served;
  absl::Status started = served.Start(socket, {"--memory_per_device=16MiB"});
  EXPECT_TRUE(started.ok()) << started;
  EXPECT_EQ(served.Stop(), 0);
}

class SquattedFolderTest : public SocketDirectoryTest {
 protected:
  void SetUp() override {
    const std::string why_not = WhyNoSecondUser();
    if (!why_not.empty()) GTEST_SKIP() << why_not;
    SocketDirectoryTest::SetUp();
    absl::StatusOr<std::unique_ptr<SecondUser>> user = SecondUser::Create();
    ASSERT_TRUE(user.ok()) << user.status();
    intruder_ = *std::move(user);
    // The intruder reaches the test folder as /tmp/openreg-$UID is reached.
    ASSERT_EQ(chmod(top_.c_str(), 0711), 0);
  }
  void TearDown() override {
    if (intruder_ == nullptr) return;
    SocketDirectoryTest::TearDown();
    intruder_.reset();
  }

  // The intruder's folder with `mode`, holding the intruder's symlink
  // d.sock.lock -> the victim, as made before the daemon's first start.
  std::string Squat(const std::string& name, mode_t mode) {
    const std::string folder = top_ + "/" + name;
    EXPECT_EQ(mkdir(folder.c_str(), 0700), 0);
    EXPECT_EQ(symlink(victim_.c_str(), (folder + "/d.sock.lock").c_str()), 0);
    EXPECT_EQ(lchown((folder + "/d.sock.lock").c_str(), intruder_->uid(),
                     intruder_->gid()),
              0);
    EXPECT_EQ(chown(folder.c_str(), intruder_->uid(), intruder_->gid()), 0);
    EXPECT_EQ(chmod(folder.c_str(), mode), 0);
    return folder;
  }

  std::unique_ptr<SecondUser> intruder_;
};

TEST_F(SquattedFolderTest, RefusesAFolderOfAnotherUser) {
  // Sticky or not, the folder's owner can replace anything in it.
  for (mode_t mode : {01777, 0755, 0700}) {
    const std::string folder =
        Squat(absl::StrCat("squat", static_cast<int>(mode)), mode);
    absl::StatusOr<SocketDirectory> directory =
        SocketDirectory::Open(folder + "/d.sock");
    ASSERT_FALSE(directory.ok()) << mode;
    EXPECT_EQ(directory.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(
        directory.status().message(),
        HasSubstr(absl::StrCat(folder, " belongs to uid ", intruder_->uid(),
                               ", not to uid ", getuid())));

    Exit daemon = RunDaemonUntilExit(folder + "/d.sock", top_ + "/daemon.err");
    EXPECT_EQ(daemon.code, 1) << daemon.stderr_text;
    EXPECT_THAT(daemon.stderr_text, HasSubstr(" belongs to uid "));
    EXPECT_EQ(ReadFile(victim_), "precious data\n");
    EXPECT_FALSE(Exists(folder + "/d.sock"));
    EXPECT_FALSE(Exists(folder + "/d.sock.attach"));
  }
}

TEST_F(SquattedFolderTest, RefusesLockFilesAndSocketsOfAnotherUser) {
  // A folder we may use (root's sticky /tmp is like this) where the
  // intruder made the names first.
  const std::string folder = top_ + "/shared";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(chmod(folder.c_str(), 01777), 0);
  const std::string lock = folder + "/d.sock.lock";
  WriteFile(lock, "1\n");
  ASSERT_EQ(chmod(lock.c_str(), 0666), 0);
  ASSERT_EQ(chown(lock.c_str(), intruder_->uid(), intruder_->gid()), 0);
  absl::StatusOr<SocketDirectory> directory =
      SocketDirectory::Open(folder + "/d.sock");
  ASSERT_TRUE(directory.ok()) << directory.status();
  absl::StatusOr<InstanceLock> acquired =
      InstanceLock::Acquire(*directory, folder + "/d.sock");
  ASSERT_FALSE(acquired.ok());
  EXPECT_THAT(
      acquired.status().message(),
      HasSubstr(absl::StrCat("is not a regular file of uid ", getuid())));
  EXPECT_EQ(ReadFile(lock), "1\n");

  // The intruder's socket where ours goes is not removed.
  const std::string socket = folder + "/e.sock";
  BindStaleSocket(socket);
  ASSERT_EQ(lchown(socket.c_str(), intruder_->uid(), intruder_->gid()), 0);
  absl::Status removed = directory->RemoveStaleSocket("e.sock");
  EXPECT_EQ(removed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(removed.message(),
              HasSubstr(absl::StrCat("is a socket of uid ", intruder_->uid())));
  EXPECT_TRUE(Exists(socket));
}

}  // namespace
}  // namespace openreg::daemon
