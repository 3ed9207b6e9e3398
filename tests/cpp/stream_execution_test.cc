// Commands through the real stream workers, executor and op runner: a
// session with threads, driven through its rings like a client would.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/sessions/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int32_t kFloat = 6;
constexpr int32_t kLong = 4;
constexpr int32_t kDouble = 7;

// ---- Command builders --------------------------------------------------

proto::Command H2D(uint64_t staging_offset, uint64_t dst, uint64_t size) {
  proto::Command command;
  command.mutable_h2d()->set_staging_offset(staging_offset);
  command.mutable_h2d()->set_dst(dst);
  command.mutable_h2d()->set_size(size);
  return command;
}

proto::Command D2H(uint64_t src, uint64_t staging_offset, uint64_t size) {
  proto::Command command;
  command.mutable_d2h()->set_src(src);
  command.mutable_d2h()->set_staging_offset(staging_offset);
  command.mutable_d2h()->set_size(size);
  return command;
}

proto::Command D2D(uint64_t src, uint64_t dst, uint64_t size) {
  proto::Command command;
  command.mutable_d2d()->set_src(src);
  command.mutable_d2d()->set_dst(dst);
  command.mutable_d2d()->set_size(size);
  return command;
}

proto::Command MemsetCommand(uint64_t dst, uint32_t value, uint64_t size) {
  proto::Command command;
  command.mutable_memset()->set_dst(dst);
  command.mutable_memset()->set_value(value);
  command.mutable_memset()->set_size(size);
  return command;
}

proto::Command WaitCommand(uint32_t slot, uint64_t sequence) {
  proto::Command command;
  command.mutable_wait_stream()->set_stream_slot(slot);
  command.mutable_wait_stream()->set_sequence(sequence);
  return command;
}

proto::TensorRef TensorAt(uint64_t address, std::vector<int64_t> sizes,
                          int32_t dtype = kFloat) {
  proto::TensorRef tensor;
  tensor.set_address(address);
  int64_t stride = 1;
  std::vector<int64_t> strides(sizes.size());
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= sizes[i];
  }
  for (int64_t size : sizes) tensor.add_sizes(size);
  for (int64_t s : strides) tensor.add_strides(s);
  tensor.set_dtype(dtype);
  tensor.set_device(DeviceOfAddress(address));
  return tensor;
}

proto::Argument TensorArg(const proto::TensorRef& tensor) {
  proto::Argument argument;
  *argument.mutable_tensor() = tensor;
  return argument;
}

proto::Argument IntArg(int64_t value) {
  proto::Argument argument;
  argument.set_int_value(value);
  return argument;
}

proto::Argument NoneArg() {
  proto::Argument argument;
  argument.set_none(true);
  return argument;
}

proto::Argument ScalarArg(double value) {
  proto::Argument argument;
  argument.mutable_scalar()->set_d(value);
  return argument;
}

proto::Command LaunchCommand(const std::string& name,
                             const std::string& overload,
                             std::vector<proto::Argument> arguments,
                             std::vector<proto::TensorRef> outputs,
                             bool synchronous = false) {
  proto::Command command;
  proto::LaunchOp* launch = command.mutable_launch();
  launch->set_name(name);
  launch->set_overload(overload);
  for (auto& argument : arguments) *launch->add_arguments() = argument;
  for (auto& output : outputs) *launch->add_outputs() = output;
  launch->set_synchronous(synchronous);
  return command;
}

// Fails "test::fail" launches always and aten::add launches on demand.
class InjectingHook : public NoFaults {
 public:
  bool active() const override { return true; }
  absl::Status BeforeCommand(const StreamContext&,
                             const proto::Command& command, bool*) override {
    if (command.has_launch() && command.launch().name() == "test::fail") {
      return KernelFailureError("injected failure");
    }
    if (command.has_launch() && command.launch().name() == "aten::add" &&
        fail_adds_) {
      return MakeError(proto::DEVICE_LOST, "injected device loss");
    }
    return absl::OkStatus();
  }
  bool fail_adds_ = false;
};

class StreamExecutionTest : public ::testing::Test {
 protected:
  StreamExecutionTest() {
    devices_ = *Devices::Create(2, 64 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &op_runner_);
    session_ = MakeTestSession(7, devices_.get(), executor_.get());
    stream0_ = Driver(0);
  }

  ~StreamExecutionTest() override { session_->Close(); }

  std::unique_ptr<StreamDriver> Driver(uint32_t slot) {
    StreamSlot* shared = session_->stream_slot(slot);
    return std::make_unique<StreamDriver>(
        shared, session_->ring_buffer(slot), session_->limits().ring_bytes,
        devices_->doorbell(shared->device), session_->ring_fd(shared->device));
  }

  uint64_t Alloc(uint64_t bytes, int device = 0) {
    absl::StatusOr<uint64_t> address = session_->Allocate(device, bytes);
    EXPECT_TRUE(address.ok()) << address.status();
    return *address;
  }

  template <typename T>
  void Upload(uint64_t address, const std::vector<T>& values) {
    std::memcpy(session_->staging(), values.data(), values.size() * sizeof(T));
    ASSERT_EQ(stream0_->Run(H2D(0, address, values.size() * sizeof(T))),
              std::nullopt);
  }

  template <typename T>
  std::vector<T> Download(uint64_t address, size_t count) {
    std::vector<T> values(count);
    EXPECT_EQ(stream0_->Run(D2H(address, 0, count * sizeof(T))), std::nullopt);
    std::memcpy(values.data(), session_->staging(), count * sizeof(T));
    return values;
  }

  proto::OpReply ReadReply(uint64_t sequence) {
    StreamSlot* slot = session_->stream_slot(0);
    EXPECT_EQ(slot->reply_sequence, sequence);
    proto::OpReply reply;
    EXPECT_TRUE(reply.ParseFromArray(session_->reply_area(0),
                                     static_cast<int>(slot->reply_size)));
    return reply;
  }

  std::unique_ptr<Devices> devices_;
  AtenOpRunner op_runner_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<StreamDriver> stream0_;
};

TEST_F(StreamExecutionTest, CopiesRoundTripThroughStaging) {
  const uint64_t buffer = Alloc(4096);
  std::vector<uint8_t> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = i * 7 + 3;
  Upload(buffer, pattern);
  std::memset(session_->staging(), 0, 8192);
  EXPECT_EQ(Download<uint8_t>(buffer, 4096), pattern);
  EXPECT_EQ(session_->stream_slot(0)->completed.Load(), 2u);
  EXPECT_EQ(devices_->counters(0).copies_executed.load(), 2u);
}

TEST_F(StreamExecutionTest, MemsetAndOverlappingDeviceCopy) {
  const uint64_t buffer = Alloc(256);
  Upload(buffer, std::vector<uint8_t>(256, 0));
  ASSERT_EQ(stream0_->Run(MemsetCommand(buffer + 10, 0x1ab, 20)), std::nullopt);
  std::vector<uint8_t> bytes = Download<uint8_t>(buffer, 256);
  for (int i = 0; i < 256; ++i) {
    ASSERT_EQ(bytes[i], (i >= 10 && i < 30) ? 0xab : 0) << i;
  }
  // Shift [0, 100) to [5, 105) inside one allocation.
  std::vector<uint8_t> ramp(256);
  for (int i = 0; i < 256; ++i) ramp[i] = i;
  Upload(buffer, ramp);
  ASSERT_EQ(stream0_->Run(D2D(buffer, buffer + 5, 100)), std::nullopt);
  bytes = Download<uint8_t>(buffer, 256);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(bytes[i + 5], i);
  // Across devices.
  const uint64_t other = Alloc(256, /*device=*/1);
  ASSERT_EQ(stream0_->Run(D2D(buffer, other, 256)), std::nullopt);
  EXPECT_EQ(Download<uint8_t>(other, 256), bytes);
}

TEST_F(StreamExecutionTest, BadCommandsRecordErrorsAndTheStreamGoesOn) {
  const uint64_t buffer = Alloc(1024);
  const uint64_t staging = session_->limits().staging_bytes;

  std::optional<StreamErrorRecord> error =
      stream0_->Run(H2D(staging - 8, buffer, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  EXPECT_EQ(error->op, "copy_host_to_device");
  EXPECT_NE(error->message.find("staging"), std::string::npos);

  error = stream0_->Run(H2D(UINT64_MAX, buffer, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);

  error = stream0_->Run(D2H(buffer + 1000, 0, 100));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->op, "copy_device_to_host");
  EXPECT_NE(error->message.find("runs past the end"), std::string::npos)
      << error->message;

  error = stream0_->Run(MemsetCommand(MakeDeviceAddress(1, 4096), 0, 8));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->op, "memset");

  error = stream0_->Run(D2D(0xdeadbeef, buffer, 8));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("not a device address"), std::string::npos);

  error = stream0_->Run(proto::Command());  // no body
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);

  // Still working.
  Upload(buffer, std::vector<uint8_t>(1024, 9));
  EXPECT_EQ(Download<uint8_t>(buffer, 1024), std::vector<uint8_t>(1024, 9));
}

TEST_F(StreamExecutionTest, FirstUnreportedErrorIsKept) {
  const uint64_t first = stream0_->Submit(D2D(1, 2, 3));
  const uint64_t second = stream0_->Submit(MemsetCommand(4, 0, 1));
  ASSERT_TRUE(stream0_->WaitFor(second));
  std::optional<StreamErrorRecord> error = stream0_->TakeError();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->sequence, first);
  EXPECT_EQ(error->op, "copy_device_to_device");
  EXPECT_FALSE(stream0_->TakeError().has_value());
}

TEST_F(StreamExecutionTest, MalformedCommandFailsAndConsumesOneSequence) {
  const uint64_t sequence = stream0_->SubmitRaw("\xff\xff\xff\xff garbage");
  ASSERT_TRUE(stream0_->WaitFor(sequence));
  std::optional<StreamErrorRecord> error = stream0_->TakeError();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  EXPECT_EQ(error->message, "malformed command");
  EXPECT_EQ(error->sequence, sequence);
  const uint64_t buffer = Alloc(64);
  Upload(buffer, std::vector<uint8_t>(64, 1));  // next command runs
}

TEST_F(StreamExecutionTest, SequenceGapFaultsTheStream) {
  stream0_->SubmitWithSequence(MemsetCommand(1, 0, 0), 5);
  StreamSlot* slot = session_->stream_slot(0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (slot->state.load() != static_cast<uint32_t>(StreamState::kFaulted) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(slot->state.load(), static_cast<uint32_t>(StreamState::kFaulted));
  std::optional<StreamErrorRecord> error = stream0_->TakeError();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INTERNAL);
  EXPECT_NE(error->message.find("expected 1"), std::string::npos)
      << error->message;
  EXPECT_EQ(slot->completed.Load(), 0u);
  while (session_->IsStreamAlive(0) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(session_->IsStreamAlive(0));
}

TEST_F(StreamExecutionTest, CorruptedRingFaultsTheStream) {
  StreamSlot* slot = session_->stream_slot(1);
  slot->ring.tail.Advance(3);  // not a multiple of 8
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (slot->state.load() != static_cast<uint32_t>(StreamState::kFaulted) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(slot->state.load(), static_cast<uint32_t>(StreamState::kFaulted));
  EXPECT_NE(std::string(slot->error_message).find("corrupted"),
            std::string::npos);
  // The other stream is unaffected.
  const uint64_t buffer = Alloc(64);
  Upload(buffer, std::vector<uint8_t>(64, 1));
}

TEST_F(StreamExecutionTest, RecordEventStoresSequenceAndTimestamp) {
  const uint32_t event = *session_->CreateEvent(0, true);
  proto::Command record;
  record.mutable_record_event()->set_event_slot(event);
  ASSERT_EQ(stream0_->Run(record), std::nullopt);
  const uint64_t first = stream0_->last_submitted();
  EventSlot* slot = session_->event_slot(event);
  EXPECT_EQ(slot->recorded_sequence.load(), first);
  EXPECT_EQ(slot->stream_slot, 0u);
  const uint64_t first_time = slot->timestamp_ns.load();
  EXPECT_GT(first_time, 0u);
  ASSERT_EQ(stream0_->Run(record), std::nullopt);
  EXPECT_EQ(slot->recorded_sequence.load(), first + 1);
  EXPECT_GE(slot->timestamp_ns.load(), first_time);

  record.mutable_record_event()->set_event_slot(event + 1);  // not created
  std::optional<StreamErrorRecord> error = stream0_->Run(record);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
  record.mutable_record_event()->set_event_slot(1u << 30);
  error = stream0_->Run(record);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
}

TEST_F(StreamExecutionTest, WaitStreamOrdersTwoStreams) {
  const uint32_t slot = *session_->CreateStream(0, 0);
  auto stream = Driver(slot);
  const uint64_t source = Alloc(64);
  const uint64_t destination = Alloc(64);
  Upload(source, std::vector<uint8_t>(64, 0));
  Upload(destination, std::vector<uint8_t>(64, 0));
  // The side stream waits for stream 0's next command, then copies.
  const uint64_t awaited = stream0_->last_submitted() + 1;
  stream->Submit(WaitCommand(0, awaited));
  const uint64_t copy = stream->Submit(D2D(source, destination, 64));
  EXPECT_FALSE(stream->WaitFor(copy, absl::Milliseconds(200)));
  ASSERT_EQ(stream0_->Run(MemsetCommand(source, 0x42, 64)), std::nullopt);
  ASSERT_TRUE(stream->WaitFor(copy));
  EXPECT_FALSE(stream->TakeError().has_value());
  EXPECT_EQ(Download<uint8_t>(destination, 64), std::vector<uint8_t>(64, 0x42));
}

TEST_F(StreamExecutionTest, WaitStreamRejectsBadTargets) {
  std::optional<StreamErrorRecord> error = stream0_->Run(WaitCommand(5, 1));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
  error = stream0_->Run(WaitCommand(999, 1));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
  // Waiting for its own future would never end.
  error = stream0_->Run(WaitCommand(0, stream0_->last_submitted() + 5));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  // Its own past is fine.
  EXPECT_EQ(stream0_->Run(WaitCommand(0, 1)), std::nullopt);
}

TEST_F(StreamExecutionTest, StreamOrderedFreeWaitsForItsFences) {
  const uint32_t slot = *session_->CreateStream(0, 0);
  auto stream = Driver(slot);
  const uint64_t buffer = Alloc(4096);
  proto::Command free_command;
  free_command.mutable_free()->set_address(buffer);
  proto::WaitStream* fence = free_command.mutable_free()->add_fences();
  fence->set_stream_slot(slot);
  fence->set_sequence(1);  // the side stream's first command, not sent yet
  const uint64_t sequence = stream0_->Submit(free_command);
  EXPECT_FALSE(stream0_->WaitFor(sequence, absl::Milliseconds(200)));
  EXPECT_TRUE(session_->ValidateRange(buffer, 4096).ok());
  ASSERT_EQ(stream->Run(MemsetCommand(buffer, 1, 4096)), std::nullopt);
  ASSERT_TRUE(stream0_->WaitFor(sequence));
  EXPECT_FALSE(stream0_->TakeError().has_value());
  EXPECT_FALSE(session_->ValidateRange(buffer, 1).ok());
  EXPECT_EQ(devices_->arena(0).Stats().allocation_count, 0u);

  // A stream-ordered double free is a stream error.
  std::optional<StreamErrorRecord> error = stream0_->Run(free_command);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->op, "free");
}

TEST_F(StreamExecutionTest, DestroyStreamRunsWhatWasSubmitted) {
  const uint32_t slot = *session_->CreateStream(0, 0);
  auto stream = Driver(slot);
  const uint64_t buffer = Alloc(1000);
  for (int i = 0; i < 100; ++i)
    stream->Submit(MemsetCommand(buffer + i * 10, i, 10));
  ASSERT_TRUE(session_->DestroyStream(slot).ok());
  EXPECT_EQ(stream->slot()->completed.Load(), 100u);
  std::vector<uint8_t> bytes = Download<uint8_t>(buffer, 1000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], i / 10);
}

TEST_F(StreamExecutionTest, DestroyingAStreamBlockedInAWaitReturns) {
  // Waits for stream 0's next command, which nobody has sent: as
  // cudaStreamDestroy, DestroyStream returns and the stream finishes (and
  // frees its slot) once that work is done.
  const uint32_t slot = *session_->CreateStream(0, 0);
  auto stream = Driver(slot);
  const uint64_t next = stream0_->slot()->completed.Load() + 1;
  stream->Submit(WaitCommand(0, next));
  absl::SleepFor(absl::Milliseconds(50));
  std::future<absl::Status> destroyed = std::async(
      std::launch::async, [&] { return session_->DestroyStream(slot); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(10)),
            std::future_status::ready)
      << "DestroyStream is stuck behind the stream's wait";
  EXPECT_TRUE(destroyed.get().ok());
  EXPECT_FALSE(session_->DestroyStream(slot).ok());  // already destroyed
  // The awaited work arrives: the destroyed stream completes its wait and
  // its slot is handed out again.
  const uint64_t buffer = Alloc(16);
  stream0_->Run(MemsetCommand(buffer, 1, 16));
  ASSERT_TRUE(stream->WaitFor(1, absl::Seconds(10)));
  absl::StatusOr<uint32_t> again = absl::InternalError("not yet");
  for (int attempt = 0; attempt < 100; ++attempt) {
    again = session_->CreateStream(0, 0);
    ASSERT_TRUE(again.ok()) << again.status();
    if (*again == slot) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(*again, slot);
}

TEST_F(StreamExecutionTest, WaitsBeyondTheBudgetFailInsteadOfAddingThreads) {
  executor_->wait_budget().SetLimits({/*per_session=*/2, /*total=*/10});
  const uint64_t next = stream0_->slot()->completed.Load() + 1;
  std::vector<std::unique_ptr<StreamDriver>> waiters;
  std::vector<uint64_t> sequences;
  for (int i = 0; i < 4; ++i) {
    waiters.push_back(Driver(*session_->CreateStream(0, 0)));
    sequences.push_back(waiters.back()->Submit(WaitCommand(0, next)));
  }
  // Two waits block; the other two fail at once, naming the flag.
  int failed = 0;
  for (int i = 0; i < 4; ++i) {
    if (!waiters[i]->WaitFor(sequences[i], absl::Milliseconds(500))) continue;
    std::optional<StreamErrorRecord> error = waiters[i]->TakeError();
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::RESOURCE_EXHAUSTED);
    EXPECT_NE(error->message.find("--max_blocked_waits_per_session"),
              std::string::npos)
        << error->message;
    ++failed;
  }
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(executor_->wait_budget().blocked(), 2u);
  EXPECT_LE(devices_->scheduler(0).threads(), devices_->multiprocessors() + 2);
  // The awaited work arrives: the blocked waits complete, their places
  // come back.
  const uint64_t buffer = Alloc(16);
  stream0_->Run(MemsetCommand(buffer, 1, 16));
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(waiters[i]->WaitFor(sequences[i], absl::Seconds(10)));
  }
  EXPECT_EQ(executor_->wait_budget().blocked(), 0u);
}

TEST_F(StreamExecutionTest, CloseStopsAStreamBlockedInAWait) {
  const uint32_t slot = *session_->CreateStream(0, 0);
  auto stream = Driver(slot);
  stream->Submit(WaitCommand(0, 1000));  // never satisfied
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  session_->Close();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// ---- Op launches -------------------------------------------------------

TEST_F(StreamExecutionTest, AsyncAddWritesTheOutput) {
  const uint64_t a = Alloc(16), b = Alloc(16), out = Alloc(16);
  Upload(a, std::vector<float>{1, 2, 3, 4});
  Upload(b, std::vector<float>{10, 20, 30, 40});
  ASSERT_EQ(
      stream0_->Run(LaunchCommand("aten::add", "Tensor",
                                  {TensorArg(TensorAt(a, {4})),
                                   TensorArg(TensorAt(b, {4})), ScalarArg(2)},
                                  {TensorAt(out, {4})})),
      std::nullopt);
  EXPECT_EQ(Download<float>(out, 4), (std::vector<float>{21, 42, 63, 84}));
  EXPECT_EQ(devices_->counters(0).kernels_executed.load(), 1u);
}

TEST_F(StreamExecutionTest, DefaultArgumentsAreFilledFromTheSchema) {
  const uint64_t a = Alloc(16), out = Alloc(16);
  Upload(a, std::vector<float>{1, 2, 3, 4});
  // add.Tensor(self, other, *, alpha=1): alpha omitted.
  ASSERT_EQ(stream0_->Run(LaunchCommand(
                "aten::add", "Tensor",
                {TensorArg(TensorAt(a, {4})), TensorArg(TensorAt(a, {4}))},
                {TensorAt(out, {4})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(out, 4), (std::vector<float>{2, 4, 6, 8}));
}

TEST_F(StreamExecutionTest, InPlaceAndOutVariantsWriteDirectly) {
  const uint64_t a = Alloc(16), b = Alloc(16), out = Alloc(16);
  Upload(a, std::vector<float>{1, 2, 3, 4});
  Upload(b, std::vector<float>{1, 1, 1, 1});
  ASSERT_EQ(stream0_->Run(LaunchCommand(
                "aten::add_", "Tensor",
                {TensorArg(TensorAt(a, {4})), TensorArg(TensorAt(b, {4}))},
                {TensorAt(a, {4})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(a, 4), (std::vector<float>{2, 3, 4, 5}));
  ASSERT_EQ(stream0_->Run(LaunchCommand(
                "aten::mul", "out",
                {TensorArg(TensorAt(a, {4})), TensorArg(TensorAt(a, {4})),
                 TensorArg(TensorAt(out, {4}))},
                {TensorAt(out, {4})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(out, 4), (std::vector<float>{4, 9, 16, 25}));
}

TEST_F(StreamExecutionTest, HostTensorAndStridedViews) {
  const uint64_t a = Alloc(24), out = Alloc(24);
  Upload(a, std::vector<float>{1, 2, 3, 4, 5, 6});  // 2x3
  proto::Argument three;
  three.mutable_host_tensor()->set_dtype(kDouble);
  const double value = 3.0;
  three.mutable_host_tensor()->set_data(&value, sizeof(value));
  // Transposed input view (3x2, strides {1, 3}) times a 0-dim CPU scalar.
  proto::TensorRef transposed = TensorAt(a, {3, 2});
  transposed.set_strides(0, 1);
  transposed.set_strides(1, 3);
  ASSERT_EQ(stream0_->Run(LaunchCommand("aten::mul", "Tensor",
                                        {TensorArg(transposed), three},
                                        {TensorAt(out, {3, 2})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(out, 6), (std::vector<float>{3, 12, 6, 15, 9, 18}));

  // A host tensor whose bytes do not match its shape is rejected.
  three.mutable_host_tensor()->add_sizes(2);
  std::optional<StreamErrorRecord> error = stream0_->Run(
      LaunchCommand("aten::mul", "Tensor", {TensorArg(transposed), three},
                    {TensorAt(out, {3, 2})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
}

TEST_F(StreamExecutionTest, TensorListAndOptionalTensorListArguments) {
  const uint64_t a = Alloc(16), b = Alloc(16), out = Alloc(32);
  Upload(a, std::vector<float>{1, 2, 3, 4});
  Upload(b, std::vector<float>{5, 6, 7, 8});
  proto::Argument list;
  *list.mutable_tensor_list()->add_values() = TensorArg(TensorAt(a, {4}));
  *list.mutable_tensor_list()->add_values() = TensorArg(TensorAt(b, {4}));
  ASSERT_EQ(stream0_->Run(LaunchCommand("aten::cat", "", {list, IntArg(0)},
                                        {TensorAt(out, {8})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(out, 8),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));

  // index.Tensor(self, Tensor?[] indices)
  const uint64_t indices = Alloc(16), picked = Alloc(8);
  Upload(indices, std::vector<int64_t>{3, 0});
  proto::Argument optional_list;
  *optional_list.mutable_tensor_list()->add_values() =
      TensorArg(TensorAt(indices, {2}, kLong));
  ASSERT_EQ(stream0_->Run(
                LaunchCommand("aten::index", "Tensor",
                              {TensorArg(TensorAt(out, {8})), optional_list},
                              {TensorAt(picked, {2})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(picked, 2), (std::vector<float>{4, 1}));
}

TEST_F(StreamExecutionTest, LaunchErrors) {
  const uint64_t a = Alloc(16), out = Alloc(64);
  Upload(a, std::vector<float>{1, 2, 3, 4});

  std::optional<StreamErrorRecord> error =
      stream0_->Run(LaunchCommand("aten::does_not_exist", "", {}, {}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_NOT_IMPLEMENTED_ERROR);
  EXPECT_NE(error->message.find("unknown operator aten::does_not_exist"),
            std::string::npos)
      << error->message;
  EXPECT_EQ(error->op, "aten::does_not_exist");

  // Output shape differs from what the kernel produces.
  error = stream0_->Run(LaunchCommand(
      "aten::neg", "", {TensorArg(TensorAt(a, {4}))}, {TensorAt(out, {2, 2})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_NE(error->message.find("shape"), std::string::npos);

  // The kernel itself throws.
  error = stream0_->Run(LaunchCommand(
      "aten::mm", "",
      {TensorArg(TensorAt(a, {2, 2})), TensorArg(TensorAt(a, {1, 4}))},
      {TensorAt(out, {2, 4})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_EQ(error->op, "aten::mm");
  // The kernel's own message, first: the client raises it as CPU would.
  EXPECT_EQ(error->message.find("mat1 and mat2 shapes cannot be multiplied"),
            0u)
      << error->message;
  EXPECT_EQ(error->message.find("Exception raised from"), std::string::npos)
      << "backtrace leaked into the message: " << error->message;

  // A tensor that runs past its allocation never reaches the kernel.
  error = stream0_->Run(LaunchCommand(
      "aten::neg", "", {TensorArg(TensorAt(a, {5}))}, {TensorAt(out, {5})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  EXPECT_NE(error->message.find("runs past the end"), std::string::npos);

  // Too many arguments, missing argument, None for a tensor.
  error = stream0_->Run(LaunchCommand("aten::neg", "",
                                      {TensorArg(TensorAt(a, {4})), IntArg(1)},
                                      {TensorAt(out, {4})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  error = stream0_->Run(LaunchCommand("aten::neg", "", {}, {}));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("missing argument 'self'"), std::string::npos);
  error = stream0_->Run(
      LaunchCommand("aten::neg", "", {NoneArg()}, {TensorAt(out, {4})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("None"), std::string::npos);

  // Output count must match the op's tensor results.
  error = stream0_->Run(
      LaunchCommand("aten::neg", "", {TensorArg(TensorAt(a, {4}))}, {}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);

  // Quantized dtypes and out-of-range enum arguments are refused before
  // ATen sees them.
  proto::TensorRef quantized = TensorAt(a, {4});
  quantized.set_dtype(12);  // QInt8
  error = stream0_->Run(
      LaunchCommand("aten::neg", "", {TensorArg(quantized)}, {quantized}));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("quantized"), std::string::npos)
      << error->message;
  proto::Argument sizes;
  sizes.mutable_int_list()->add_values(2);
  for (const auto& [dtype, layout] :
       {std::pair<int64_t, int64_t>{999, 0}, {-1, 0}, {46, 0}, {kFloat, 8}}) {
    error = stream0_->Run(LaunchCommand(
        "aten::ones", "",
        {sizes, IntArg(dtype), IntArg(layout), NoneArg(), NoneArg()}, {},
        true));
    ASSERT_TRUE(error.has_value()) << dtype << " " << layout;
    EXPECT_EQ(error->code, proto::INVALID_VALUE);
    EXPECT_NE(error->message.find("not a valid enum value"), std::string::npos)
        << error->message;
  }

  EXPECT_GE(devices_->counters(0).kernel_failures.load(), 7u);
  // The stream still works.
  ASSERT_EQ(stream0_->Run(LaunchCommand("aten::neg", "",
                                        {TensorArg(TensorAt(a, {4}))},
                                        {TensorAt(out, {4})})),
            std::nullopt);
  EXPECT_EQ(Download<float>(out, 4), (std::vector<float>{-1, -2, -3, -4}));
}

TEST_F(StreamExecutionTest, SynchronousLaunchReturnsSessionOwnedResults) {
  const uint64_t a = Alloc(24);
  Upload(a, std::vector<float>{1, 2, 3, 4, 5, 6});
  const uint64_t before = session_->allocated_bytes();
  ASSERT_EQ(
      stream0_->Run(LaunchCommand("aten::sum", "dim_IntList",
                                  {TensorArg(TensorAt(a, {2, 3})),
                                   [] {
                                     proto::Argument dims;
                                     dims.mutable_int_list()->add_values(1);
                                     return dims;
                                   }()},
                                  {}, /*synchronous=*/true)),
      std::nullopt);
  proto::OpReply reply = ReadReply(stream0_->last_submitted());
  ASSERT_EQ(reply.results_size(), 1);
  ASSERT_TRUE(reply.results(0).has_tensor()) << reply.DebugString();
  const proto::TensorRef& result = reply.results(0).tensor();
  EXPECT_EQ(result.dtype(), kFloat);
  EXPECT_EQ(result.device(), 0);
  ASSERT_EQ(result.sizes_size(), 1);
  EXPECT_EQ(result.sizes(0), 2);
  EXPECT_EQ(result.strides(0), 1);
  EXPECT_TRUE(session_->ValidateTensor(result).ok());
  EXPECT_EQ(session_->allocated_bytes(), before + 8);
  EXPECT_EQ(Download<float>(result.address(), 2), (std::vector<float>{6, 15}));
  EXPECT_TRUE(session_->Free(result.address()).ok());  // the client's to free
}

TEST_F(StreamExecutionTest, SynchronousScalarAndListResults) {
  const uint64_t a = Alloc(16);
  Upload(a, std::vector<float>{1.5f, 2, 3, 4});
  ASSERT_EQ(
      stream0_->Run(LaunchCommand("aten::_local_scalar_dense", "",
                                  {TensorArg(TensorAt(a, {}))}, {}, true)),
      std::nullopt);
  proto::OpReply reply = ReadReply(stream0_->last_submitted());
  ASSERT_EQ(reply.results_size(), 1);
  ASSERT_TRUE(reply.results(0).has_scalar()) << reply.DebugString();
  EXPECT_EQ(reply.results(0).scalar().d(), 1.5);

  // split.Tensor returns Tensor[]: each element becomes a new allocation.
  ASSERT_EQ(stream0_->Run(LaunchCommand(
                "aten::split", "Tensor",
                {TensorArg(TensorAt(a, {4})), IntArg(3), IntArg(0)}, {}, true)),
            std::nullopt);
  reply = ReadReply(stream0_->last_submitted());
  ASSERT_EQ(reply.results_size(), 1);
  ASSERT_TRUE(reply.results(0).has_tensor_list()) << reply.DebugString();
  const auto& parts = reply.results(0).tensor_list().values();
  ASSERT_EQ(parts.size(), 2);
  EXPECT_EQ(Download<float>(parts[0].tensor().address(), 3),
            (std::vector<float>{1.5f, 2, 3}));
  EXPECT_EQ(Download<float>(parts[1].tensor().address(), 1),
            (std::vector<float>{4}));
}

TEST_F(StreamExecutionTest, FactoryOpsUseTheirDeviceArgument) {
  proto::Argument sizes;
  sizes.mutable_int_list()->add_values(2);
  sizes.mutable_int_list()->add_values(3);
  proto::Argument device;
  device.set_device(1);
  ASSERT_EQ(
      stream0_->Run(LaunchCommand(
          "aten::ones", "",
          {sizes, IntArg(kDouble), NoneArg(), device, NoneArg()}, {}, true)),
      std::nullopt);
  proto::OpReply reply = ReadReply(stream0_->last_submitted());
  ASSERT_EQ(reply.results_size(), 1);
  const proto::TensorRef& result = reply.results(0).tensor();
  EXPECT_EQ(result.device(), 1);
  EXPECT_EQ(DeviceOfAddress(result.address()), 1);
  EXPECT_EQ(result.dtype(), kDouble);
  EXPECT_EQ(Download<double>(result.address(), 6), std::vector<double>(6, 1.0));

  device.set_device(7);  // no such device
  std::optional<StreamErrorRecord> error = stream0_->Run(LaunchCommand(
      "aten::ones", "", {sizes, IntArg(kDouble), NoneArg(), device, NoneArg()},
      {}, true));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_DEVICE);
}

TEST_F(StreamExecutionTest, FaultHookSeesEveryCommand) {
  InjectingHook hook;
  executor_->SetFaultHook(&hook);
  std::optional<StreamErrorRecord> error =
      stream0_->Run(LaunchCommand("test::fail", "", {}, {}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_EQ(error->message, "injected failure");
  hook.fail_adds_ = true;
  const uint64_t a = Alloc(16);
  error = stream0_->Run(
      LaunchCommand("aten::add", "Tensor",
                    {TensorArg(TensorAt(a, {4})), TensorArg(TensorAt(a, {4}))},
                    {TensorAt(a, {4})}));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::DEVICE_LOST);
  executor_->SetFaultHook(nullptr);
  EXPECT_EQ(stream0_->Run(LaunchCommand(
                "aten::add", "Tensor",
                {TensorArg(TensorAt(a, {4})), TensorArg(TensorAt(a, {4}))},
                {TensorAt(a, {4})})),
            std::nullopt);
}

TEST_F(StreamExecutionTest, StatsCountCommandsPerSession) {
  const uint64_t a = Alloc(16);
  Upload(a, std::vector<float>{1, 2, 3, 4});
  ASSERT_EQ(
      stream0_->Run(LaunchCommand(
          "aten::neg_", "", {TensorArg(TensorAt(a, {4}))}, {TensorAt(a, {4})})),
      std::nullopt);
  const SessionStatsSnapshot stats = session_->Stats();
  EXPECT_EQ(stats.id, 7u);
  EXPECT_EQ(stats.commands_executed, 2u);
  EXPECT_EQ(stats.streams, 2u);
  EXPECT_EQ(stats.allocated_bytes, 16u);
  EXPECT_EQ(devices_->counters(0).kernels_executed.load(), 1u);
}

// ---- Executor pool and stream priorities --------------------------------

// Polls `done` (a state another thread reaches) for up to 30 s.
template <typename Predicate>
bool Eventually(Predicate done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(StreamPriorityTest, PrioritiesAreClampedToTheCudaRange) {
  EXPECT_EQ(ClampStreamPriority(5), 0);
  EXPECT_EQ(ClampStreamPriority(0), 0);
  EXPECT_EQ(ClampStreamPriority(-2), -2);
  EXPECT_EQ(ClampStreamPriority(-100), kGreatestStreamPriority);
}

// A memset with this value is held by HoldingHook.
constexpr uint32_t kHoldValue = 0x401d;

proto::Command HoldCommand(uint64_t address) {
  return MemsetCommand(address, kHoldValue, 1);
}

// Holds the executor that runs a HoldCommand until Release(), without
// telling the scheduler (no BlockingRegion): the executor is busy, as with
// a long kernel.
class HoldingHook : public NoFaults {
 public:
  bool active() const override { return true; }
  absl::Status BeforeCommand(const StreamContext&,
                             const proto::Command& command, bool*) override {
    if (command.has_memset() && command.memset().value() == kHoldValue) {
      entered_.Notify();
      released_.WaitForNotification();
    }
    return absl::OkStatus();
  }
  void WaitUntilHeld() { entered_.WaitForNotification(); }
  void Release() { released_.Notify(); }

 private:
  absl::Notification entered_;
  absl::Notification released_;
};

// One executor per device (the device's only one is then the contended
// resource) and a hook that can hold it.
class OneExecutorTest : public ::testing::Test {
 protected:
  OneExecutorTest() {
    devices_ = *Devices::Create(2, 64 << 20, /*executors=*/1);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &op_runner_);
    executor_->SetFaultHook(&hook_);
    session_ = MakeTestSession(8, devices_.get(), executor_.get());
  }
  ~OneExecutorTest() override { session_->Close(); }

  std::unique_ptr<StreamDriver> Driver(uint32_t slot) {
    StreamSlot* shared = session_->stream_slot(slot);
    return std::make_unique<StreamDriver>(
        shared, session_->ring_buffer(slot), session_->limits().ring_bytes,
        devices_->doorbell(shared->device), session_->ring_fd(shared->device));
  }
  uint64_t Alloc(uint64_t bytes) { return *session_->Allocate(0, bytes); }
  void Upload(StreamDriver& stream, uint64_t address,
              const std::vector<float>& values) {
    std::memcpy(session_->staging(), values.data(), values.size() * 4);
    ASSERT_EQ(stream.Run(H2D(0, address, values.size() * 4)), std::nullopt);
  }
  std::vector<float> Download(StreamDriver& stream, uint64_t address,
                              size_t count) {
    std::vector<float> values(count);
    EXPECT_EQ(stream.Run(D2H(address, 0, count * 4)), std::nullopt);
    std::memcpy(values.data(), session_->staging(), count * 4);
    return values;
  }

  std::unique_ptr<Devices> devices_;
  AtenOpRunner op_runner_;
  HoldingHook hook_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
};

TEST_F(OneExecutorTest, TheDeviceHasTheConfiguredExecutors) {
  EXPECT_EQ(devices_->multiprocessors(), 1);
  EXPECT_EQ(devices_->scheduler(0).executors(), 1);
  EXPECT_EQ(devices_->scheduler(0).threads(), 1);
  // Streams are runners, not threads.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(session_->CreateStream(0, 0).ok());
  EXPECT_EQ(devices_->scheduler(0).threads(), 1);
}

// With the device's only executor busy, a kernel submitted later on a
// high-priority stream runs before one submitted earlier on a low-priority
// stream. The two kernels do not commute (x + 1 vs x * 2), so the result
// shows their order.
TEST_F(OneExecutorTest, AHighPriorityStreamRunsBeforeAnEarlierLowPriorityOne) {
  auto stream0 = Driver(0);
  const uint64_t x = Alloc(16), ones = Alloc(16), twos = Alloc(16);
  Upload(*stream0, x, {1, 2, 3, 4});
  Upload(*stream0, ones, {1, 1, 1, 1});
  Upload(*stream0, twos, {2, 2, 2, 2});
  auto low = Driver(*session_->CreateStream(0, 0));
  auto high = Driver(*session_->CreateStream(0, -1));
  const uint64_t held = stream0->Submit(HoldCommand(Alloc(16)));
  hook_.WaitUntilHeld();
  const uint64_t low_done = low->Submit(LaunchCommand(
      "aten::add_", "Tensor",
      {TensorArg(TensorAt(x, {4})), TensorArg(TensorAt(ones, {4}))},
      {TensorAt(x, {4})}));
  const uint64_t high_done = high->Submit(LaunchCommand(
      "aten::mul_", "Tensor",
      {TensorArg(TensorAt(x, {4})), TensorArg(TensorAt(twos, {4}))},
      {TensorAt(x, {4})}));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_LT(low->slot()->completed.Load(), low_done);
  EXPECT_LT(high->slot()->completed.Load(), high_done);
  hook_.Release();
  ASSERT_TRUE(stream0->WaitFor(held));
  ASSERT_TRUE(high->WaitFor(high_done));
  ASSERT_TRUE(low->WaitFor(low_done));
  EXPECT_EQ(low->TakeError(), std::nullopt);
  EXPECT_EQ(high->TakeError(), std::nullopt);
  EXPECT_EQ(Download(*stream0, x, 4), (std::vector<float>{3, 5, 7, 9}));
}

// A stream that waits for a command another stream of the same device has
// not even received yet: with one executor, the waiting stream must not
// keep the awaited one from running (managed blocking).
TEST_F(OneExecutorTest, AWaitForAnotherStreamsLaterWorkDoesNotDeadlock) {
  auto stream0 = Driver(0);
  const uint64_t x = Alloc(16);
  Upload(*stream0, x, {0, 0, 0, 0});
  auto waiter = Driver(*session_->CreateStream(0, 0));
  const uint64_t awaited = stream0->last_submitted() + 2;
  waiter->Submit(WaitCommand(0, awaited));
  const uint64_t after_wait = waiter->Submit(MemsetCommand(x, 7, 4));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_LT(waiter->slot()->completed.Load(), after_wait);
  stream0->Submit(MemsetCommand(x + 4, 1, 4));
  stream0->Submit(MemsetCommand(x + 8, 2, 4));
  ASSERT_TRUE(waiter->WaitFor(after_wait, absl::Seconds(10)));
  EXPECT_EQ(waiter->TakeError(), std::nullopt);
  EXPECT_EQ(stream0->slot()->completed.Load(), awaited);
  // The spare thread that stood in for the blocked executor goes away.
  EXPECT_TRUE(
      Eventually([&] { return devices_->scheduler(0).threads() == 1; }));
}

// Streams stopped while queued behind a busy executor do not hang Close.
TEST_F(OneExecutorTest, CloseStopsStreamsQueuedBehindABusyExecutor) {
  auto stream0 = Driver(0);
  const uint64_t a = Alloc(16);
  auto other = Driver(*session_->CreateStream(0, 0));
  stream0->Submit(HoldCommand(a));
  hook_.WaitUntilHeld();
  for (int i = 0; i < 10; ++i) other->Submit(MemsetCommand(a, i, 16));
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(50));
    hook_.Release();
  });
  session_->Close();  // waits for the held command, runs nothing more
  release.join();
  EXPECT_LT(other->slot()->completed.Load(), 10u);
  EXPECT_FALSE(session_->IsStreamAlive(0));
  EXPECT_EQ(devices_->scheduler(0).runners(), 0u);
}

}  // namespace
}  // namespace openreg::daemon
