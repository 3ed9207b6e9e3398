// Session lifecycle and validation: the resource table, pointer and tensor
// checks, streams, events and teardown. No stream threads run here (null
// executor); stream_execution_test covers them.
#include "device_daemon/sessions/session.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/sessions/session_registry.h"
#include "gtest/gtest.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kDeviceMemory = 16 << 20;

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    devices_ = *Devices::Create(2, kDeviceMemory);
    session_ = NewSession(1);
  }

  std::unique_ptr<Session> NewSession(uint64_t id) {
    return MakeTestSession(id, devices_.get(), nullptr);
  }

  static proto::TensorRef Tensor(uint64_t address, std::vector<int64_t> sizes,
                                 std::vector<int64_t> strides,
                                 int32_t dtype = 6 /* float */,
                                 int32_t device = 0) {
    proto::TensorRef tensor;
    tensor.set_address(address);
    for (int64_t size : sizes) tensor.add_sizes(size);
    for (int64_t stride : strides) tensor.add_strides(stride);
    tensor.set_dtype(dtype);
    tensor.set_device(device);
    return tensor;
  }

  std::unique_ptr<Devices> devices_;
  std::unique_ptr<Session> session_;
};

TEST_F(SessionTest, SegmentHeaderAndDefaultStreams) {
  const SessionHeader* header =
      static_cast<const SessionHeader*>(session_->segment().data());
  EXPECT_EQ(header->magic, kSessionMagic);
  EXPECT_EQ(header->protocol_version, kProtocolVersion);
  EXPECT_EQ(header->device_count, 2u);
  EXPECT_EQ(header->session_id, 1u);
  EXPECT_EQ(header->total_bytes, session_->segment().size());
  EXPECT_EQ(header->limits.max_streams, 8u);
  for (uint32_t slot = 0; slot < 8; ++slot) {
    const StreamSlot* stream = session_->stream_slot(slot);
    if (slot < 2) {
      EXPECT_EQ(stream->state.load(),
                static_cast<uint32_t>(StreamState::kActive));
      EXPECT_EQ(stream->device, static_cast<int32_t>(slot));
      EXPECT_TRUE(session_->IsStreamAlive(slot));
    } else {
      EXPECT_EQ(stream->state.load(),
                static_cast<uint32_t>(StreamState::kFree));
      EXPECT_FALSE(session_->IsStreamAlive(slot));
    }
  }
}

TEST_F(SessionTest, DaemonIgnoresAClientRewrittenHeader) {
  SessionHeader* header =
      static_cast<SessionHeader*>(session_->segment().data());
  const StreamSlot* before = session_->stream_slot(1);
  header->stream_slots_offset = 1ull << 40;  // hostile client
  header->limits.staging_bytes = ~0ull;
  EXPECT_EQ(session_->stream_slot(1), before);
  EXPECT_EQ(session_->limits().staging_bytes, 1u << 20);
}

TEST_F(SessionTest, AllocateValidateAndFree) {
  absl::StatusOr<uint64_t> address = session_->Allocate(1, 1000);
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(DeviceOfAddress(*address), 1);
  EXPECT_EQ(session_->allocated_bytes(), 1000u);

  EXPECT_TRUE(session_->ValidateRange(*address, 1000).ok());
  EXPECT_TRUE(session_->ValidateRange(*address + 999, 1).ok());
  EXPECT_TRUE(session_->ValidateRange(*address + 500, 500).ok());
  // The block is 1024 bytes, but only the requested 1000 are the client's.
  absl::Status past_end = session_->ValidateRange(*address + 500, 501);
  EXPECT_EQ(ErrorCodeOf(past_end), proto::INVALID_VALUE);
  EXPECT_NE(past_end.message().find("runs past the end"), std::string::npos)
      << past_end;
  EXPECT_FALSE(session_->ValidateRange(*address + 1000, 1).ok());
  EXPECT_FALSE(session_->ValidateRange(*address - 1, 2).ok());
  EXPECT_FALSE(session_->ValidateRange(*address, UINT64_MAX).ok());
  EXPECT_TRUE(session_->ValidateRange(0, 0).ok());  // empty range

  absl::StatusOr<PinnedRange> pinned = session_->PinRange(*address + 8, 16);
  ASSERT_TRUE(pinned.ok());
  ASSERT_NE(pinned->data, nullptr);
  std::memset(pinned->data, 0x5a, 16);

  ASSERT_TRUE(session_->Free(*address).ok());
  EXPECT_EQ(session_->allocated_bytes(), 0u);
  EXPECT_FALSE(session_->ValidateRange(*address, 1).ok());
}

TEST_F(SessionTest, InvalidDeviceIsReported) {
  absl::StatusOr<uint64_t> address = session_->Allocate(2, 64);
  EXPECT_EQ(ErrorCodeOf(address.status()), proto::INVALID_DEVICE);
  EXPECT_EQ(ErrorCodeOf(session_->Allocate(-1, 64).status()),
            proto::INVALID_DEVICE);
}

TEST_F(SessionTest, OutOfMemoryIsReported) {
  absl::StatusOr<uint64_t> address = session_->Allocate(0, kDeviceMemory + 1);
  EXPECT_EQ(ErrorCodeOf(address.status()), proto::OUT_OF_MEMORY);
  EXPECT_NE(address.status().message().find("requested"), std::string::npos);
}

TEST_F(SessionTest, FreeErrorsExplainThePointer) {
  const uint64_t address = *session_->Allocate(0, 4096);
  absl::Status interior = session_->Free(address + 16);
  EXPECT_EQ(ErrorCodeOf(interior), proto::INVALID_VALUE);
  EXPECT_NE(interior.message().find("points inside"), std::string::npos)
      << interior;

  absl::Status not_device = session_->Free(0x7fff0000);
  EXPECT_NE(not_device.message().find("not a device address"),
            std::string::npos)
      << not_device;

  ASSERT_TRUE(session_->Free(address).ok());
  absl::Status twice = session_->Free(address);
  EXPECT_EQ(ErrorCodeOf(twice), proto::INVALID_VALUE);
  EXPECT_NE(twice.message().find("double free"), std::string::npos) << twice;

  absl::Status unknown = session_->Free(MakeDeviceAddress(1, 1 << 20));
  EXPECT_NE(unknown.message().find("not an allocation of this session"),
            std::string::npos)
      << unknown;
}

TEST_F(SessionTest, ForeignPointersAreRejected) {
  std::unique_ptr<Session> other = NewSession(2);
  const uint64_t theirs = *other->Allocate(0, 4096);
  absl::Status validate = session_->ValidateRange(theirs, 16);
  EXPECT_EQ(ErrorCodeOf(validate), proto::INVALID_VALUE);
  EXPECT_NE(validate.message().find("another session"), std::string::npos)
      << validate;
  absl::Status free = session_->Free(theirs);
  EXPECT_NE(free.message().find("belongs to another session"),
            std::string::npos)
      << free;
  EXPECT_TRUE(other->ValidateRange(theirs, 4096).ok());  // still theirs
}

TEST_F(SessionTest, ValidateTensorChecksTheSpannedBytes) {
  const uint64_t address = *session_->Allocate(0, 4 * 12);  // 12 floats
  // 3x4 contiguous.
  absl::StatusOr<TensorExtent> extent =
      session_->ValidateTensor(Tensor(address, {3, 4}, {4, 1}));
  ASSERT_TRUE(extent.ok()) << extent.status();
  EXPECT_EQ(extent->numel, 12);
  EXPECT_EQ(extent->span_bytes, 48u);
  // Transposed view of the same memory.
  EXPECT_TRUE(session_->ValidateTensor(Tensor(address, {4, 3}, {1, 4})).ok());
  // Broadcast (stride 0) view.
  extent = session_->ValidateTensor(Tensor(address, {1000, 4}, {0, 1}));
  ASSERT_TRUE(extent.ok());
  EXPECT_EQ(extent->span_bytes, 16u);
  // A view starting at element 4 (storage offset folded into the address).
  EXPECT_TRUE(
      session_->ValidateTensor(Tensor(address + 16, {2, 4}, {4, 1})).ok());
  // One element too many.
  EXPECT_FALSE(
      session_->ValidateTensor(Tensor(address + 16, {3, 4}, {4, 1})).ok());
  EXPECT_FALSE(session_->ValidateTensor(Tensor(address, {3, 5}, {5, 1})).ok());
  // Same bytes as doubles: 6 doubles fit, 7 do not.
  EXPECT_TRUE(session_->ValidateTensor(Tensor(address, {6}, {1}, 7)).ok());
  EXPECT_FALSE(session_->ValidateTensor(Tensor(address, {7}, {1}, 7)).ok());
  // 0-dim tensor: one element.
  EXPECT_TRUE(session_->ValidateTensor(Tensor(address + 44, {}, {})).ok());
  EXPECT_FALSE(session_->ValidateTensor(Tensor(address + 48, {}, {})).ok());
}

TEST_F(SessionTest, ValidateTensorRejectsMalformedViews) {
  const uint64_t address = *session_->Allocate(0, 1024);
  struct Case {
    proto::TensorRef tensor;
    const char* expected;
  };
  const Case cases[] = {
      {Tensor(address, {-1}, {1}), "negative"},
      {Tensor(address, {4}, {-1}), "negative"},
      {Tensor(address, {4}, {1}, /*dtype=*/99), "unknown dtype"},
      {Tensor(address, {4}, {1}, /*dtype=*/-3), "unknown dtype"},
      {Tensor(address, {4, 4}, {1}), "strides"},
      {Tensor(address, {1ll << 40, 1ll << 40}, {1, 1}), "overflow"},
      {Tensor(address, {2, 2}, {1ll << 62, 1}), "overflow"},
      {Tensor(address, {4}, {1}, 6, /*device=*/1), "not on device 1"},
      {Tensor(0x1000, {4}, {1}), "not on device"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TensorExtent> extent = session_->ValidateTensor(c.tensor);
    ASSERT_FALSE(extent.ok()) << c.tensor.DebugString();
    EXPECT_EQ(ErrorCodeOf(extent.status()), proto::INVALID_VALUE);
    EXPECT_NE(extent.status().message().find(c.expected), std::string::npos)
        << extent.status() << " for " << c.tensor.DebugString();
  }
}

TEST_F(SessionTest, EmptyTensorsNeedNoMemory) {
  absl::StatusOr<TensorExtent> extent =
      session_->ValidateTensor(Tensor(0, {0, 5}, {5, 1}));
  ASSERT_TRUE(extent.ok()) << extent.status();
  EXPECT_EQ(extent->numel, 0);
  EXPECT_EQ(extent->span_bytes, 0u);
}

TEST_F(SessionTest, FreedMemoryStaysUntilThePinIsDropped) {
  const uint64_t address = *session_->Allocate(0, 1 << 20);
  absl::StatusOr<PinnedRange> pinned = session_->PinRange(address, 1 << 20);
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(session_->Free(address).ok());
  // Gone from the table, still held by the command in flight.
  EXPECT_FALSE(session_->ValidateRange(address, 1).ok());
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 1u);
  pinned->buffer.reset();
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 0u);
}

TEST_F(SessionTest, StreamsComeFromNonDefaultSlots) {
  absl::StatusOr<uint32_t> slot = session_->CreateStream(1, -1);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(*slot, 2u);
  const StreamSlot* stream = session_->stream_slot(*slot);
  EXPECT_EQ(stream->state.load(), static_cast<uint32_t>(StreamState::kActive));
  EXPECT_EQ(stream->device, 1);
  EXPECT_EQ(stream->priority, -1);
  EXPECT_TRUE(session_->IsStreamAlive(*slot));

  absl::Status default_stream = session_->DestroyStream(0);
  EXPECT_EQ(ErrorCodeOf(default_stream), proto::INVALID_VALUE);
  EXPECT_NE(default_stream.message().find("default stream"), std::string::npos);

  ASSERT_TRUE(session_->DestroyStream(*slot).ok());
  EXPECT_EQ(stream->state.load(), static_cast<uint32_t>(StreamState::kFree));
  EXPECT_EQ(ErrorCodeOf(session_->DestroyStream(*slot)), proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(session_->DestroyStream(1000)), proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(session_->CreateStream(5, 0).status()),
            proto::INVALID_DEVICE);
}

TEST_F(SessionTest, StreamSlotsRunOut) {
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(session_->CreateStream(0, 0).ok());
  absl::StatusOr<uint32_t> slot = session_->CreateStream(0, 0);
  EXPECT_EQ(ErrorCodeOf(slot.status()), proto::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(session_->DestroyStream(4).ok());
  EXPECT_EQ(*session_->CreateStream(0, 0), 4u);  // reused
}

TEST_F(SessionTest, EventsUseSlotsAndTheInUseFlag) {
  absl::StatusOr<uint32_t> first = session_->CreateEvent(0, true);
  absl::StatusOr<uint32_t> second = session_->CreateEvent(1, false);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(session_->event_slot(*first)->in_use.load(), 1u);
  EXPECT_TRUE(session_->IsEventLive(*first));
  ASSERT_TRUE(session_->DestroyEvent(*first).ok());
  EXPECT_EQ(session_->event_slot(*first)->in_use.load(), 0u);
  EXPECT_FALSE(session_->IsEventLive(*first));
  EXPECT_EQ(ErrorCodeOf(session_->DestroyEvent(*first)), proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(session_->CreateEvent(9, false).status()),
            proto::INVALID_DEVICE);
  for (int i = 0; i < 15; ++i)
    ASSERT_TRUE(session_->CreateEvent(0, false).ok());
  EXPECT_EQ(ErrorCodeOf(session_->CreateEvent(0, false).status()),
            proto::RESOURCE_EXHAUSTED);
}

TEST_F(SessionTest, CloseFreesEverythingAndOnlyThisSession) {
  std::unique_ptr<Session> other = NewSession(2);
  const uint64_t kept = *other->Allocate(0, 8192);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(session_->Allocate(i % 2, 100000).ok());
  ASSERT_TRUE(session_->CreateStream(0, 0).ok());
  ASSERT_TRUE(session_->CreateEvent(0, false).ok());
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 6u);
  EXPECT_EQ(devices_->arena(1).Stats().allocation_count, 5u);

  session_->Close();
  EXPECT_TRUE(session_->closed());
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 1u);
  EXPECT_EQ(devices_->arena(1).Stats().allocation_count, 0u);
  EXPECT_EQ(devices_->arena(1).Stats().allocated_bytes, 0u);
  EXPECT_EQ(ErrorCodeOf(session_->Allocate(0, 16).status()),
            proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(session_->CreateStream(0, 0).status()),
            proto::INVALID_HANDLE);
  EXPECT_FALSE(session_->IsStreamAlive(0));
  session_->Close();  // idempotent

  EXPECT_TRUE(other->ValidateRange(kept, 8192).ok());
  EXPECT_TRUE(other->Free(kept).ok());
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 0u);
}

TEST(SessionRegistryTest, FindRemoveAndIdleTracking) {
  std::unique_ptr<Devices> devices = *Devices::Create(1, 8 << 20);
  SessionRegistry registry(devices.get(), nullptr, SmallSessionLimits());
  EXPECT_EQ(registry.attached_count(), 0u);
  EXPECT_LE(registry.idle_since(), absl::Now());

  const PeerCredentials peer{getpid(), getuid(), getgid()};
  std::shared_ptr<Session> a = *registry.Create(peer, "a");
  std::shared_ptr<Session> b = *registry.Create(peer, "b");
  EXPECT_NE(a->id(), b->id());
  EXPECT_NE(a->token(), b->token());
  EXPECT_EQ(registry.attached_count(), 2u);
  EXPECT_EQ(registry.sessions_served(), 2u);
  EXPECT_EQ(registry.idle_since(), absl::InfiniteFuture());

  proto::SessionRef ref;
  ref.set_session_id(a->id());
  ref.set_token(a->token());
  absl::StatusOr<std::shared_ptr<Session>> found = registry.Find(ref);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), a.get());
  ref.set_token(a->token() ^ 1);
  EXPECT_EQ(ErrorCodeOf(registry.Find(ref).status()), proto::INVALID_HANDLE);
  ref.set_session_id(12345);
  EXPECT_EQ(ErrorCodeOf(registry.Find(ref).status()), proto::INVALID_HANDLE);

  ASSERT_TRUE(a->Allocate(0, 1 << 20).ok());
  ASSERT_TRUE(registry.Remove(a->id(), "test").ok());
  EXPECT_TRUE(a->closed());
  EXPECT_EQ(devices->arena(0).Stats().allocated_bytes, 0u);
  EXPECT_TRUE(absl::IsNotFound(registry.Remove(a->id(), "again")));
  EXPECT_EQ(registry.attached_count(), 1u);

  ASSERT_TRUE(registry.Remove(b->id(), "test").ok());
  EXPECT_LE(registry.idle_since(), absl::Now());
  EXPECT_EQ(registry.sessions_served(), 2u);
}

}  // namespace
}  // namespace openreg::daemon
