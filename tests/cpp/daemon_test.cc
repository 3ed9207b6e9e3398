// A whole daemon in-process: gRPC control plane on a unix socket, attach
// socket with SO_PEERCRED and fd passing, and the data plane through the
// segment mapped from the received fd — the same paths a client uses.
#include "device_daemon/server/daemon.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/session_layout.h"
#include "data_plane/shared_memory.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "protos/control.grpc.pb.h"
#include "tests/cpp/stream_driver.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kDeviceMemory = 32 << 20;

struct Client {
  int fd = -1;
  AttachWelcome welcome{};
  SharedMemory segment;
  SharedMemory doorbells;     // the daemon's doorbell page
  std::vector<int> ring_fds;  // the session's ring fd of each device
  proto::SessionRef ref;

  SessionView view() const { return SessionView(segment.data()); }
  Doorbell* doorbell(int device) const {
    return &static_cast<DoorbellPage*>(doorbells.data())->devices[device];
  }
  void HangUp() {
    if (fd >= 0) close(fd);
    fd = -1;
    for (const int ring_fd : ring_fds) close(ring_fd);
    ring_fds.clear();
  }
  ~Client() { HangUp(); }
};

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/openreg-daemon-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    options_.devices = 2;
    options_.memory_per_device = kDeviceMemory;
    options_.socket_path = directory_ + "/daemon.sock";
    options_.session_limits.max_streams = 8;
    options_.session_limits.max_events = 16;
    options_.session_limits.ring_bytes = 64 * 1024;
    options_.session_limits.reply_bytes = 64 * 1024;
    options_.session_limits.staging_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<Daemon>> daemon =
        Daemon::Start(options_, std::make_unique<AtenOpRunner>());
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stub_ = proto::DeviceDaemon::NewStub(grpc::CreateChannel(
        "unix:" + options_.socket_path, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    daemon_.reset();
    unlink((options_.socket_path + ".lock").c_str());
    rmdir(directory_.c_str());
  }

  std::unique_ptr<Client> Attach(uint32_t protocol = kProtocolVersion,
                                 uint32_t magic = kAttachMagic) {
    auto client = std::make_unique<Client>();
    absl::StatusOr<int> fd = ConnectUnix(daemon_->attach_socket_path());
    EXPECT_TRUE(fd.ok()) << fd.status();
    client->fd = *fd;
    AttachHello hello{};
    hello.magic = magic;
    hello.protocol_version = protocol;
    std::strncpy(hello.client_name, "daemon_test", sizeof(hello.client_name));
    EXPECT_TRUE(SendMessage(client->fd, &hello, sizeof(hello)).ok());
    int fds[kMaxWelcomeFds];
    absl::Status received =
        ReceiveMessage(client->fd, &client->welcome, sizeof(client->welcome),
                       absl::Seconds(10), fds, kMaxWelcomeFds);
    EXPECT_TRUE(received.ok()) << received;
    const int segment_fd = fds[0];
    if (client->welcome.error_code == 0) {
      // The segment, the doorbell page, one ring fd per device, no more.
      EXPECT_EQ(client->welcome.device_count, 2u);
      const size_t passed = WelcomeFdCount(client->welcome.device_count);
      for (size_t i = 0; i < kMaxWelcomeFds; ++i) {
        if (i < passed) {
          EXPECT_GE(fds[i], 0) << "fd " << i;
        } else {
          EXPECT_EQ(fds[i], -1) << "fd " << i;
        }
      }
      client->ring_fds.assign(fds + kWelcomeSharedFds, fds + passed);
      absl::StatusOr<SharedMemory> segment =
          SharedMemory::Map(segment_fd, client->welcome.segment_bytes);
      EXPECT_TRUE(segment.ok()) << segment.status();
      client->segment = *std::move(segment);
      EXPECT_EQ(client->welcome.doorbell_bytes, kDoorbellPageBytes);
      absl::StatusOr<SharedMemory> doorbells =
          SharedMemory::Map(fds[1], client->welcome.doorbell_bytes);
      EXPECT_TRUE(doorbells.ok()) << doorbells.status();
      client->doorbells = *std::move(doorbells);
      client->ref.set_session_id(client->welcome.session_id);
      client->ref.set_token(client->welcome.token);
    } else {
      EXPECT_EQ(segment_fd, -1);
    }
    return client;
  }

  proto::GetStatsReply Stats() {
    grpc::ClientContext context;
    proto::GetStatsReply reply;
    EXPECT_TRUE(stub_->GetStats(&context, {}, &reply).ok());
    return reply;
  }

  proto::AllocateReply Allocate(const proto::SessionRef& ref, int device,
                                uint64_t size) {
    grpc::ClientContext context;
    proto::AllocateRequest request;
    *request.mutable_session() = ref;
    request.set_device(device);
    request.set_size(size);
    proto::AllocateReply reply;
    EXPECT_TRUE(stub_->Allocate(&context, request, &reply).ok());
    return reply;
  }

  // Frees through the data plane, as the runtime does: a FreeMemory
  // command on the session's default stream. Returns the stream's error
  // record (code OK when the command succeeded).
  StreamErrorRecord Free(Client& client, uint64_t address) {
    SessionView view = client.view();
    StreamDriver stream(view.stream(0), view.ring_buffer(0),
                        view.header()->limits.ring_bytes, client.doorbell(0),
                        client.ring_fds[0]);
    proto::Command command;
    command.mutable_free()->set_address(address);
    return stream.Run(command).value_or(StreamErrorRecord{});
  }

  // Polls GetStats until `done` holds (teardown is asynchronous to the
  // client's hang-up).
  template <typename Done>
  bool EventuallyStats(Done done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (done(Stats())) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  std::string directory_;
  DaemonOptions options_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<proto::DeviceDaemon::Stub> stub_;
};

TEST_F(DaemonTest, HandshakeReportsTheDaemon) {
  grpc::ClientContext context;
  proto::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  proto::HandshakeReply reply;
  ASSERT_TRUE(stub_->Handshake(&context, request, &reply).ok());
  EXPECT_EQ(reply.status().code(), proto::OK);
  EXPECT_EQ(reply.protocol_version(), kProtocolVersion);
  EXPECT_EQ(reply.device_count(), 2);
  EXPECT_EQ(reply.daemon_pid(), getpid());
  EXPECT_EQ(reply.attach_socket(), options_.socket_path + ".attach");
  EXPECT_FALSE(reply.daemon_version().empty());
}

TEST_F(DaemonTest, HandshakeExplainsAVersionMismatch) {
  grpc::ClientContext context;
  proto::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion + 41);
  proto::HandshakeReply reply;
  ASSERT_TRUE(stub_->Handshake(&context, request, &reply).ok());
  EXPECT_EQ(reply.status().code(), proto::VERSION_MISMATCH);
  EXPECT_EQ(reply.status().message(),
            absl::StrCat("client protocol ", kProtocolVersion + 41,
                         ", daemon protocol ", kProtocolVersion,
                         ": install matching torch_openreg and "
                         "openreg-daemon"));
}

TEST_F(DaemonTest, SocketsArePrivate) {
  struct stat info;
  ASSERT_EQ(stat(directory_.c_str(), &info), 0);
  ASSERT_EQ(stat(options_.socket_path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(daemon_->attach_socket_path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

TEST_F(DaemonTest, AttachHandsOutTheSessionSegment) {
  std::unique_ptr<Client> client = Attach();
  ASSERT_EQ(client->welcome.error_code, 0) << client->welcome.message;
  EXPECT_EQ(client->welcome.magic, kAttachMagic);
  EXPECT_EQ(client->welcome.device_count, 2u);
  EXPECT_NE(client->welcome.token, 0u);
  const SessionHeader* header = client->view().header();
  EXPECT_EQ(header->magic, kSessionMagic);
  EXPECT_EQ(header->session_id, client->welcome.session_id);
  EXPECT_EQ(header->total_bytes, client->welcome.segment_bytes);
  for (uint32_t device = 0; device < 2; ++device) {
    EXPECT_EQ(client->view().stream(device)->state.load(),
              static_cast<uint32_t>(StreamState::kActive));
    EXPECT_EQ(client->view().stream(device)->device,
              static_cast<int32_t>(device));
  }
  std::unique_ptr<Client> second = Attach();
  EXPECT_NE(second->welcome.session_id, client->welcome.session_id);
  EXPECT_EQ(Stats().sessions_size(), 2);
}

TEST_F(DaemonTest, AttachRefusesOtherProtocolsAndGarbage) {
  std::unique_ptr<Client> old_client = Attach(kProtocolVersion + 1);
  EXPECT_EQ(old_client->welcome.error_code, proto::VERSION_MISMATCH);
  EXPECT_EQ(std::string(old_client->welcome.message),
            absl::StrCat("client protocol ", kProtocolVersion + 1,
                         ", daemon protocol ", kProtocolVersion,
                         ": install matching torch_openreg and "
                         "openreg-daemon"));
  std::unique_ptr<Client> stranger = Attach(kProtocolVersion, 0x12345678);
  EXPECT_EQ(stranger->welcome.error_code, proto::INVALID_VALUE);
  EXPECT_EQ(Stats().sessions_size(), 0);

  // A client that connects and says nothing does not block others.
  absl::StatusOr<int> silent = ConnectUnix(daemon_->attach_socket_path());
  ASSERT_TRUE(silent.ok());
  std::unique_ptr<Client> client = Attach();
  EXPECT_EQ(client->welcome.error_code, 0);
  close(*silent);
}

TEST_F(DaemonTest, MemoryThroughTheControlPlane) {
  std::unique_ptr<Client> client = Attach();
  proto::AllocateReply allocated = Allocate(client->ref, 1, 4096);
  ASSERT_EQ(allocated.status().code(), proto::OK)
      << allocated.status().message();
  EXPECT_NE(allocated.address(), 0u);
  EXPECT_EQ(allocated.total_bytes(), kDeviceMemory);
  EXPECT_EQ(allocated.free_bytes(), kDeviceMemory - 4096);

  proto::AllocateReply too_big = Allocate(client->ref, 0, kDeviceMemory * 2);
  EXPECT_EQ(too_big.status().code(), proto::OUT_OF_MEMORY);
  EXPECT_NE(too_big.status().message().find("requested"), std::string::npos);
  EXPECT_NE(too_big.status().message().find("free"), std::string::npos);
  EXPECT_NE(too_big.status().message().find("total"), std::string::npos);
  EXPECT_EQ(Allocate(client->ref, 5, 16).status().code(),
            proto::INVALID_DEVICE);

  EXPECT_EQ(Free(*client, allocated.address()).code, proto::OK);
  StreamErrorRecord twice = Free(*client, allocated.address());
  EXPECT_EQ(twice.code, proto::INVALID_VALUE);
  EXPECT_NE(twice.message.find("double free"), std::string::npos);
  EXPECT_EQ(Free(*client, 0x1234).code, proto::INVALID_VALUE);

  // Another session's pointer.
  std::unique_ptr<Client> other = Attach();
  const uint64_t theirs = Allocate(other->ref, 0, 64).address();
  StreamErrorRecord foreign = Free(*client, theirs);
  EXPECT_EQ(foreign.code, proto::INVALID_VALUE);
  EXPECT_NE(foreign.message.find("another session"), std::string::npos);

  proto::SessionRef forged = client->ref;
  forged.set_token(forged.token() + 1);
  EXPECT_EQ(Allocate(forged, 0, 16).status().code(), proto::INVALID_HANDLE);
}

TEST_F(DaemonTest, DataPlaneThroughTheMappedSegment) {
  std::unique_ptr<Client> client = Attach();
  const uint64_t buffer = Allocate(client->ref, 0, 1024).address();
  SessionView view = client->view();
  StreamDriver stream(view.stream(0), view.ring_buffer(0),
                      view.header()->limits.ring_bytes, client->doorbell(0),
                      client->ring_fds[0]);
  for (int i = 0; i < 1024; ++i) view.staging()[i] = static_cast<char>(i);
  proto::Command upload;
  upload.mutable_h2d()->set_dst(buffer);
  upload.mutable_h2d()->set_size(1024);
  ASSERT_EQ(stream.Run(upload), std::nullopt);
  proto::Command download;
  download.mutable_d2h()->set_src(buffer);
  download.mutable_d2h()->set_staging_offset(4096);
  download.mutable_d2h()->set_size(1024);
  ASSERT_EQ(stream.Run(download), std::nullopt);
  EXPECT_EQ(std::memcmp(view.staging(), view.staging() + 4096, 1024), 0);

  // A kernel on the device, visible in the stats.
  proto::Command negate;
  proto::LaunchOp* launch = negate.mutable_launch();
  launch->set_name("aten::neg_");
  proto::TensorRef* tensor = launch->add_arguments()->mutable_tensor();
  tensor->set_address(buffer);
  tensor->add_sizes(256);
  tensor->add_strides(1);
  tensor->set_dtype(3);  // int32
  *launch->add_outputs() = *tensor;
  ASSERT_EQ(stream.Run(negate), std::nullopt);
  const proto::GetStatsReply stats = Stats();
  ASSERT_EQ(stats.devices_size(), 2);
  EXPECT_EQ(stats.devices(0).kernels_executed(), 1u);
  EXPECT_EQ(stats.devices(0).copies_executed(), 2u);
  EXPECT_EQ(stats.devices(0).allocation_count(), 1u);
  EXPECT_EQ(stats.devices(0).total_bytes(), kDeviceMemory);
  ASSERT_EQ(stats.sessions_size(), 1);
  EXPECT_EQ(stats.sessions(0).session_id(), client->welcome.session_id);
  EXPECT_EQ(stats.sessions(0).pid(), getpid());
  EXPECT_EQ(stats.sessions(0).allocated_bytes(), 1024u);
  EXPECT_EQ(stats.sessions(0).commands_executed(), 3u);
  EXPECT_EQ(stats.sessions(0).streams(), 2u);
}

TEST_F(DaemonTest, StreamsAndEventsThroughTheControlPlane) {
  std::unique_ptr<Client> client = Attach();
  proto::CreateStreamRequest create;
  *create.mutable_session() = client->ref;
  create.set_device(1);
  create.set_priority(-1);
  proto::CreateStreamReply created;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->CreateStream(&context, create, &created).ok());
  }
  ASSERT_EQ(created.status().code(), proto::OK);
  EXPECT_GE(created.slot(), 2u);
  EXPECT_EQ(client->view().stream(created.slot())->device, 1);
  EXPECT_EQ(client->view().stream(created.slot())->state.load(),
            static_cast<uint32_t>(StreamState::kActive));

  proto::DestroyStreamRequest destroy;
  *destroy.mutable_session() = client->ref;
  destroy.set_slot(0);
  proto::DestroyStreamReply destroyed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->DestroyStream(&context, destroy, &destroyed).ok());
  }
  EXPECT_EQ(destroyed.status().code(), proto::INVALID_VALUE);
  destroy.set_slot(created.slot());
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->DestroyStream(&context, destroy, &destroyed).ok());
  }
  EXPECT_EQ(destroyed.status().code(), proto::OK);
  EXPECT_EQ(client->view().stream(created.slot())->state.load(),
            static_cast<uint32_t>(StreamState::kFree));

  proto::CreateEventRequest event_request;
  *event_request.mutable_session() = client->ref;
  proto::CreateEventReply event;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->CreateEvent(&context, event_request, &event).ok());
  }
  ASSERT_EQ(event.status().code(), proto::OK);
  EXPECT_EQ(client->view().event(event.slot())->in_use.load(), 1u);
  proto::DestroyEventRequest destroy_event;
  *destroy_event.mutable_session() = client->ref;
  destroy_event.set_slot(event.slot());
  proto::DestroyEventReply event_destroyed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->DestroyEvent(&context, destroy_event, &event_destroyed).ok());
  }
  EXPECT_EQ(event_destroyed.status().code(), proto::OK);
  EXPECT_EQ(client->view().event(event.slot())->in_use.load(), 0u);
}

TEST_F(DaemonTest, DeviceProperties) {
  proto::GetDevicePropertiesRequest request;
  request.set_device(1);
  proto::GetDevicePropertiesReply reply;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->GetDeviceProperties(&context, request, &reply).ok());
  }
  EXPECT_EQ(reply.status().code(), proto::OK);
  EXPECT_EQ(reply.properties().index(), 1);
  EXPECT_EQ(reply.properties().name(), "openreg emulated device");
  EXPECT_EQ(reply.properties().total_memory(), kDeviceMemory);
  EXPECT_GE(reply.properties().multiprocessor_count(), 1);
  EXPECT_EQ(reply.properties().major(), 1);
  EXPECT_EQ(reply.properties().minor(), 0);
  request.set_device(2);
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->GetDeviceProperties(&context, request, &reply).ok());
  }
  EXPECT_EQ(reply.status().code(), proto::INVALID_DEVICE);
}

TEST_F(DaemonTest, HangUpEndsOnlyThatSession) {
  std::unique_ptr<Client> leaving = Attach();
  std::unique_ptr<Client> staying = Attach();
  ASSERT_EQ(Allocate(leaving->ref, 0, 4 << 20).status().code(), proto::OK);
  ASSERT_EQ(Allocate(leaving->ref, 1, 4 << 20).status().code(), proto::OK);
  const uint64_t kept = Allocate(staying->ref, 0, 4096).address();
  // A side stream that is busy waiting when the client disappears.
  {
    proto::CreateStreamRequest create;
    *create.mutable_session() = leaving->ref;
    proto::CreateStreamReply created;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->CreateStream(&context, create, &created).ok());
    SessionView view = leaving->view();
    StreamDriver side(view.stream(created.slot()),
                      view.ring_buffer(created.slot()),
                      view.header()->limits.ring_bytes, leaving->doorbell(0),
                      leaving->ring_fds[0]);
    proto::Command wait;
    wait.mutable_wait_stream()->set_stream_slot(0);
    wait.mutable_wait_stream()->set_sequence(1000);
    side.Submit(wait);
  }
  EXPECT_EQ(Stats().devices(0).allocation_count(), 2u);

  leaving->HangUp();  // like a crash: no Detach
  EXPECT_TRUE(EventuallyStats([](const proto::GetStatsReply& stats) {
    return stats.sessions_size() == 1;
  }));
  const proto::GetStatsReply stats = Stats();
  EXPECT_EQ(stats.devices(0).allocation_count(), 1u);
  EXPECT_EQ(stats.devices(0).allocated_bytes(), 4096u);
  EXPECT_EQ(stats.devices(1).allocated_bytes(), 0u);
  EXPECT_EQ(stats.sessions(0).session_id(), staying->welcome.session_id);
  EXPECT_EQ(Allocate(leaving->ref, 0, 16).status().code(),
            proto::INVALID_HANDLE);
  EXPECT_EQ(Free(*staying, kept).code, proto::OK);
  EXPECT_EQ(stats.sessions_served(), 2u);
}

TEST_F(DaemonTest, DetachEndsTheSession) {
  std::unique_ptr<Client> client = Attach();
  ASSERT_EQ(Allocate(client->ref, 0, 1 << 20).status().code(), proto::OK);
  proto::DetachRequest request;
  *request.mutable_session() = client->ref;
  proto::DetachReply reply;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Detach(&context, request, &reply).ok());
  }
  EXPECT_EQ(reply.status().code(), proto::OK);
  const proto::GetStatsReply stats = Stats();
  EXPECT_EQ(stats.sessions_size(), 0);
  EXPECT_EQ(stats.devices(0).allocated_bytes(), 0u);
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->Detach(&context, request, &reply).ok());
  }
  EXPECT_EQ(reply.status().code(), proto::INVALID_HANDLE);
  client->HangUp();  // the later hang-up finds nothing to tear down
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Stats().sessions_served(), 1u);
}

TEST_F(DaemonTest, ASecondDaemonOnTheSameSocketIsRefused) {
  absl::StatusOr<std::unique_ptr<Daemon>> second =
      Daemon::Start(options_, std::make_unique<AtenOpRunner>());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  EXPECT_EQ(second.status().message(),
            absl::StrCat("another daemon (pid ", getpid(), ") already serves ",
                         options_.socket_path));
  // The first one still serves.
  EXPECT_EQ(Attach()->welcome.error_code, 0);
}

TEST_F(DaemonTest, ShutdownRemovesTheSockets) {
  std::unique_ptr<Client> client = Attach();
  ASSERT_EQ(Allocate(client->ref, 0, 1 << 20).status().code(), proto::OK);
  daemon_->Shutdown();
  EXPECT_NE(access(options_.socket_path.c_str(), F_OK), 0);
  EXPECT_NE(access(daemon_->attach_socket_path().c_str(), F_OK), 0);
  EXPECT_EQ(daemon_->devices().arena(0).Stats().allocated_bytes, 0u);
  // The client sees the hang-up.
  EXPECT_TRUE(PeerHungUp(client->fd));
}

TEST_F(DaemonTest, IdleExitEndsRun) {
  daemon_.reset();
  options_.idle_exit = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(options_, std::make_unique<AtenOpRunner>());
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  daemon_ = *std::move(daemon);
  const absl::Time start = absl::Now();
  daemon_->Run(-1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(DaemonTest, IdleExitWaitsWhileAClientIsAttached) {
  daemon_.reset();
  options_.idle_exit = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(options_, std::make_unique<AtenOpRunner>());
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  daemon_ = *std::move(daemon);
  std::unique_ptr<Client> client = Attach();
  std::thread leave([&client] {
    absl::SleepFor(absl::Milliseconds(800));
    client->HangUp();
  });
  const absl::Time start = absl::Now();
  daemon_->Run(-1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  leave.join();
}

}  // namespace
}  // namespace openreg::daemon
