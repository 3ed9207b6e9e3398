// The daemon's executor pool as a whole
// (device_daemon/devices/device_scheduler.h): its threads follow devices, not
// sessions or streams. Runs the real daemon binary and attaches raw sessions to
// it, as resource_limits_test does.
#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/doorbell.h"
#include "data_plane/session_layout.h"
#include "data_plane/shared_memory.h"
#include "data_plane/unix_socket.h"
#include "gtest/gtest.h"
#include "protos/commands.pb.h"
#include "tests/cpp/runtime_test_daemon.h"
#include "tests/cpp/stream_driver.h"

namespace openreg {
namespace {

constexpr int kDevices = 2;
constexpr int kExecutors = 2;
constexpr int kSessions = 64;

int ThreadCount(pid_t pid) {
  DIR* tasks = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (tasks == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(tasks);
  return count;
}

// A session attached over the raw protocol, with its segment and the
// daemon's doorbell page mapped.
struct RawClient {
  int connection = -1;
  AttachWelcome welcome{};
  SharedMemory segment;
  SharedMemory doorbells;
  std::vector<int> ring_fds;  // one per device
  ~RawClient() {
    if (connection >= 0) close(connection);
    for (const int ring_fd : ring_fds) close(ring_fd);
  }
  SessionView view() const { return SessionView(segment.data()); }
  StreamDriver Driver(uint32_t slot) const {
    const int device = view().stream(slot)->device;
    return StreamDriver(
        view().stream(slot), view().ring_buffer(slot),
        view().header()->limits.ring_bytes,
        &static_cast<DoorbellPage*>(doorbells.data())->devices[device],
        ring_fds[device]);
  }
};

std::unique_ptr<RawClient> AttachRaw(const std::string& socket) {
  auto client = std::make_unique<RawClient>();
  absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket));
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return nullptr;
  client->connection = *fd;
  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  std::strncpy(hello.client_name, "executor_pool_test",
               sizeof(hello.client_name) - 1);
  EXPECT_TRUE(SendMessage(*fd, &hello, sizeof(hello)).ok());
  int fds[kMaxWelcomeFds];
  absl::Status received =
      ReceiveMessage(*fd, &client->welcome, sizeof(client->welcome),
                     absl::Seconds(10), fds, kMaxWelcomeFds);
  EXPECT_TRUE(received.ok()) << received;
  EXPECT_EQ(client->welcome.error_code, 0) << client->welcome.message;
  if (!received.ok() || client->welcome.error_code != 0) return nullptr;
  absl::StatusOr<SharedMemory> segment =
      SharedMemory::Map(fds[0], client->welcome.segment_bytes);
  absl::StatusOr<SharedMemory> doorbells =
      SharedMemory::Map(fds[1], client->welcome.doorbell_bytes);
  EXPECT_TRUE(segment.ok() && doorbells.ok());
  if (!segment.ok() || !doorbells.ok()) return nullptr;
  client->segment = *std::move(segment);
  client->doorbells = *std::move(doorbells);
  client->ring_fds.assign(fds + kWelcomeSharedFds,
                          fds + WelcomeFdCount(client->welcome.device_count));
  return client;
}

// A command every stream accepts: wait for its own command 0.
proto::Command NoOp() {
  proto::Command command;
  command.mutable_wait_stream()->set_stream_slot(0);
  command.mutable_wait_stream()->set_sequence(0);
  return command;
}

class ExecutorPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    absl::Status started = daemon_.Start(
        socket_, {absl::StrCat("--devices=", kDevices),
                  absl::StrCat("--executors_per_device=", kExecutors),
                  "--memory_per_device=16MiB", "--max_sessions_per_process=0"});
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    if (daemon_.running()) EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Log();
    RemoveSocketDirectory(directory_);
  }

  std::string directory_;
  std::string socket_;
  TestDaemon daemon_;
};

// 64 sessions with 128 streams, all of which ran a command, cost the daemon
// no thread: the devices' executors run every stream.
TEST_F(ExecutorPoolTest, DaemonThreadsDoNotGrowWithSessionsOrStreams) {
  absl::SleepFor(absl::Milliseconds(200));  // startup threads settle
  const int idle = ThreadCount(daemon_.pid());
  ASSERT_GT(idle, kDevices * kExecutors);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < kSessions; ++i) {
    clients.push_back(AttachRaw(socket_));
    ASSERT_NE(clients.back(), nullptr);
  }
  // Every stream of every session runs a command and parks again.
  for (const auto& client : clients) {
    for (uint32_t slot = 0; slot < kDevices; ++slot) {
      StreamDriver stream = client->Driver(slot);
      ASSERT_EQ(stream.Run(NoOp()), std::nullopt);
    }
  }
  const int attached = ThreadCount(daemon_.pid());
  std::cout << "daemon threads: " << idle << " idle, " << attached << " with "
            << kSessions << " sessions (" << kSessions * kDevices
            << " streams)\n";
  // A few threads of other parts (gRPC, logging) may come and go; a thread
  // per stream would be 128 more.
  EXPECT_LE(attached, idle + 4) << "idle daemon: " << idle << " threads; "
                                << kSessions << " sessions: " << attached;
  // And in absolute terms: executors plus a small constant.
  EXPECT_LE(attached, kDevices * kExecutors + 24);
  // Commands from all sessions at once, streams parked in between.
  for (int round = 0; round < 3; ++round) {
    std::vector<StreamDriver> drivers;
    std::vector<uint64_t> sequences;
    for (const auto& client : clients) {
      drivers.push_back(client->Driver(0));
      sequences.push_back(drivers.back().Submit(NoOp()));
    }
    for (size_t i = 0; i < drivers.size(); ++i) {
      ASSERT_TRUE(drivers[i].WaitFor(sequences[i], absl::Seconds(10)));
    }
  }
  EXPECT_LE(ThreadCount(daemon_.pid()), idle + 4);
}

}  // namespace
}  // namespace openreg
