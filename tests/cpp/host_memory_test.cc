// The runtime's pinned host memory API (HostAlloc, HostFree, HostGetRegion)
// and copies with a pinned host side, against a real openreg-daemon.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openreg/runtime.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

class HostMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new SuiteDaemon;
    absl::Status started =
        daemon_->Start({"--devices=1", "--memory_per_device=64MiB"});
    ASSERT_TRUE(started.ok()) << started;
  }

  static void TearDownTestSuite() {
    EXPECT_EQ(Shutdown(), Error::kSuccess) << GetLastErrorMessage();
    delete daemon_;  // stops it by pid
  }

  void SetUp() override {
    ASSERT_TRUE(daemon_->running());
    GetLastError();
  }

  static SuiteDaemon* daemon_;
};

SuiteDaemon* HostMemoryTest::daemon_ = nullptr;

TEST_F(HostMemoryTest, AllocGetRegionFree) {
  void* host = nullptr;
  ASSERT_EQ(HostAlloc(&host, 10000), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_NE(host, nullptr);
  EXPECT_TRUE(IsHostAllocated(host));
  HostRegionInfo info;
  ASSERT_EQ(HostGetRegion(static_cast<char*>(host) + 123, &info),
            Error::kSuccess);
  EXPECT_EQ(info.base, host);
  EXPECT_EQ(info.size, 10000u);
  EXPECT_NE(info.region, 0u);
  EXPECT_EQ(info.offset, 123u);
  // Writable host memory.
  std::memset(host, 7, 10000);

  std::vector<char> pageable(16);
  EXPECT_FALSE(IsHostAllocated(pageable.data()));
  EXPECT_EQ(HostGetRegion(pageable.data(), &info), Error::kInvalidValue);

  ASSERT_EQ(HostFree(host), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_FALSE(IsHostAllocated(host));
  EXPECT_EQ(HostFree(host), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("not a pointer returned by"));
  EXPECT_EQ(HostFree(pageable.data()), Error::kInvalidValue);
  EXPECT_EQ(HostFree(nullptr), Error::kSuccess);

  void* empty = reinterpret_cast<void*>(1);
  EXPECT_EQ(HostAlloc(&empty, 0), Error::kSuccess);
  EXPECT_EQ(empty, nullptr);
  EXPECT_EQ(HostAlloc(nullptr, 16), Error::kInvalidValue);
}

TEST_F(HostMemoryTest, PinnedCopiesRoundTrip) {
  constexpr size_t kCount = (9 << 20) / sizeof(int32_t);  // > staging chunks
  constexpr size_t kBytes = kCount * sizeof(int32_t);
  void* source = nullptr;
  void* destination = nullptr;
  ASSERT_EQ(HostAlloc(&source, kBytes), Error::kSuccess);
  ASSERT_EQ(HostAlloc(&destination, kBytes), Error::kSuccess);
  int32_t* in = static_cast<int32_t*>(source);
  int32_t* out = static_cast<int32_t*>(destination);
  std::iota(in, in + kCount, 1);
  void* device = nullptr;
  ASSERT_EQ(Malloc(&device, kBytes), Error::kSuccess);

  // Synchronous copies.
  ASSERT_EQ(Memcpy(device, source, kBytes, MemcpyKind::kHostToDevice),
            Error::kSuccess)
      << GetLastErrorMessage();
  ASSERT_EQ(Memcpy(destination, device, kBytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(std::memcmp(in, out, kBytes), 0);

  // Asynchronous copies at offsets inside the regions, then one sync.
  std::memset(out, 0, kBytes);
  StreamId stream = 0;
  ASSERT_EQ(StreamCreate(&stream), Error::kSuccess);
  ASSERT_EQ(MemcpyAsync(device, in + 5, 1000 * sizeof(int32_t),
                        MemcpyKind::kHostToDevice, stream),
            Error::kSuccess);
  ASSERT_EQ(MemcpyAsync(out + 7, device, 1000 * sizeof(int32_t),
                        MemcpyKind::kDeviceToHost, stream),
            Error::kSuccess);
  ASSERT_EQ(StreamSynchronize(stream), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(std::memcmp(out + 7, in + 5, 1000 * sizeof(int32_t)), 0);
  EXPECT_EQ(out[6], 0);
  EXPECT_EQ(out[1007], 0);

  // A range running past the pinned allocation is staged instead, and
  // still correct.
  std::vector<int32_t> tail(kCount);
  ASSERT_EQ(Memcpy(tail.data(), device, kBytes, MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_EQ(tail[0], 6);

  EXPECT_EQ(StreamDestroy(stream), Error::kSuccess);
  EXPECT_EQ(Free(device), Error::kSuccess);
  EXPECT_EQ(HostFree(source), Error::kSuccess);
  EXPECT_EQ(HostFree(destination), Error::kSuccess);
}

TEST_F(HostMemoryTest, RegionsOfAnEndedSessionAreStagedLikePageable) {
  void* host = nullptr;
  ASSERT_EQ(HostAlloc(&host, 4096), Error::kSuccess);
  std::memset(host, 3, 4096);
  ASSERT_EQ(Shutdown(), Error::kSuccess);
  // Still host memory; copies with the new session are staged.
  EXPECT_TRUE(IsHostAllocated(host));
  HostRegionInfo info;
  EXPECT_EQ(HostGetRegion(host, &info), Error::kInvalidValue);
  void* device = nullptr;
  ASSERT_EQ(Malloc(&device, 4096), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_EQ(Memcpy(device, host, 4096, MemcpyKind::kHostToDevice),
            Error::kSuccess);
  std::vector<char> back(4096);
  ASSERT_EQ(Memcpy(back.data(), device, 4096, MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_EQ(back[4095], 3);
  EXPECT_EQ(HostFree(host), Error::kSuccess);
  EXPECT_EQ(Free(device), Error::kSuccess);
}

}  // namespace
}  // namespace openreg
