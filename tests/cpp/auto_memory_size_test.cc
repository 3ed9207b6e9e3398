#include "device_daemon/server/auto_memory_size.h"

#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

TEST(AutoMemorySizeTest, AllDevicesTogetherGetHalfTheHost) {
  EXPECT_EQ(AutoMemoryPerDevice(2, 24 * kGiB), 6 * kGiB);
  EXPECT_EQ(AutoMemoryPerDevice(4, 64 * kGiB), 8 * kGiB);
}

TEST(AutoMemorySizeTest, ADeviceIsAtLeastTwoGiB) {
  EXPECT_EQ(AutoMemoryPerDevice(8, 16 * kGiB), 2 * kGiB);
  EXPECT_EQ(AutoMemoryPerDevice(2, 0), 2 * kGiB);  // host size unknown
}

TEST(AutoMemorySizeTest, ADeviceIsAtMostSixteenGiB) {
  EXPECT_EQ(AutoMemoryPerDevice(1, 1024 * kGiB), 16 * kGiB);
}

TEST(AutoMemorySizeTest, SizesAreWhole256MiB) {
  // 23.3 GiB of host, 3 devices: 3.88 GiB each, rounded down.
  const uint64_t size = AutoMemoryPerDevice(3, 25'000'000'000ull);
  EXPECT_EQ(size % (256ull << 20), 0u);
  EXPECT_LE(size * 3, 25'000'000'000ull / 2);
  EXPECT_GT(size * 3 + 3 * (256ull << 20), 25'000'000'000ull / 2);
}

TEST(AutoMemorySizeTest, TheHostsMemoryIsKnown) {
  EXPECT_GT(HostPhysicalMemory(), 0u);
}

}  // namespace
}  // namespace openreg::daemon
