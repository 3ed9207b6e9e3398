// The daemon's concurrent paths, run together so that ThreadSanitizer
// (`bazel test --config=tsan`, `make sanitize`) sees them interleave:
//   - a session torn down (client hang-up, Detach, Disconnect fault) while
//     its stream workers execute commands and control requests (memory,
//     streams, events, statistics) arrive on other threads;
//   - clients attaching over the attach socket while others detach by
//     hanging up, by Detach and by a dropped connection;
//   - ring positions and completion counters moved by a client thread while
//     the stream worker reads them, across wrap-around, and a client that
//     rewrites them.
// In a plain build these are functional tests of the same properties:
// nothing crashes or hangs, each teardown happens once, and every byte of
// device memory is returned.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/command_ring.h"
#include "data_plane/device_address.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/execution/op_runner.h"
#include "device_daemon/server/attach_server.h"
#include "device_daemon/server/socket_directory.h"
#include "device_daemon/sessions/session.h"
#include "device_daemon/sessions/session_registry.h"
#include "gtest/gtest.h"
#include "protos/commands.pb.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kBufferBytes = 4096;

// Touches every tensor it is given, like a kernel: reads the inputs and
// writes the outputs, so that TSan sees the memory accesses of commands
// racing with frees and teardown.
class TouchingOpRunner : public OpRunner {
 public:
  absl::Status Run(const StreamContext& context, const proto::LaunchOp& op,
                   uint64_t sequence, WrittenTensors* written) override {
    uint64_t checksum = 0;
    for (const proto::Argument& argument : op.arguments()) {
      if (!argument.has_tensor()) continue;
      TensorExtent extent;
      absl::StatusOr<PinnedRange> range =
          context.session->PinTensor(argument.tensor(), &extent);
      if (!range.ok()) return range.status();
      for (uint64_t i = 0; i < extent.span_bytes; ++i) {
        checksum += static_cast<uint8_t>(range->data[i]);
      }
    }
    for (const proto::TensorRef& output : op.outputs()) {
      TensorExtent extent;
      absl::StatusOr<PinnedRange> range =
          context.session->PinTensor(output, &extent);
      if (!range.ok()) return range.status();
      std::fill(range->data, range->data + extent.span_bytes,
                static_cast<char>(checksum));
    }
    return absl::OkStatus();
  }
};

proto::TensorRef Bytes(uint64_t address, int64_t count) {
  proto::TensorRef tensor;
  tensor.set_address(address);
  tensor.add_sizes(count);
  tensor.add_strides(1);
  tensor.set_dtype(1);  // int8
  tensor.set_device(DeviceOfAddress(address));
  return tensor;
}

class DaemonRaceTest : public ::testing::Test {
 protected:
  DaemonRaceTest() {
    devices_ = *Devices::Create(2, 16 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &runner_);
    registry_ = std::make_unique<SessionRegistry>(
        devices_.get(), executor_.get(), SmallSessionLimits());
  }

  void ExpectAllDeviceMemoryReturned() {
    for (int device = 0; device < devices_->count(); ++device) {
      EXPECT_EQ(devices_->arena(device).Stats().allocation_count, 0u)
          << "device " << device;
    }
  }

  TouchingOpRunner runner_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<SessionRegistry> registry_;
};

// A client thread that keeps one stream busy with every kind of command
// until told to stop or until its stream stops reading.
void FeedStream(std::shared_ptr<Session> session, uint32_t slot,
                std::vector<uint64_t> buffers, const std::atomic<bool>* stop,
                uint32_t seed) {
  StreamSlot* stream = session->stream_slot(slot);
  RingWriter writer(&stream->ring, session->ring_buffer(slot),
                    session->limits().ring_bytes);
  std::mt19937 random(seed);
  uint64_t sequence = stream->completed.Load();
  while (!stop->load() &&
         stream->state.load() == static_cast<uint32_t>(StreamState::kActive)) {
    proto::Command command;
    command.set_sequence(sequence + 1);
    const uint64_t a = buffers[random() % buffers.size()];
    const uint64_t b = buffers[random() % buffers.size()];
    switch (random() % 6) {
      case 0:
        command.mutable_memset()->set_dst(a);
        command.mutable_memset()->set_value(random());
        command.mutable_memset()->set_size(kBufferBytes);
        break;
      case 1:
        command.mutable_d2d()->set_src(a);
        command.mutable_d2d()->set_dst(b);
        command.mutable_d2d()->set_size(kBufferBytes / 2);
        break;
      case 2:
        command.mutable_d2h()->set_src(a);
        command.mutable_d2h()->set_staging_offset(slot * kBufferBytes);
        command.mutable_d2h()->set_size(kBufferBytes);
        break;
      case 3:
        command.mutable_record_event()->set_event_slot(random() % 4);
        break;
      case 4:
        // On another stream, for what it has already completed.
        command.mutable_wait_stream()->set_stream_slot(slot ^ 1);
        command.mutable_wait_stream()->set_sequence(
            session->stream_slot(slot ^ 1)->completed.Load());
        break;
      default: {
        proto::LaunchOp* launch = command.mutable_launch();
        launch->set_name("fake::touch");
        *launch->add_arguments()->mutable_tensor() = Bytes(a, kBufferBytes);
        *launch->add_outputs() = Bytes(b, kBufferBytes / 4);
      }
    }
    const std::string bytes = command.SerializeAsString();
    if (writer.TryWrite(bytes.data(), bytes.size()).ok()) {
      ++sequence;
    } else {
      stream->completed.WaitForAtLeast(sequence, absl::Milliseconds(1));
    }
  }
}

TEST_F(DaemonRaceTest, ASessionEndsCleanlyWhileItsStreamsAndControlCallsRun) {
  for (int round = 0; round < 8; ++round) {
    const PeerCredentials peer{getpid(), getuid(), getgid()};
    std::shared_ptr<Session> session = *registry_->Create(peer, "race");
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(session->CreateEvent(0, false).ok());
    // Slots 2 and 3: streams of the two devices besides the defaults, so
    // that stream pairs (0, 1) and (2, 3) wait on each other.
    ASSERT_TRUE(session->CreateStream(0, 0).ok());
    ASSERT_TRUE(session->CreateStream(1, -1).ok());
    // Each stream its own buffers on its device (slots 0..3 are on devices
    // 0, 1, 0, 1): streams that share memory without ordering race on it,
    // which is the client's bug, as on a GPU, not the daemon's.
    std::vector<uint64_t> buffers;
    std::vector<std::vector<uint64_t>> stream_buffers(4);
    for (uint32_t slot = 0; slot < 4; ++slot) {
      for (int i = 0; i < 2; ++i) {
        stream_buffers[slot].push_back(
            *session->Allocate(static_cast<int>(slot % 2), kBufferBytes));
        buffers.push_back(stream_buffers[slot].back());
      }
    }

    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (uint32_t slot = 0; slot < 4; ++slot) {
      threads.emplace_back(FeedStream, session, slot, stream_buffers[slot],
                           &stop, round * 16 + slot);
    }
    // Control requests, as gRPC threads would make them.
    threads.emplace_back([&] {
      std::mt19937 random(round);
      while (!stop.load()) {
        absl::StatusOr<uint64_t> extra = session->Allocate(random() % 2, 512);
        if (extra.ok()) session->Free(*extra).IgnoreError();
        absl::StatusOr<uint32_t> event = session->CreateEvent(1, false);
        if (event.ok()) session->DestroyEvent(*event).IgnoreError();
        absl::StatusOr<uint32_t> stream = session->CreateStream(0, 0);
        if (stream.ok()) session->DestroyStream(*stream).IgnoreError();
        // Frees memory a stream may be using: the command keeps its pin.
        if (random() % 8 == 0) {
          session->Free(buffers[random() % buffers.size()]).IgnoreError();
        }
      }
    });
    threads.emplace_back([&] {  // statistics (GetStats)
      while (!stop.load()) {
        for (const std::shared_ptr<Session>& each : registry_->Snapshot()) {
          each->Stats();
          each->allocated_bytes();
        }
      }
    });

    absl::SleepFor(absl::Milliseconds(30));
    // The attach socket's hang-up and a Detach request end the session at
    // once: exactly one of them does it.
    std::atomic<int> removed{0};
    auto remove = [&](const char* reason) {
      if (registry_->Remove(session->id(), reason).ok()) ++removed;
    };
    std::thread hang_up(remove, "client disconnected");
    std::thread detach(remove, "detach request");
    hang_up.join();
    detach.join();
    EXPECT_EQ(removed.load(), 1);
    EXPECT_TRUE(session->closed());
    EXPECT_TRUE(session->streams_stopped());
    stop = true;
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(session->allocated_bytes(), 0u);
    session.reset();
  }
  EXPECT_EQ(registry_->attached_count(), 0u);
  ExpectAllDeviceMemoryReturned();
}

TEST_F(DaemonRaceTest, ClientsAttachWhileOthersDetachEveryWay) {
  char pattern[] = "/tmp/openreg-race-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string directory_path = pattern;
  const std::string attach_path =
      AttachSocketPath(directory_path + "/daemon.sock");
  absl::StatusOr<SocketDirectory> directory =
      SocketDirectory::Open(directory_path + "/daemon.sock");
  ASSERT_TRUE(directory.ok()) << directory.status();
  AttachServer server(registry_.get(), &*directory, attach_path,
                      devices_->count());
  ASSERT_TRUE(server.Start().ok());

  constexpr int kClients = 4;
  constexpr int kAttachesPerClient = 12;
  std::atomic<int> attached{0};
  std::vector<std::thread> clients;
  for (int client = 0; client < kClients; ++client) {
    clients.emplace_back([&, client] {
      std::mt19937 random(client);
      for (int i = 0; i < kAttachesPerClient; ++i) {
        absl::StatusOr<int> socket = ConnectUnix(attach_path);
        ASSERT_TRUE(socket.ok()) << socket.status();
        AttachHello hello{};
        hello.magic = kAttachMagic;
        hello.protocol_version = kProtocolVersion;
        std::snprintf(hello.client_name, sizeof(hello.client_name), "client %d",
                      client);
        ASSERT_TRUE(SendMessage(*socket, &hello, sizeof(hello)).ok());
        AttachWelcome welcome{};
        int segment = -1;
        ASSERT_TRUE(ReceiveMessage(*socket, &welcome, sizeof(welcome),
                                   absl::Seconds(30), &segment)
                        .ok());
        ASSERT_EQ(welcome.error_code, 0) << welcome.message;
        ++attached;
        close(segment);
        // Give the session some work on its default streams.
        absl::StatusOr<std::shared_ptr<Session>> session = [&] {
          proto::SessionRef ref;
          ref.set_session_id(welcome.session_id);
          ref.set_token(welcome.token);
          return registry_->Find(ref);
        }();
        if (session.ok()) {
          StreamDriver stream(
              (*session)->stream_slot(0), (*session)->ring_buffer(0),
              (*session)->limits().ring_bytes,
              (*session)->devices().doorbell(0), (*session)->ring_fd(0));
          proto::Command command;
          command.mutable_record_event()->set_event_slot(0);
          stream.Submit(command);
        }
        session = absl::NotFoundError("dropped");  // no reference kept
        switch (random() % 3) {
          case 0:  // hang up (exit, crash, kill -9)
            break;
          case 1:  // Detach over the control plane, then hang up
            registry_->Remove(welcome.session_id, "detach request")
                .IgnoreError();
            break;
          default:  // the Disconnect fault model, racing the hang-up
            server.DropSession(welcome.session_id);
        }
        close(*socket);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(attached.load(), kClients * kAttachesPerClient);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (registry_->attached_count() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(registry_->attached_count(), 0u);
  server.Stop();
  rmdir(directory_path.c_str());
  ExpectAllDeviceMemoryReturned();
}

TEST_F(DaemonRaceTest, RingPositionsStayConsistentAcrossWrapAround) {
  std::shared_ptr<Session> session =
      MakeTestSession(7, devices_.get(), executor_.get());
  const uint64_t buffer = *session->Allocate(0, kBufferBytes);
  StreamDriver stream(session->stream_slot(0), session->ring_buffer(0),
                      session->limits().ring_bytes, devices_->doorbell(0),
                      session->ring_fd(0));
  // Sizes that do not divide the ring: records wrap with padding in every
  // position. The client waits on the completion counter (futex) while the
  // worker advances it; a second thread reads both ring positions.
  std::atomic<bool> done{false};
  std::thread observer([&] {
    StreamSlot* slot = session->stream_slot(0);
    while (!done.load()) {
      // Tail first: the head only grows, so a later head can only shrink
      // the distance (reading the head first would not bound it).
      const uint64_t tail = slot->ring.tail.Load();
      const uint64_t head = slot->ring.head.Load();
      const uint64_t completed = slot->completed.Load();
      (void)completed;
      EXPECT_LE(tail - std::min(head, tail), session->limits().ring_bytes);
    }
  });
  uint64_t last = 0;
  for (int i = 0; i < 3000; ++i) {
    proto::Command command;
    proto::LaunchOp* launch = command.mutable_launch();
    launch->set_name(std::string(1 + i % 700, 'o'));
    *launch->add_outputs() = Bytes(buffer, 1 + i % 64);
    last = stream.Submit(command);
    if (i % 97 == 0) ASSERT_TRUE(stream.WaitFor(last));
  }
  ASSERT_TRUE(stream.WaitFor(last));
  EXPECT_EQ(stream.TakeError(), std::nullopt);
  done = true;
  observer.join();
  session->Close();
}

TEST_F(DaemonRaceTest, AClientRewritingRingPositionsOnlyFaultsItsStream) {
  std::shared_ptr<Session> session =
      MakeTestSession(8, devices_.get(), executor_.get());
  StreamSlot* slot = session->stream_slot(1);
  // Hostile positions published while the worker reads: behind the head,
  // past the ring, misaligned, or over bytes that were never written.
  std::thread hostile([slot] {
    std::mt19937_64 random(8);
    while (slot->state.load() != static_cast<uint32_t>(StreamState::kFaulted)) {
      slot->ring.tail.Advance(random() % 3 == 0 ? random() : random() % 4096);
      std::this_thread::yield();
    }
  });
  hostile.join();
  EXPECT_NE(slot->error_code.load(), 0u);
  EXPECT_NE(std::string(slot->error_message).find("command ring corrupted"),
            std::string::npos)
      << slot->error_message;
  // The other stream and the session go on.
  StreamDriver other(session->stream_slot(0), session->ring_buffer(0),
                     session->limits().ring_bytes, devices_->doorbell(0),
                     session->ring_fd(0));
  proto::Command command;
  command.mutable_launch()->set_name("fake::after");
  EXPECT_EQ(other.Run(command), std::nullopt);
  session->Close();
  ExpectAllDeviceMemoryReturned();
}

}  // namespace
}  // namespace openreg::daemon
