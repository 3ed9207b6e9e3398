// Hostile input on the data plane: random bytes, random commands and random
// op launches (real ATen ops with random arguments and tensor views, from
// command_generator.h) must never crash the daemon or stall a stream; every
// command completes and the stream keeps working afterwards. The seed is
// fixed so that a failure reproduces; OPENREG_FUZZ_SEED and
// OPENREG_FUZZ_ITERATIONS explore more.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "data_plane/device_address.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/sessions/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/command_generator.h"
#include "tests/cpp/stream_driver.h"

namespace openreg::daemon {
namespace {

uint32_t EnvOr(const char* name, uint32_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? static_cast<uint32_t>(std::atoll(value)) : fallback;
}

TEST(CommandFuzzTest, RandomCommandsNeverCrashOrStall) {
  std::unique_ptr<Devices> devices = *Devices::Create(2, 64 << 20);
  AtenOpRunner op_runner;
  CommandExecutor executor(devices.get(), &op_runner);
  SessionLimits limits;
  limits.max_streams = 4;
  limits.max_events = 16;
  limits.ring_bytes = 64 * 1024;
  limits.reply_bytes = 64 * 1024;
  limits.staging_bytes = 1 << 20;
  SessionIdentity identity;
  identity.id = 1;
  identity.peer = PeerCredentials{getpid(), getuid(), getgid()};
  std::unique_ptr<Session> session =
      *Session::Create(identity, devices.get(), &executor, limits);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(session->CreateEvent(0, false).ok());

  constexpr uint64_t kBufferBytes = 256;
  std::vector<uint64_t> buffers;
  for (int i = 0; i < 6; ++i) {
    buffers.push_back(*session->Allocate(i % 2, kBufferBytes));
  }
  const uint32_t seed = EnvOr("OPENREG_FUZZ_SEED", 20240601);
  const uint32_t iterations = EnvOr("OPENREG_FUZZ_ITERATIONS", 1500);
  CommandGenerator fuzzer(seed, buffers, kBufferBytes);
  StreamDriver stream(session->stream_slot(0), session->ring_buffer(0),
                      limits.ring_bytes, session->devices().doorbell(0),
                      session->ring_fd(0));
  int failures = 0;
  for (uint32_t i = 0; i < iterations; ++i) {
    uint64_t sequence;
    const uint32_t kind = fuzzer.Next() % 10;
    if (kind == 0) {
      sequence = stream.SubmitRaw(fuzzer.Garbage());
    } else if (kind < 7) {
      sequence = stream.Submit(fuzzer.Launch());
    } else {
      sequence = stream.Submit(fuzzer.Other());
    }
    ASSERT_TRUE(stream.WaitFor(sequence, absl::Seconds(60)))
        << "command " << i << " (seed " << seed << ") did not complete";
    if (stream.TakeError().has_value()) ++failures;
    // Results of synchronous launches belong to the session: free them so
    // the device does not fill up.
    // (Their addresses are in the reply; the table tracks them anyway.)
  }
  // The fuzzer produces both bad input and kernels that really run.
  const uint64_t kernels = devices->counters(0).kernels_executed.load();
  std::cout << iterations << " commands: " << failures << " failed, " << kernels
            << " kernels ran\n";
  EXPECT_GT(failures, 0);
  EXPECT_GT(kernels, iterations / 50);
  EXPECT_EQ(session->stream_slot(0)->state.load(),
            static_cast<uint32_t>(StreamState::kActive));

  // Still fully functional.
  proto::Command fill;
  fill.mutable_memset()->set_dst(buffers[0]);
  fill.mutable_memset()->set_value(7);
  fill.mutable_memset()->set_size(kBufferBytes);
  EXPECT_EQ(stream.Run(fill), std::nullopt);
  session->Close();
  EXPECT_EQ(devices->arena(0).Stats().allocation_count, 0u);
  EXPECT_EQ(devices->arena(1).Stats().allocation_count, 0u);
}

}  // namespace
}  // namespace openreg::daemon
