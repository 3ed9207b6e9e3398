// Hostile peers on the attach socket (issue 13, findings 3 and 4), against
// the real daemon binary: connections that send part of a hello and wait
// must not delay anyone else's attach, and file descriptors passed along
// with a hello must not stay open in the daemon.
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "gtest/gtest.h"
#include "openreg/runtime.h"
#include "protos/errors.pb.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

AttachHello ValidHello() {
  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  std::strncpy(hello.client_name, "attach_hostile_test",
               sizeof(hello.client_name) - 1);
  return hello;
}

// Sends `size` bytes with `fds` attached (SCM_RIGHTS).
void SendWithFds(int socket, const void* data, size_t size,
                 const std::vector<int>& fds) {
  iovec io{const_cast<void*>(data), size};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  ASSERT_EQ(sendmsg(socket, &message, MSG_NOSIGNAL),
            static_cast<ssize_t>(size));
}

int OpenFdCount(pid_t pid) {
  DIR* directory = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (directory == nullptr) return -1;
  int count = 0;
  while (readdir(directory) != nullptr) ++count;
  closedir(directory);
  return count - 2;  // "." and ".."
}

// The daemon's fd count once it has stopped changing (session teardown is
// asynchronous) or, within 10 s, fallen to `limit`.
int SettledFdCount(pid_t pid, int limit = 0) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int count = OpenFdCount(pid);
  int unchanged = 0;
  while (count > limit && unchanged < 10 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    const int next = OpenFdCount(pid);
    unchanged = next == count ? unchanged + 1 : 0;
    count = next;
  }
  return count;
}

class AttachHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    absl::Status started =
        daemon_.Start(socket_, {"--devices=1", "--memory_per_device=16MiB"});
    ASSERT_TRUE(started.ok()) << started;
    UseSocket(socket_);
  }
  void TearDown() override {
    Shutdown();
    if (daemon_.running()) {
      EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Log();
    }
    RemoveSocketDirectory(directory_);
  }

  // A complete attach; returns the welcome's error code (or -1) and closes
  // the received segment fd.
  int AttachOnce(int* connection_out = nullptr) {
    absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
    if (!fd.ok()) return -1;
    const AttachHello hello = ValidHello();
    if (!SendMessage(*fd, &hello, sizeof(hello)).ok()) return -1;
    AttachWelcome welcome{};
    int segment_fd = -1;
    const absl::Status received = ReceiveMessage(
        *fd, &welcome, sizeof(welcome), absl::Seconds(10), &segment_fd);
    if (segment_fd >= 0) close(segment_fd);
    if (connection_out != nullptr) {
      *connection_out = *fd;
    } else {
      close(*fd);
    }
    return received.ok() ? welcome.error_code : -1;
  }

  std::string directory_;
  std::string socket_;
  TestDaemon daemon_;
};

TEST_F(AttachHostileTest, PartialHellosDoNotDelayAnotherClientsAttach) {
  // 20 peers that send the first bytes of a hello and then wait.
  const AttachHello hello = ValidHello();
  std::vector<int> stalled;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
    ASSERT_TRUE(fd.ok()) << fd.status();
    ASSERT_TRUE(SendMessage(*fd, &hello, 10).ok());
    stalled.push_back(*fd);
  }
  // A real client's first use of the device, with the runtime client's own
  // attach deadline.
  EXPECT_EQ(Init(), Error::kSuccess) << GetLastErrorMessage();
  int count = 0;
  EXPECT_EQ(GetDeviceCount(&count), Error::kSuccess);
  EXPECT_EQ(count, 1);
  // A stalled peer that finishes its hello late still gets its session.
  ASSERT_TRUE(SendMessage(stalled[0],
                          reinterpret_cast<const char*>(&hello) + 10,
                          sizeof(hello) - 10)
                  .ok());
  AttachWelcome welcome{};
  int segment_fd = -1;
  ASSERT_TRUE(ReceiveMessage(stalled[0], &welcome, sizeof(welcome),
                             absl::Seconds(10), &segment_fd)
                  .ok());
  EXPECT_EQ(welcome.error_code, 0) << welcome.message;
  EXPECT_GE(segment_fd, 0);
  if (segment_fd >= 0) close(segment_fd);
  for (int fd : stalled) close(fd);
}

TEST_F(AttachHostileTest, AFloodOfSilentConnectionsIsBounded) {
  const int before = OpenFdCount(daemon_.pid());
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
    ASSERT_TRUE(fd.ok()) << fd.status();
    silent.push_back(*fd);
  }
  EXPECT_EQ(AttachOnce(), 0);
  // The daemon keeps a bounded number of them (64), whatever the flood.
  EXPECT_LE(OpenFdCount(daemon_.pid()), before + 64 + 8);
  for (int fd : silent) close(fd);
}

TEST_F(AttachHostileTest, DescriptorsPassedWithAHelloAreClosed) {
  // One session first, so that whatever the daemon opens lazily is open.
  ASSERT_EQ(AttachOnce(), 0);
  const pid_t pid = daemon_.pid();
  const int before = SettledFdCount(pid);
  ASSERT_GT(before, 0);

  const AttachHello hello = ValidHello();
  AttachHello stranger = ValidHello();
  stranger.protocol_version = kProtocolVersion + 1;
  for (int i = 0; i < 50; ++i) {
    int fds[3];
    for (int& fd : fds) fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const std::vector<int> passed(std::begin(fds), std::end(fds));
    // A hello that attaches, in one piece...
    {
      absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
      ASSERT_TRUE(fd.ok());
      SendWithFds(*fd, &hello, sizeof(hello), passed);
      AttachWelcome welcome{};
      int segment_fd = -1;
      ASSERT_TRUE(ReceiveMessage(*fd, &welcome, sizeof(welcome),
                                 absl::Seconds(10), &segment_fd)
                      .ok());
      EXPECT_EQ(welcome.error_code, 0) << welcome.message;
      if (segment_fd >= 0) close(segment_fd);
      // ...and more fds after the welcome, while the session lives.
      const char extra = 'x';
      SendWithFds(*fd, &extra, 1, passed);
      close(*fd);
    }
    // A refused hello in two pieces, fds on both.
    {
      absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket_));
      ASSERT_TRUE(fd.ok());
      SendWithFds(*fd, &stranger, 10, passed);
      SendWithFds(*fd, reinterpret_cast<const char*>(&stranger) + 10,
                  sizeof(stranger) - 10, passed);
      AttachWelcome welcome{};
      ASSERT_TRUE(
          ReceiveMessage(*fd, &welcome, sizeof(welcome), absl::Seconds(10))
              .ok());
      EXPECT_EQ(welcome.error_code, proto::VERSION_MISMATCH);
      close(*fd);
    }
    for (int fd : fds) close(fd);
  }
  EXPECT_LE(SettledFdCount(pid, before), before)
      << "the daemon kept descriptors that clients passed to it";
  // And it still serves.
  EXPECT_EQ(AttachOnce(), 0);
}

}  // namespace
}  // namespace openreg
