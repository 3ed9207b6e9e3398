// The fault injector behind the executor's hook: triggers, scope,
// determinism and what each model does to commands, sessions and devices.
// Kernels are a fake runner that writes 1.0f into every output.
#include "device_daemon/faults/fault_injector.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/error_codes.h"
#include "data_plane/fault_plan.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/faults/corruption.h"
#include "device_daemon/sessions/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kFloat = 6;
constexpr int32_t kHalf = 5;
constexpr int32_t kBFloat16 = 15;
constexpr int kElements = 16;

// Writes 1.0f into every element of every (contiguous float) output.
class OnesRunner : public OpRunner {
 public:
  absl::Status Run(const StreamContext& context, const proto::LaunchOp& op,
                   uint64_t, WrittenTensors* written) override {
    for (const proto::TensorRef& output : op.outputs()) {
      absl::StatusOr<PinnedRange> range = context.session->PinTensor(output);
      if (!range.ok()) return range.status();
      float* values = reinterpret_cast<float*>(range->data);
      for (int i = 0; i < kElements; ++i) values[i] = 1.0f;
    }
    if (written != nullptr) {
      written->assign(op.outputs().begin(), op.outputs().end());
    }
    return absl::OkStatus();
  }
};

proto::FaultPlan Plan(const std::string& json) {
  absl::StatusOr<proto::FaultPlan> plan = faults::ParseFaultPlan(json);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

class FaultInjectorTest : public ::testing::Test {
 protected:
  FaultInjectorTest() {
    devices_ = *Devices::Create(2, 16 << 20);
    injector_ = std::make_unique<FaultInjector>(devices_.get(),
                                                /*profile_commands=*/true);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &runner_);
    executor_->SetFaultHook(injector_.get());
    session_ = MakeTestSession(1, devices_.get(), executor_.get());
    other_ = MakeTestSession(2, devices_.get(), executor_.get());
    output_ = *session_->Allocate(0, kElements * sizeof(float));
  }
  ~FaultInjectorTest() override {
    other_->Close();
    session_->Close();
  }

  static StreamDriver Driver(Session& session, uint32_t slot) {
    return StreamDriver(
        session.stream_slot(slot), session.ring_buffer(slot),
        session.limits().ring_bytes,
        session.devices().doorbell(session.stream_slot(slot)->device),
        session.ring_fd(session.stream_slot(slot)->device));
  }

  proto::Command Mul(uint64_t address, int device = 0) const {
    proto::Command command;
    proto::LaunchOp* launch = command.mutable_launch();
    launch->set_name("aten::mul");
    launch->set_overload("Tensor");
    proto::TensorRef* output = launch->add_outputs();
    output->set_address(address);
    output->add_sizes(kElements);
    output->add_strides(1);
    output->set_dtype(kFloat);
    output->set_device(device);
    return command;
  }

  std::vector<float> Read(Session& session, uint64_t address) const {
    absl::StatusOr<PinnedRange> range =
        session.PinRange(address, kElements * sizeof(float));
    EXPECT_TRUE(range.ok()) << range.status();
    std::vector<float> values(kElements);
    std::memcpy(values.data(), range->data, kElements * sizeof(float));
    return values;
  }

  std::vector<proto::FaultRecord> Log() const {
    uint64_t next = 0;
    uint64_t dropped = 0;
    return injector_->log().Read(0, &next, &dropped);
  }

  // The (element, bit) a seeded flip of mul's output lands on.
  std::pair<int64_t, uint32_t> FlipSite(uint64_t seed) {
    injector_->Disarm({}, 0).IgnoreError();
    EXPECT_TRUE(
        injector_
            ->Arm(
                Plan(absl::StrCat(
                    R"({"seed": )", seed,
                    R"(, "corrupt_output": {}, "trigger": {"op": "aten::mul"}})")),
                session_.get())
            .ok());
    StreamDriver stream = Driver(*session_, 0);
    EXPECT_EQ(stream.Run(Mul(output_)), std::nullopt);
    const proto::FaultRecord record = Log().back();
    return {record.element(), record.bits(0)};
  }

  OnesRunner runner_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<FaultInjector> injector_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Session> other_;
  uint64_t output_ = 0;
};

TEST(FaultInjectorIdleTest, WithNothingArmedTheHookIsInactive) {
  std::unique_ptr<Devices> devices = *Devices::Create(1, 16 << 20);
  FaultInjector injector(devices.get(), /*profile_commands=*/false);
  EXPECT_FALSE(injector.active());
  absl::StatusOr<std::vector<uint32_t>> ids = injector.Arm(
      Plan(R"({"corrected_error": {}, "daemon_wide": true})"), nullptr);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(injector.active());
  EXPECT_EQ(*injector.Disarm(*ids, 0), 1u);
  EXPECT_FALSE(injector.active());
}

TEST_F(FaultInjectorTest, AKernelFailureFailsTheNthMatchOnly) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"kernel_failure": {"message": "planned"},
                                  "trigger": {"op": "aten::mul", "nth": 2}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  EXPECT_EQ(stream.Run(Mul(output_)), std::nullopt);
  std::optional<StreamErrorRecord> error = stream.Run(Mul(output_));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_THAT(error->message, HasSubstr("cudaErrorLaunchFailure"));
  EXPECT_THAT(error->message, HasSubstr("planned"));
  EXPECT_EQ(stream.Run(Mul(output_)), std::nullopt);
  const std::vector<proto::ArmedFault> armed = injector_->List();
  ASSERT_EQ(armed.size(), 1u);
  EXPECT_EQ(armed[0].matches(), 3u);
  EXPECT_EQ(armed[0].fired(), 1u);
}

TEST_F(FaultInjectorTest, AnOutputFlipChangesExactlyTheLoggedBit) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrupt_output": {"bits": [31, 23],
                                                     "element": 3},
                                  "trigger": {"op": "aten::mul.Tensor"}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  const std::vector<float> values = Read(*session_, output_);
  for (int i = 0; i < kElements; ++i) {
    // Flipping the sign and the exponent's lowest bit: 1.0 -> -0.5.
    EXPECT_EQ(values[i], i == 3 ? -0.5f : 1.0f) << i;
  }
  const proto::FaultRecord record = Log().back();
  EXPECT_EQ(record.model(), "corrupt_output");
  EXPECT_EQ(record.element(), 3);
  EXPECT_THAT(record.bits(), ::testing::ElementsAre(31, 23));
  EXPECT_EQ(record.value_before(), "1");
  EXPECT_EQ(record.value_after(), "-0.5");
  EXPECT_EQ(record.command(), "aten::mul.Tensor");
}

TEST_F(FaultInjectorTest, TheSameSeedPicksTheSameSiteAndOthersDiffer) {
  const auto first = FlipSite(11);
  EXPECT_EQ(FlipSite(11), first);
  std::set<std::pair<int64_t, uint32_t>> sites;
  for (uint64_t seed = 1; seed <= 5; ++seed) sites.insert(FlipSite(seed));
  EXPECT_GT(sites.size(), 1u);
}

TEST_F(FaultInjectorTest, ASessionScopedFaultNeverTouchesAnotherSession) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrupt_output": {"pattern": "zero"},
                                  "trigger": {"times": 0}})"),
                        session_.get())
                  .ok());
  const uint64_t theirs = *other_->Allocate(0, kElements * sizeof(float));
  StreamDriver their_stream = Driver(*other_, 0);
  ASSERT_EQ(their_stream.Run(Mul(theirs)), std::nullopt);
  EXPECT_EQ(Read(*other_, theirs), std::vector<float>(kElements, 1.0f));
  StreamDriver stream = Driver(*session_, 0);
  ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  const std::vector<float> values = Read(*session_, output_);
  EXPECT_EQ(std::count(values.begin(), values.end(), 0.0f), 1);
}

TEST_F(FaultInjectorTest, TheSessionsFaultsEndWithIt) {
  ASSERT_TRUE(
      injector_->Arm(Plan(R"({"corrected_error": {}})"), other_.get()).ok());
  EXPECT_EQ(injector_->List().size(), 1u);
  other_->Close();
  EXPECT_TRUE(injector_->List().empty());
  EXPECT_THAT(std::string(injector_->Disarm({1}, 1).status().message()),
              HasSubstr("fault 1 is not armed"));
}

TEST_F(FaultInjectorTest, ADaemonWideFaultBelongsToTheSessionThatArmedIt) {
  // It affects every session, but it is the arming session's: listed as
  // its, disarmable by it, and gone when it ends (docs/FAULT_INJECTION.md).
  absl::StatusOr<std::vector<uint32_t>> ids = injector_->Arm(
      Plan(R"({"corrected_error": {}, "daemon_wide": true})"), other_.get());
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(injector_->List().size(), 1u);
  EXPECT_EQ(injector_->List()[0].session_id(), other_->id());
  EXPECT_TRUE(injector_->Disarm(*ids, other_->id()).ok());
  EXPECT_TRUE(injector_->List().empty());
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrected_error": {}, "daemon_wide": true})"),
                        other_.get())
                  .ok());
  // Another session can neither disarm it nor keep it alive.
  EXPECT_EQ(injector_->Disarm({}, session_->id()).value_or(99), 0u);
  EXPECT_EQ(injector_->List().size(), 1u);
  other_->Close();
  EXPECT_TRUE(injector_->List().empty());
}

TEST_F(FaultInjectorTest, AStickyErrorFailsEveryLaterCommandOfTheSession) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"sticky": {}, "trigger": {"nth": 1}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  for (int i = 0; i < 3; ++i) {
    std::optional<StreamErrorRecord> error = stream.Run(Mul(output_));
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::ILLEGAL_ADDRESS);
  }
  std::string message;
  EXPECT_EQ(ReadStickyError(reinterpret_cast<const SessionHeader*>(
                                session_->segment().data()),
                            &message),
            static_cast<uint32_t>(proto::ILLEGAL_ADDRESS));
  EXPECT_THAT(message, HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_EQ(ErrorCodeOf(session_->Allocate(0, 64).status()),
            proto::ILLEGAL_ADDRESS);
  // Another session is fine.
  const uint64_t theirs = *other_->Allocate(0, kElements * sizeof(float));
  StreamDriver their_stream = Driver(*other_, 0);
  EXPECT_EQ(their_stream.Run(Mul(theirs)), std::nullopt);
}

TEST_F(FaultInjectorTest, ADeviceFaultStopsTheDeviceUntilResetAndLosesMemory) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"device_fault": {},
                                  "trigger": {"device": 0, "nth": 1}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  std::optional<StreamErrorRecord> error = stream.Run(Mul(output_));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::DEVICE_FAULT);
  EXPECT_THAT(error->message, HasSubstr("openreg-ctl device reset 0"));
  // Every session, on that device only.
  StreamDriver their_device0 = Driver(*other_, 0);
  EXPECT_EQ(their_device0.Run(Mul(output_))->code, proto::DEVICE_FAULT);
  EXPECT_EQ(ErrorCodeOf(other_->Allocate(0, 64).status()), proto::DEVICE_FAULT);
  const uint64_t on_device1 = *other_->Allocate(1, kElements * sizeof(float));
  StreamDriver their_device1 = Driver(*other_, 1);
  EXPECT_EQ(their_device1.Run(Mul(on_device1, 1)), std::nullopt);
  devices_->Reset(0);
  EXPECT_EQ(ErrorCodeOf(session_->PinRange(output_, 4).status()),
            proto::DEVICE_FAULT);
  const uint64_t fresh = *session_->Allocate(0, kElements * sizeof(float));
  EXPECT_EQ(stream.Run(Mul(fresh)), std::nullopt);
}

TEST_F(FaultInjectorTest, AnInjectedOutOfMemoryAlsoFailsTheClientsRetries) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"allocation_failure": {},
                                  "trigger": {"nth": 1}})"),
                        session_.get())
                  .ok());
  for (int attempt = 0; attempt < 6; ++attempt) {
    EXPECT_EQ(ErrorCodeOf(session_->Allocate(0, 4096).status()),
              proto::OUT_OF_MEMORY)
        << attempt;
  }
  EXPECT_TRUE(session_->Allocate(0, 4096).ok());
}

TEST_F(FaultInjectorTest, ProbabilityDrawsAreSeeded) {
  auto fired_matches = [&](uint64_t seed) {
    injector_->Disarm({}, 0).IgnoreError();
    const uint64_t since = Log().size();
    EXPECT_TRUE(
        injector_
            ->Arm(Plan(absl::StrCat(R"({"corrected_error": {}, "seed": )", seed,
                                    R"(, "trigger": {"probability": 0.3,
                                                "times": 0, "op": "aten::mul"}})")),
                  session_.get())
            .ok());
    StreamDriver stream = Driver(*session_, 0);
    for (int i = 0; i < 40; ++i)
      EXPECT_EQ(stream.Run(Mul(output_)), std::nullopt);
    std::vector<uint64_t> matches;
    const std::vector<proto::FaultRecord> log = Log();
    for (size_t i = since; i < log.size(); ++i) {
      matches.push_back(log[i].match());
    }
    return matches;
  };
  const std::vector<uint64_t> first = fired_matches(5);
  EXPECT_GT(first.size(), 2u);
  EXPECT_LT(first.size(), 30u);
  EXPECT_EQ(fired_matches(5), first);
  EXPECT_NE(fired_matches(6), first);
}

TEST_F(FaultInjectorTest, FiltersSelectByOpPatternStreamPidAndOutputs) {
  auto fired = [&](const std::string& trigger, const proto::Command& command,
                   uint32_t slot = 0) {
    injector_->Disarm({}, 0).IgnoreError();
    EXPECT_TRUE(injector_
                    ->Arm(Plan(absl::StrCat(R"({"corrected_error": {},
                                               "trigger": )",
                                            trigger, "}")),
                          session_.get())
                    .ok());
    StreamDriver stream = Driver(*session_, slot);
    EXPECT_EQ(stream.Run(command), std::nullopt);
    return injector_->List()[0].fired() == 1;
  };
  const proto::Command mul = Mul(output_);
  EXPECT_TRUE(fired(R"({"op": "aten::mul"})", mul));
  EXPECT_TRUE(fired(R"({"op": "aten::mul.Tensor"})", mul));
  EXPECT_FALSE(fired(R"({"op": "aten::mul.Scalar"})", mul));
  EXPECT_TRUE(fired(R"({"op": "aten::m?l*"})", mul));
  EXPECT_TRUE(fired(R"({"op": "*.Tensor"})", mul));
  EXPECT_FALSE(fired(R"({"op": "aten::*conv*"})", mul));
  EXPECT_TRUE(fired(R"({"stream": 0})", mul));
  EXPECT_FALSE(fired(R"({"stream": 1})", mul));
  EXPECT_TRUE(fired(absl::StrCat(R"({"pid": )", getpid(), "}"), mul));
  EXPECT_FALSE(fired(R"({"pid": 1})", mul));
  EXPECT_TRUE(fired(R"({"output": 0})", mul));
  EXPECT_FALSE(fired(R"({"output": 1})", mul));
  EXPECT_FALSE(fired(R"({"input": 0})", mul));  // mul here has no arguments
  EXPECT_FALSE(fired(R"({"device": 1})", mul));
  EXPECT_FALSE(fired(R"({"kind": "copy"})", mul));
}

TEST_F(FaultInjectorTest, AfterFiresOnEveryMatchPastTheFirstN) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrected_error": {},
                                  "trigger": {"after": 2, "times": 0}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  std::vector<uint64_t> matches;
  for (const proto::FaultRecord& record : Log()) {
    matches.push_back(record.match());
  }
  EXPECT_EQ(matches, (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(injector_->log().CorrectedErrors(0), 3u);
}

TEST_F(FaultInjectorTest, AnOpenTimeWindowFiresAndAClosedOneDoesNot) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrected_error": {}, "name": "open",
                                  "trigger": {"window_start_seconds": 0,
                                              "window_end_seconds": 3600,
                                              "times": 0}})"),
                        session_.get())
                  .ok());
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"corrected_error": {}, "name": "closed",
                                  "trigger": {"window_end_seconds": 0.05,
                                              "times": 0}})"),
                        session_.get())
                  .ok());
  absl::SleepFor(absl::Milliseconds(100));  // the second window has closed
  StreamDriver stream = Driver(*session_, 0);
  ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  std::map<std::string, uint64_t> fired;
  for (const proto::ArmedFault& fault : injector_->List()) {
    fired[fault.spec().name()] = fault.fired();
  }
  EXPECT_EQ(fired["open"], 2u);
  EXPECT_EQ(fired["closed"], 0u);
}

TEST_F(FaultInjectorTest, AFutureTimeWindowNeverFiresYet) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"kernel_failure": {},
                                  "trigger": {"window_start_seconds": 3600,
                                              "times": 0}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  EXPECT_EQ(stream.Run(Mul(output_)), std::nullopt);
  EXPECT_EQ(injector_->List()[0].matches(), 1u);
  EXPECT_EQ(injector_->List()[0].fired(), 0u);
}

TEST_F(FaultInjectorTest, AStuckBitIsForcedInEveryMatchingKernel) {
  ASSERT_TRUE(injector_
                  ->Arm(Plan(R"({"stuck_at": {"bit": 30, "value": 1,
                                               "element": 2},
                                  "trigger": {"op": "aten::mul"}})"),
                        session_.get())
                  .ok());
  StreamDriver stream = Driver(*session_, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
    uint32_t bits;
    const float value = Read(*session_, output_)[2];
    std::memcpy(&bits, &value, sizeof(bits));
    EXPECT_NE(bits & (1u << 30), 0u);
  }
  EXPECT_EQ(injector_->List()[0].fired(), 3u);
}

TEST_F(FaultInjectorTest, TheProfileCountsCommandsByDeviceKindOpAndPhase) {
  StreamDriver stream = Driver(*session_, 0);
  proto::Command backward = Mul(output_);
  backward.set_phase(proto::BACKWARD);
  ASSERT_EQ(stream.Run(Mul(output_)), std::nullopt);
  ASSERT_EQ(stream.Run(backward), std::nullopt);
  ASSERT_EQ(stream.Run(backward), std::nullopt);
  std::map<proto::CommandPhase, uint64_t> counts;
  for (const proto::CommandCount& count : injector_->Profile()) {
    if (count.kind() == proto::KERNEL) counts[count.phase()] += count.count();
  }
  EXPECT_EQ(counts[proto::FORWARD], 1u);
  EXPECT_EQ(counts[proto::BACKWARD], 2u);
}

TEST(CorruptionTest, ElementsAreShownInTheirDtype) {
  const uint16_t half_one = 0x3c00;
  EXPECT_EQ(FormatElement(reinterpret_cast<const char*>(&half_one), 2, kHalf),
            "1");
  const uint16_t bfloat_two = 0x4000;
  EXPECT_EQ(
      FormatElement(reinterpret_cast<const char*>(&bfloat_two), 2, kBFloat16),
      "2");
  const uint32_t raw = 0x01020304;
  EXPECT_EQ(FormatElement(reinterpret_cast<const char*>(&raw), 4, -1),
            "0x01020304");
}

TEST(CorruptionTest, LogicalIndicesFollowTheStrides) {
  proto::TensorRef transposed;  // a 2x3 view of a 3x2 tensor
  transposed.add_sizes(2);
  transposed.add_sizes(3);
  transposed.add_strides(1);
  transposed.add_strides(2);
  EXPECT_EQ(ElementOffset(transposed, 1), 2);  // (0, 1)
  EXPECT_EQ(ElementOffset(transposed, 3), 1);  // (1, 0)
  EXPECT_EQ(ElementOffset(transposed, 6), std::nullopt);
  EXPECT_EQ(ElementCount(transposed), 6);
}

TEST(CorruptionTest, BurstsAreAdjacentAndForcedBitsStay) {
  proto::Corruption burst;
  burst.set_bit_count(4);
  burst.set_burst(true);
  uint64_t word = 0;
  std::mt19937_64 rng(1);
  const std::vector<uint32_t> bits =
      CorruptElement(reinterpret_cast<char*>(&word), 8, burst, rng);
  ASSERT_EQ(bits.size(), 4u);
  for (size_t i = 1; i < bits.size(); ++i) EXPECT_EQ(bits[i], bits[i - 1] + 1);
  EXPECT_EQ(__builtin_popcountll(word), 4);
  EXPECT_TRUE(ForceBit(reinterpret_cast<char*>(&word), 8, 63, true));
  EXPECT_NE(word >> 63, 0u);
  EXPECT_FALSE(ForceBit(reinterpret_cast<char*>(&word), 8, 64, true));
}

}  // namespace
}  // namespace openreg::daemon

namespace openreg::daemon {
namespace {

proto::Command MulInto(uint64_t address) {
  proto::Command command;
  proto::LaunchOp* launch = command.mutable_launch();
  launch->set_name("aten::mul");
  launch->set_overload("Tensor");
  proto::TensorRef* output = launch->add_outputs();
  output->set_address(address);
  output->add_sizes(kElements);
  output->add_strides(1);
  output->set_dtype(kFloat);
  output->set_device(0);
  return command;
}

// With one executor per device, a hung command (an injected hang, which
// waits in a BlockingRegion) holds its own stream, not the device: another
// stream of the same device still runs, and closing the session ends the
// hang.
TEST(FaultInjectorExecutorTest,
     AHungStreamDoesNotStopAnotherStreamOnItsDevice) {
  std::unique_ptr<Devices> devices =
      *Devices::Create(1, 16 << 20, /*executors=*/1);
  OnesRunner runner;
  FaultInjector injector(devices.get(), /*profile_commands=*/false);
  CommandExecutor executor(devices.get(), &runner);
  executor.SetFaultHook(&injector);
  std::unique_ptr<Session> session =
      MakeTestSession(1, devices.get(), &executor);
  ASSERT_TRUE(injector
                  .Arm(Plan(R"({"hang": {"seconds": 0},
                                  "trigger": {"op": "aten::mul", "nth": 1}})"),
                       session.get())
                  .ok());
  const uint64_t hung_output = *session->Allocate(0, kElements * 4);
  const uint64_t other_output = *session->Allocate(0, kElements * 4);
  StreamDriver hung(session->stream_slot(0), session->ring_buffer(0),
                    session->limits().ring_bytes, devices->doorbell(0),
                    session->ring_fd(0));
  const uint64_t hung_sequence = hung.Submit(MulInto(hung_output));
  const uint32_t slot = *session->CreateStream(0, 0);
  StreamDriver other(session->stream_slot(slot), session->ring_buffer(slot),
                     session->limits().ring_bytes, devices->doorbell(0),
                     session->ring_fd(0));
  // The hang fires first (the only executor takes it), then the other
  // stream's kernel needs a thread.
  absl::SleepFor(absl::Milliseconds(50));
  const uint64_t other_sequence = other.Submit(MulInto(other_output));
  EXPECT_TRUE(other.WaitFor(other_sequence, absl::Seconds(10)));
  EXPECT_EQ(other.TakeError(), std::nullopt);
  EXPECT_LT(hung.slot()->completed.Load(), hung_sequence);
  session->Close();
  EXPECT_FALSE(session->IsStreamAlive(0));
}

}  // namespace
}  // namespace openreg::daemon
