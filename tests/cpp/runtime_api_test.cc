// The runtime client's public API against a real openreg-daemon.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "data_plane/device_address.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMemoryPerDevice = 128ull << 20;
constexpr int kFloatDtype = 6;  // c10::ScalarType::Float

std::vector<uint8_t> Pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> data(bytes);
  std::mt19937 generator(seed);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(generator());
  return data;
}

class RuntimeApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new SuiteDaemon;
    absl::Status started =
        daemon_->Start({"--devices=2", absl::StrCat("--memory_per_device=",
                                                    kMemoryPerDevice)});
    ASSERT_TRUE(started.ok()) << started;
  }

  static void TearDownTestSuite() {
    EXPECT_EQ(Shutdown(), Error::kSuccess) << GetLastErrorMessage();
    delete daemon_;  // stops it by pid
  }

  void SetUp() override {
    ASSERT_NE(daemon_, nullptr);
    ASSERT_TRUE(daemon_->running());
    ASSERT_EQ(SetDevice(0), Error::kSuccess) << GetLastErrorMessage();
    GetLastError();  // start every test with a clean slate
  }

  void* MallocOrDie(size_t bytes) {
    void* pointer = nullptr;
    EXPECT_EQ(Malloc(&pointer, bytes), Error::kSuccess)
        << GetLastErrorMessage();
    return pointer;
  }

  static SuiteDaemon* daemon_;
};

SuiteDaemon* RuntimeApiTest::daemon_ = nullptr;

// ---- Devices ----------------------------------------------------------

TEST_F(RuntimeApiTest, InitConnects) {
  EXPECT_EQ(Init(), Error::kSuccess);
  EXPECT_TRUE(IsConnected());
}

TEST_F(RuntimeApiTest, DeviceCount) {
  int count = 0;
  ASSERT_EQ(GetDeviceCount(&count), Error::kSuccess);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(GetDeviceCount(nullptr), Error::kInvalidValue);
}

TEST_F(RuntimeApiTest, SetAndGetDevice) {
  ASSERT_EQ(SetDevice(1), Error::kSuccess);
  int device = -1;
  ASSERT_EQ(GetDevice(&device), Error::kSuccess);
  EXPECT_EQ(device, 1);
  // The current device is per thread.
  int other_thread_device = -1;
  std::thread([&] { GetDevice(&other_thread_device); }).join();
  EXPECT_EQ(other_thread_device, 0);
  EXPECT_EQ(ResolveStream(kDefaultStream), 1u);
}

TEST_F(RuntimeApiTest, InvalidDeviceIndex) {
  EXPECT_EQ(SetDevice(7), Error::kInvalidDevice);
  EXPECT_THAT(
      GetLastErrorMessage(),
      HasSubstr("The device index is out of range: device 7 of a daemon with 2 "
                "openreg devices"));
  EXPECT_EQ(PeekAtLastError(), Error::kInvalidDevice);
  EXPECT_EQ(GetLastError(), Error::kInvalidDevice);
  EXPECT_EQ(GetLastError(), Error::kSuccess);
  EXPECT_EQ(SetDevice(-1), Error::kInvalidDevice);
  int device = -1;
  GetDevice(&device);
  EXPECT_EQ(device, 0);  // unchanged
  DeviceProperties properties;
  EXPECT_EQ(GetDeviceProperties(&properties, 2), Error::kInvalidDevice);
  size_t free_bytes = 0, total_bytes = 0;
  EXPECT_EQ(MemGetInfo(&free_bytes, &total_bytes, 9), Error::kInvalidDevice);
}

TEST_F(RuntimeApiTest, DeviceProperties) {
  DeviceProperties properties;
  ASSERT_EQ(GetDeviceProperties(&properties, 1), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_FALSE(properties.name.empty());
  EXPECT_EQ(properties.total_memory, kMemoryPerDevice);
}

TEST_F(RuntimeApiTest, MemGetInfo) {
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(MemGetInfo(&free_bytes, &total_bytes, 0), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(total_bytes, kMemoryPerDevice);
  EXPECT_LE(free_bytes, total_bytes);
}

TEST_F(RuntimeApiTest, Stats) {
  void* pointer = MallocOrDie(1 << 20);
  proto::GetStatsReply stats;
  ASSERT_EQ(GetStats(&stats), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_EQ(stats.devices_size(), 2);
  EXPECT_GE(stats.devices(0).allocated_bytes(), 1u << 20);
  EXPECT_GE(stats.sessions_size(), 1);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

// ---- Memory -----------------------------------------------------------

TEST_F(RuntimeApiTest, MallocAndFree) {
  void* pointer = MallocOrDie(1 << 20);
  ASSERT_NE(pointer, nullptr);
  int device = -1;
  ASSERT_EQ(PointerGetDevice(pointer, &device), Error::kSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(Free(pointer), Error::kSuccess) << GetLastErrorMessage();

  ASSERT_EQ(SetDevice(1), Error::kSuccess);
  void* on_device_1 = MallocOrDie(4096);
  ASSERT_EQ(PointerGetDevice(on_device_1, &device), Error::kSuccess);
  EXPECT_EQ(device, 1);
  EXPECT_EQ(Free(on_device_1), Error::kSuccess);
  EXPECT_EQ(DeviceSynchronize(), Error::kSuccess) << GetLastErrorMessage();

  void* empty = reinterpret_cast<void*>(1);
  EXPECT_EQ(Malloc(&empty, 0), Error::kSuccess);
  EXPECT_EQ(empty, nullptr);
  EXPECT_EQ(Free(nullptr), Error::kSuccess);
}

TEST_F(RuntimeApiTest, DoubleFree) {
  void* pointer = MallocOrDie(4096);
  ASSERT_EQ(Free(pointer), Error::kSuccess);
  EXPECT_EQ(Free(pointer), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("double free"));
  EXPECT_EQ(DeviceSynchronize(), Error::kSuccess) << GetLastErrorMessage();
}

TEST_F(RuntimeApiTest, FreeRejectsBadPointers) {
  int host_value = 0;
  EXPECT_EQ(Free(&host_value), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("not a device pointer"));
  // A device address of a device the daemon does not have.
  EXPECT_EQ(Free(reinterpret_cast<void*>(MakeDeviceAddress(9, 4096))),
            Error::kInvalidValue);
  int device = -1;
  EXPECT_EQ(PointerGetDevice(&host_value, &device), Error::kInvalidValue);
}

TEST_F(RuntimeApiTest, OutOfMemoryAndRecovery) {
  void* too_big = nullptr;
  EXPECT_EQ(Malloc(&too_big, kMemoryPerDevice + 1), Error::kOutOfMemory);
  EXPECT_FALSE(GetLastErrorMessage().empty());
  EXPECT_EQ(too_big, nullptr);

  const size_t large = kMemoryPerDevice * 6 / 10;
  void* first = MallocOrDie(large);
  void* second = nullptr;
  EXPECT_EQ(Malloc(&second, large), Error::kOutOfMemory);
  // Free is stream-ordered and does not block; the next Malloc waits for
  // the pending free and succeeds.
  ASSERT_EQ(Free(first), Error::kSuccess);
  void* third = MallocOrDie(large);
  EXPECT_NE(third, nullptr);
  EXPECT_EQ(Free(third), Error::kSuccess);
}

// ---- Copies -----------------------------------------------------------

TEST_F(RuntimeApiTest, MemcpyAllKinds) {
  const size_t bytes = 1000;
  const std::vector<uint8_t> source = Pattern(bytes, 1);
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  ASSERT_EQ(Memcpy(a, source.data(), bytes, MemcpyKind::kHostToDevice),
            Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(Memcpy(b, a, bytes, MemcpyKind::kDeviceToDevice), Error::kSuccess)
      << GetLastErrorMessage();
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(Memcpy(back.data(), b, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(back, source);
  std::vector<uint8_t> host_copy(bytes);
  ASSERT_EQ(
      Memcpy(host_copy.data(), source.data(), bytes, MemcpyKind::kHostToHost),
      Error::kSuccess);
  EXPECT_EQ(host_copy, source);
  EXPECT_EQ(Free(a), Error::kSuccess);
  EXPECT_EQ(Free(b), Error::kSuccess);
}

TEST_F(RuntimeApiTest, MultiChunkRoundTrip) {
  // 20 MiB spans several 4 MiB staging chunks; the odd size leaves a
  // partial last chunk.
  const size_t bytes = (20u << 20) + 123;
  const std::vector<uint8_t> source = Pattern(bytes, 2);
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  ASSERT_EQ(Memcpy(a, source.data(), bytes, MemcpyKind::kHostToDevice),
            Error::kSuccess)
      << GetLastErrorMessage();
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(Memcpy(back.data(), a, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_TRUE(back == source);

  // The same through a created stream with the async calls.
  StreamId stream = 0;
  ASSERT_EQ(StreamCreate(&stream), Error::kSuccess) << GetLastErrorMessage();
  const std::vector<uint8_t> second = Pattern(bytes, 3);
  ASSERT_EQ(
      MemcpyAsync(b, second.data(), bytes, MemcpyKind::kHostToDevice, stream),
      Error::kSuccess)
      << GetLastErrorMessage();
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(
      MemcpyAsync(back.data(), b, bytes, MemcpyKind::kDeviceToHost, stream),
      Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_TRUE(back == second);
  EXPECT_EQ(StreamDestroy(stream), Error::kSuccess);
  EXPECT_EQ(Free(a), Error::kSuccess);
  EXPECT_EQ(Free(b), Error::kSuccess);
}

TEST_F(RuntimeApiTest, CopiesAcrossDevices) {
  const size_t bytes = 5u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 4);
  void* on_device_0 = MallocOrDie(bytes);
  ASSERT_EQ(SetDevice(1), Error::kSuccess);
  void* on_device_1 = MallocOrDie(bytes);
  ASSERT_EQ(
      Memcpy(on_device_0, source.data(), bytes, MemcpyKind::kHostToDevice),
      Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(
      Memcpy(on_device_1, on_device_0, bytes, MemcpyKind::kDeviceToDevice),
      Error::kSuccess)
      << GetLastErrorMessage();
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(Memcpy(back.data(), on_device_1, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_TRUE(back == source);
  EXPECT_EQ(Free(on_device_0), Error::kSuccess);
  EXPECT_EQ(Free(on_device_1), Error::kSuccess);
}

TEST_F(RuntimeApiTest, Memset) {
  const size_t bytes = 10000;
  void* pointer = MallocOrDie(bytes);
  ASSERT_EQ(MemsetAsync(pointer, 0xab, bytes), Error::kSuccess);
  // Only the low byte counts, as in cudaMemset.
  ASSERT_EQ(MemsetAsync(pointer, 0x1cd, 100), Error::kSuccess);
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(Memcpy(back.data(), pointer, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(back[0], 0xcd);
  EXPECT_EQ(back[99], 0xcd);
  EXPECT_EQ(back[100], 0xab);
  EXPECT_EQ(back[bytes - 1], 0xab);
  int host_value = 0;
  EXPECT_EQ(MemsetAsync(&host_value, 0, sizeof(host_value)),
            Error::kInvalidValue);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

TEST_F(RuntimeApiTest, MemcpyRejectsWrongKinds) {
  const size_t bytes = 64;
  void* device = MallocOrDie(bytes);
  std::vector<uint8_t> host(bytes);

  EXPECT_EQ(Memcpy(host.data(), host.data(), bytes, MemcpyKind::kHostToDevice),
            Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(),
              HasSubstr("destination " /* host given as device dst */));
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("is not a device pointer"));
  EXPECT_EQ(Memcpy(device, device, bytes, MemcpyKind::kHostToDevice),
            Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("source"));
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("is a device pointer"));
  EXPECT_EQ(Memcpy(device, host.data(), bytes, MemcpyKind::kDeviceToHost),
            Error::kInvalidValue);
  EXPECT_EQ(Memcpy(device, host.data(), bytes, MemcpyKind::kDeviceToDevice),
            Error::kInvalidValue);
  EXPECT_EQ(Memcpy(host.data(), device, bytes, MemcpyKind::kHostToHost),
            Error::kInvalidValue);
  EXPECT_EQ(MemcpyAsync(nullptr, device, bytes, MemcpyKind::kDeviceToHost),
            Error::kInvalidValue);
  EXPECT_EQ(Memcpy(device, host.data(), bytes, static_cast<MemcpyKind>(42)),
            Error::kInvalidValue);
  EXPECT_EQ(Free(device), Error::kSuccess);
}

TEST_F(RuntimeApiTest, MemcpyOfUnallocatedDeviceMemoryFails) {
  // A well-formed device address that no allocation covers: the daemon
  // rejects the copy and the synchronous call reports it.
  void* nowhere =
      reinterpret_cast<void*>(MakeDeviceAddress(0, kMemoryPerDevice + 4096));
  std::vector<uint8_t> host(256);
  const Error error =
      Memcpy(host.data(), nowhere, host.size(), MemcpyKind::kDeviceToHost);
  EXPECT_NE(error, Error::kSuccess);
  EXPECT_THAT(GetLastErrorMessage(),
              HasSubstr("copy_device_to_host failed on openreg:0"));
  // The error was reported once; the stream works again.
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kSuccess)
      << GetLastErrorMessage();

  // Asynchronous: reported at the next synchronizing call.
  EXPECT_EQ(
      MemcpyAsync(nowhere, host.data(), host.size(), MemcpyKind::kHostToDevice),
      Error::kSuccess);
  EXPECT_NE(StreamSynchronize(kDefaultStream), Error::kSuccess);
  EXPECT_THAT(GetLastErrorMessage(),
              HasSubstr("copy_host_to_device failed on openreg:0"));
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kSuccess);
}

// ---- Streams ----------------------------------------------------------

TEST_F(RuntimeApiTest, StreamLifecycle) {
  StreamId stream = 0;
  ASSERT_EQ(StreamCreate(&stream), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_GE(stream, 2u);  // slots 0 and 1 are the default streams
  int device = -1;
  ASSERT_EQ(StreamGetDevice(stream, &device), Error::kSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(StreamQuery(stream), Error::kSuccess);  // nothing submitted

  const size_t bytes = 8u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 5);
  void* pointer = MallocOrDie(bytes);
  const uint64_t before = LastSubmitted(stream);
  ASSERT_EQ(MemcpyAsync(pointer, source.data(), bytes,
                        MemcpyKind::kHostToDevice, stream),
            Error::kSuccess);
  EXPECT_GT(LastSubmitted(stream), before);
  const Error query = StreamQuery(stream);
  EXPECT_TRUE(query == Error::kSuccess || query == Error::kNotReady);
  // kNotReady is an answer, not an error.
  EXPECT_EQ(PeekAtLastError(), Error::kSuccess);
  ASSERT_EQ(StreamSynchronize(stream), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(StreamQuery(stream), Error::kSuccess);

  ASSERT_EQ(StreamDestroy(stream), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(StreamSynchronize(stream), Error::kInvalidHandle);
  EXPECT_EQ(StreamQuery(stream), Error::kInvalidHandle);
  EXPECT_EQ(StreamDestroy(stream), Error::kInvalidHandle);
  EXPECT_EQ(StreamDestroy(0), Error::kInvalidHandle);  // a default stream
  EXPECT_EQ(StreamSynchronize(1000), Error::kInvalidHandle);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

TEST_F(RuntimeApiTest, StreamSlotsAreReused) {
  // More streams than the session has slots: destroyed slots come back,
  // and their sequence numbers restart without confusing the client.
  void* pointer = MallocOrDie(4096);
  for (int i = 0; i < 100; ++i) {
    StreamId stream = 0;
    ASSERT_EQ(StreamCreate(&stream, /*priority=*/-1), Error::kSuccess)
        << GetLastErrorMessage();
    ASSERT_EQ(MemsetAsync(pointer, i, 4096, stream), Error::kSuccess);
    ASSERT_EQ(StreamSynchronize(stream), Error::kSuccess)
        << GetLastErrorMessage();
    ASSERT_EQ(StreamDestroy(stream), Error::kSuccess) << GetLastErrorMessage();
  }
  uint8_t last = 0;
  ASSERT_EQ(Memcpy(&last, pointer, 1, MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_EQ(last, 99);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

TEST_F(RuntimeApiTest, StreamWaitStreamOrdersWork) {
  const size_t bytes = 12u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 6);
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  StreamId producer = 0, consumer = 0;
  ASSERT_EQ(StreamCreate(&producer), Error::kSuccess);
  ASSERT_EQ(StreamCreate(&consumer), Error::kSuccess);
  ASSERT_EQ(
      MemcpyAsync(a, source.data(), bytes, MemcpyKind::kHostToDevice, producer),
      Error::kSuccess);
  ASSERT_EQ(StreamWaitStream(consumer, producer), Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(MemcpyAsync(b, a, bytes, MemcpyKind::kDeviceToDevice, consumer),
            Error::kSuccess);
  ASSERT_EQ(StreamSynchronize(consumer), Error::kSuccess)
      << GetLastErrorMessage();
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(Memcpy(back.data(), b, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_TRUE(back == source);
  EXPECT_EQ(StreamDestroy(producer), Error::kSuccess);
  EXPECT_EQ(StreamDestroy(consumer), Error::kSuccess);
  EXPECT_EQ(Free(a), Error::kSuccess);
  EXPECT_EQ(Free(b), Error::kSuccess);
}

TEST_F(RuntimeApiTest, DestroyingAnAwaitedStreamKeepsWaitersWorking) {
  // `busy` has a long queue, then a wait for `awaited`. `awaited` is
  // destroyed and its slot handed to a new stream before `busy` reaches the
  // wait; the wait must not end up waiting on the new stream.
  const size_t bytes = 32u << 20;
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  StreamId busy = 0, awaited = 0;
  ASSERT_EQ(StreamCreate(&busy), Error::kSuccess);
  ASSERT_EQ(StreamCreate(&awaited), Error::kSuccess);
  for (int i = 0; i < 150; ++i) {
    ASSERT_EQ(MemcpyAsync(b, a, bytes, MemcpyKind::kDeviceToDevice, busy),
              Error::kSuccess);
  }
  ASSERT_EQ(MemsetAsync(a, 1, 4096, awaited), Error::kSuccess);
  ASSERT_EQ(StreamWaitStream(busy, awaited), Error::kSuccess);
  ASSERT_EQ(StreamDestroy(awaited), Error::kSuccess) << GetLastErrorMessage();
  StreamId reused = 0;
  ASSERT_EQ(StreamCreate(&reused), Error::kSuccess);
  EXPECT_EQ(reused, awaited);  // the slot came back
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  Error query = StreamQuery(busy);
  while (query == Error::kNotReady && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    query = StreamQuery(busy);
  }
  EXPECT_EQ(query, Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(StreamDestroy(busy), Error::kSuccess);
  EXPECT_EQ(StreamDestroy(reused), Error::kSuccess);
  EXPECT_EQ(Free(a), Error::kSuccess);
  EXPECT_EQ(Free(b), Error::kSuccess);
}

TEST_F(RuntimeApiTest, DeviceSynchronizeWaitsForAllStreams) {
  const size_t bytes = 6u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 7);
  StreamId streams[2] = {0, 0};
  void* buffers[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(StreamCreate(&streams[i]), Error::kSuccess);
    buffers[i] = MallocOrDie(bytes);
    ASSERT_EQ(MemcpyAsync(buffers[i], source.data(), bytes,
                          MemcpyKind::kHostToDevice, streams[i]),
              Error::kSuccess);
  }
  ASSERT_EQ(DeviceSynchronize(), Error::kSuccess) << GetLastErrorMessage();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(StreamQuery(streams[i]), Error::kSuccess);
    EXPECT_EQ(StreamDestroy(streams[i]), Error::kSuccess);
    EXPECT_EQ(Free(buffers[i]), Error::kSuccess);
  }
}

TEST_F(RuntimeApiTest, DeviceSynchronizeWaitsForAStreamInAReusedSlot) {
  // The session tracks live slots as bits: a destroyed slot's bit goes, and
  // the stream that reuses the slot must bring it back.
  StreamId destroyed = 0;
  ASSERT_EQ(StreamCreate(&destroyed), Error::kSuccess);
  ASSERT_EQ(StreamDestroy(destroyed), Error::kSuccess)
      << GetLastErrorMessage();
  StreamId reused = 0;
  ASSERT_EQ(StreamCreate(&reused), Error::kSuccess);
  ASSERT_EQ(reused, destroyed);  // the slot came back
  // Long enough that a synchronize which skipped the stream would return
  // before it ran: 20 fills of 32 MiB, the last one with 19.
  const size_t bytes = 32u << 20;
  void* buffer = MallocOrDie(bytes);
  for (int value = 0; value < 20; ++value) {
    ASSERT_EQ(MemsetAsync(buffer, value, bytes, reused), Error::kSuccess);
  }
  ASSERT_EQ(DeviceSynchronize(), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(StreamQuery(reused), Error::kSuccess);
  uint8_t last = 0;
  ASSERT_EQ(Memcpy(&last, static_cast<char*>(buffer) + bytes - 1, 1,
                   MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_EQ(last, 19);
  EXPECT_EQ(StreamDestroy(reused), Error::kSuccess);
  EXPECT_EQ(Free(buffer), Error::kSuccess);
}

// ---- Events -----------------------------------------------------------

TEST_F(RuntimeApiTest, EventRecordQuerySynchronizeElapsed) {
  EventId start = 0, end = 0;
  ASSERT_EQ(EventCreate(&start), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_EQ(EventCreate(&end), Error::kSuccess);
  EXPECT_EQ(EventQuery(start), Error::kSuccess);  // never recorded
  EXPECT_EQ(EventSynchronize(start), Error::kSuccess);
  float milliseconds = -1;
  EXPECT_EQ(EventElapsedTime(&milliseconds, start, end), Error::kInvalidValue);

  const size_t bytes = 8u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 8);
  void* pointer = MallocOrDie(bytes);
  ASSERT_EQ(EventRecord(start), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_EQ(
      MemcpyAsync(pointer, source.data(), bytes, MemcpyKind::kHostToDevice),
      Error::kSuccess);
  ASSERT_EQ(EventRecord(end), Error::kSuccess);
  const Error elapsed_early = EventElapsedTime(&milliseconds, start, end);
  EXPECT_TRUE(elapsed_early == Error::kSuccess ||
              elapsed_early == Error::kNotReady);
  ASSERT_EQ(EventSynchronize(end), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(EventQuery(end), Error::kSuccess);
  EXPECT_EQ(EventQuery(start), Error::kSuccess);
  ASSERT_EQ(EventElapsedTime(&milliseconds, start, end), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_GE(milliseconds, 0.0f);
  EXPECT_LT(milliseconds, 10000.0f);

  EventId untimed = 0;
  ASSERT_EQ(EventCreate(&untimed, kEventDisableTiming), Error::kSuccess);
  ASSERT_EQ(EventRecord(untimed), Error::kSuccess);
  ASSERT_EQ(EventSynchronize(untimed), Error::kSuccess);
  EXPECT_EQ(EventElapsedTime(&milliseconds, start, untimed),
            Error::kInvalidHandle);

  EXPECT_EQ(EventDestroy(start), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(EventDestroy(end), Error::kSuccess);
  EXPECT_EQ(EventDestroy(untimed), Error::kSuccess);
  EXPECT_EQ(EventQuery(start), Error::kInvalidHandle);
  EXPECT_EQ(EventRecord(start), Error::kInvalidHandle);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

TEST_F(RuntimeApiTest, StreamWaitEventOrdersWork) {
  const size_t bytes = 12u << 20;
  const std::vector<uint8_t> source = Pattern(bytes, 9);
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  StreamId producer = 0, consumer = 0;
  ASSERT_EQ(StreamCreate(&producer), Error::kSuccess);
  ASSERT_EQ(StreamCreate(&consumer), Error::kSuccess);
  EventId ready = 0;
  ASSERT_EQ(EventCreate(&ready, kEventDisableTiming), Error::kSuccess);
  ASSERT_EQ(
      MemcpyAsync(a, source.data(), bytes, MemcpyKind::kHostToDevice, producer),
      Error::kSuccess);
  ASSERT_EQ(EventRecord(ready, producer), Error::kSuccess);
  ASSERT_EQ(StreamWaitEvent(consumer, ready), Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(MemcpyAsync(b, a, bytes, MemcpyKind::kDeviceToDevice, consumer),
            Error::kSuccess);
  std::vector<uint8_t> back(bytes);
  ASSERT_EQ(
      MemcpyAsync(back.data(), b, bytes, MemcpyKind::kDeviceToHost, consumer),
      Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_TRUE(back == source);
  // Events and streams of different devices do not mix.
  ASSERT_EQ(EventRecord(ready, 1), Error::kInvalidHandle);
  EXPECT_EQ(EventDestroy(ready), Error::kSuccess);
  EXPECT_EQ(StreamDestroy(producer), Error::kSuccess);
  EXPECT_EQ(StreamDestroy(consumer), Error::kSuccess);
  EXPECT_EQ(Free(a), Error::kSuccess);
  EXPECT_EQ(Free(b), Error::kSuccess);
}

// ---- Ops --------------------------------------------------------------

proto::TensorRef FloatVector(void* pointer, int64_t length) {
  proto::TensorRef tensor;
  tensor.set_address(reinterpret_cast<uint64_t>(pointer));
  tensor.add_sizes(length);
  tensor.add_strides(1);
  tensor.set_dtype(kFloatDtype);
  tensor.set_device(0);
  return tensor;
}

proto::LaunchOp AddOp(void* a, void* b, int64_t length) {
  proto::LaunchOp op;
  op.set_name("aten::add");
  op.set_overload("Tensor");
  *op.add_arguments()->mutable_tensor() = FloatVector(a, length);
  *op.add_arguments()->mutable_tensor() = FloatVector(b, length);
  op.add_arguments()->mutable_scalar()->set_i(1);
  return op;
}

TEST_F(RuntimeApiTest, LaunchOpAsyncAndSync) {
  const std::vector<float> a_values = {1, 2, 3, 4};
  const std::vector<float> b_values = {10, 20, 30, 40};
  const size_t bytes = a_values.size() * sizeof(float);
  void* a = MallocOrDie(bytes);
  void* b = MallocOrDie(bytes);
  void* out = MallocOrDie(bytes);
  ASSERT_EQ(Memcpy(a, a_values.data(), bytes, MemcpyKind::kHostToDevice),
            Error::kSuccess);
  ASSERT_EQ(Memcpy(b, b_values.data(), bytes, MemcpyKind::kHostToDevice),
            Error::kSuccess);

  proto::LaunchOp op = AddOp(a, b, 4);
  *op.add_outputs() = FloatVector(out, 4);
  ASSERT_EQ(LaunchOp(op), Error::kSuccess) << GetLastErrorMessage();
  std::vector<float> result(4);
  ASSERT_EQ(Memcpy(result.data(), out, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(result, (std::vector<float>{11, 22, 33, 44}));

  proto::OpReply reply;
  ASSERT_EQ(LaunchOpSync(AddOp(a, out, 4), &reply), Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(reply.results_size(), 1);
  ASSERT_TRUE(reply.results(0).has_tensor());
  void* sum = reinterpret_cast<void*>(reply.results(0).tensor().address());
  ASSERT_EQ(Memcpy(result.data(), sum, bytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(result, (std::vector<float>{12, 24, 36, 48}));
  EXPECT_EQ(Free(sum), Error::kSuccess);

  proto::LaunchOp unknown;
  unknown.set_name("aten::no_such_op");
  EXPECT_NE(LaunchOpSync(unknown, &reply), Error::kSuccess);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("no_such_op"));
  // An asynchronous failure surfaces at the next synchronization.
  ASSERT_EQ(LaunchOp(unknown), Error::kSuccess);
  EXPECT_NE(StreamSynchronize(kDefaultStream), Error::kSuccess);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("failed on openreg:0"));
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kSuccess);

  for (void* pointer : {a, b, out}) EXPECT_EQ(Free(pointer), Error::kSuccess);
}

// ---- Processes and threads --------------------------------------------

TEST_F(RuntimeApiTest, ForkedChildCannotUseTheParentsSession) {
  ASSERT_EQ(Init(), Error::kSuccess);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The session's rings belong to the parent; writing into them from
    // here would corrupt the parent's streams.
    int count = 0;
    const bool refused =
        GetDeviceCount(&count) == Error::kInternal &&
        GetLastErrorMessage().find("forked") != std::string::npos &&
        !IsConnected() && Shutdown() == Error::kSuccess;
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The parent's session is untouched.
  int count = 0;
  EXPECT_EQ(GetDeviceCount(&count), Error::kSuccess);
  EXPECT_TRUE(IsConnected());
}

TEST_F(RuntimeApiTest, ConcurrentCopiesFromManyThreads) {
  constexpr int kThreads = 6;
  constexpr size_t kBytes = (6u << 20) + 17;
  absl::Mutex mutex;
  std::vector<std::string> failures;
  // What failed, with the runtime's message: a failure under load once
  // reported only a count (2026-12-07).
  auto fail = [&](int thread, absl::string_view what) {
    const std::string message = GetLastErrorMessage();
    absl::MutexLock lock(&mutex);
    failures.push_back(
        absl::StrCat("thread ", thread, ": ", what, ": ", message));
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &fail] {
      const std::vector<uint8_t> source = Pattern(kBytes, 100 + t);
      void* device = nullptr;
      StreamId stream = 0;
      if (Malloc(&device, kBytes) != Error::kSuccess) return fail(t, "Malloc");
      if (t % 2 == 0 && StreamCreate(&stream) != Error::kSuccess) {
        return fail(t, "StreamCreate");
      }
      const StreamId use = t % 2 == 0 ? stream : kDefaultStream;
      std::vector<uint8_t> back(kBytes);
      for (int round = 0; round < 3; ++round) {
        std::fill(back.begin(), back.end(), 0);
        if (MemcpyAsync(device, source.data(), kBytes,
                        MemcpyKind::kHostToDevice, use) != Error::kSuccess) {
          fail(t, absl::StrCat("round ", round, " host to device"));
        } else if (MemcpyAsync(back.data(), device, kBytes,
                               MemcpyKind::kDeviceToHost,
                               use) != Error::kSuccess) {
          fail(t, absl::StrCat("round ", round, " device to host"));
        } else if (back != source) {
          fail(t, absl::StrCat("round ", round, " read back other bytes"));
        }
      }
      if (t % 2 == 0 && StreamDestroy(stream) != Error::kSuccess) {
        fail(t, "StreamDestroy");
      }
      if (Free(device) != Error::kSuccess) fail(t, "Free");
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
}

}  // namespace
}  // namespace openreg
