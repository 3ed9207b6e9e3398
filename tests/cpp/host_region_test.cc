// Pinned host regions in the daemon: registration checks (fd, seals, size)
// and copy commands naming (region, offset), including bogus ones, through
// the real stream workers and executor.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "device_daemon/base/errors.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/sessions/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kRegionBytes = 1 << 16;

SessionLimits TestLimits() {
  SessionLimits limits;
  limits.max_streams = 4;
  limits.max_events = 4;
  limits.ring_bytes = 64 * 1024;
  limits.reply_bytes = 4 * 1024;
  limits.staging_bytes = 1 << 20;
  return limits;
}

// A memfd as the runtime client makes one; `seal` false leaves it
// shrinkable.
int MakeMemfd(uint64_t size, bool seal = true) {
  const int fd =
      memfd_create("host-region-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  if (seal) EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  return fd;
}

proto::Command PinnedH2D(uint32_t region, uint64_t offset, uint64_t dst,
                         uint64_t size) {
  proto::Command command;
  command.mutable_h2d()->mutable_host()->set_region(region);
  command.mutable_h2d()->mutable_host()->set_offset(offset);
  command.mutable_h2d()->set_dst(dst);
  command.mutable_h2d()->set_size(size);
  return command;
}

proto::Command PinnedD2H(uint64_t src, uint32_t region, uint64_t offset,
                         uint64_t size) {
  proto::Command command;
  command.mutable_d2h()->mutable_host()->set_region(region);
  command.mutable_d2h()->mutable_host()->set_offset(offset);
  command.mutable_d2h()->set_src(src);
  command.mutable_d2h()->set_size(size);
  return command;
}

class HostRegionTest : public ::testing::Test {
 protected:
  HostRegionTest() {
    devices_ = *Devices::Create(1, 16 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &op_runner_);
    session_ =
        MakeTestSession(3, devices_.get(), executor_.get(), TestLimits());
    stream_ = std::make_unique<StreamDriver>(
        session_->stream_slot(0), session_->ring_buffer(0),
        session_->limits().ring_bytes, devices_->doorbell(0),
        session_->ring_fd(0));
  }

  ~HostRegionTest() override {
    session_->Close();
    for (int fd : fds_) close(fd);
  }

  // A registered, mapped region; `*mapping` is this process's view.
  uint32_t Register(char** mapping) {
    const int fd = MakeMemfd(kRegionBytes);
    fds_.push_back(fd);
    void* data =
        mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(data, MAP_FAILED);
    *mapping = static_cast<char*>(data);
    absl::StatusOr<uint32_t> region =
        session_->RegisterHostRegion(fd, kRegionBytes);
    EXPECT_TRUE(region.ok()) << region.status();
    return *region;
  }

  std::unique_ptr<Devices> devices_;
  AtenOpRunner op_runner_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<StreamDriver> stream_;
  std::vector<int> fds_;
};

TEST_F(HostRegionTest, CopiesDirectlyBothWays) {
  char* host = nullptr;
  const uint32_t region = Register(&host);
  EXPECT_NE(region, 0u);
  std::iota(host, host + 4096, 0);
  const uint64_t device = *session_->Allocate(0, 4096);
  EXPECT_EQ(stream_->Run(PinnedH2D(region, 0, device, 4096)), std::nullopt);
  EXPECT_EQ(stream_->Run(PinnedD2H(device, region, 8192, 4096)), std::nullopt);
  EXPECT_EQ(std::memcmp(host, host + 8192, 4096), 0);
  munmap(host, kRegionBytes);
}

TEST_F(HostRegionTest, BogusRegionCommandsAreErrorsNotCrashes) {
  char* host = nullptr;
  const uint32_t region = Register(&host);
  const uint64_t device = *session_->Allocate(0, 4096);

  std::optional<StreamErrorRecord> error =
      stream_->Run(PinnedH2D(region + 100, 0, device, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
  EXPECT_THAT(error->message, HasSubstr("is not registered"));

  error = stream_->Run(PinnedD2H(device, 0, 0, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);

  error = stream_->Run(PinnedH2D(region, kRegionBytes - 8, device, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);
  EXPECT_THAT(error->message, HasSubstr("outside host region"));

  // Offsets that overflow when added to the size.
  error = stream_->Run(PinnedD2H(device, region, ~uint64_t{0}, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_VALUE);

  // A valid region with a bad device side.
  error = stream_->Run(PinnedD2H(device + 4096, region, 0, 16));
  ASSERT_TRUE(error.has_value());

  // After unregistering, the id is unknown.
  ASSERT_TRUE(session_->UnregisterHostRegion(region).ok());
  error = stream_->Run(PinnedH2D(region, 0, device, 16));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::INVALID_HANDLE);
  EXPECT_FALSE(session_->UnregisterHostRegion(region).ok());

  // The stream still runs valid work.
  char* other = nullptr;
  const uint32_t second = Register(&other);
  EXPECT_EQ(stream_->Run(PinnedH2D(second, 0, device, 16)), std::nullopt);
  munmap(host, kRegionBytes);
  munmap(other, kRegionBytes);
}

TEST_F(HostRegionTest, RegistrationChecksTheMemfd) {
  const int unsealed = MakeMemfd(kRegionBytes, /*seal=*/false);
  fds_.push_back(unsealed);
  absl::StatusOr<uint32_t> region =
      session_->RegisterHostRegion(unsealed, kRegionBytes);
  ASSERT_FALSE(region.ok());
  EXPECT_THAT(region.status().message(), HasSubstr("F_SEAL_SHRINK"));

  const int sealed = MakeMemfd(kRegionBytes);
  fds_.push_back(sealed);
  region = session_->RegisterHostRegion(sealed, kRegionBytes * 2);
  ASSERT_FALSE(region.ok());
  EXPECT_THAT(region.status().message(), HasSubstr("announced"));
  region = session_->RegisterHostRegion(sealed, 0);
  ASSERT_FALSE(region.ok());

  region = session_->RegisterHostRegion(-1, kRegionBytes);
  ASSERT_FALSE(region.ok());
  region = session_->RegisterHostRegion(100000, kRegionBytes);
  ASSERT_FALSE(region.ok());
  EXPECT_THAT(region.status().message(), HasSubstr("cannot open"));

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  fds_.push_back(pipe_fds[0]);
  fds_.push_back(pipe_fds[1]);
  region = session_->RegisterHostRegion(pipe_fds[0], kRegionBytes);
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(session_->host_region_count(), 0u);
}

TEST_F(HostRegionTest, CloseReleasesRegions) {
  char* host = nullptr;
  Register(&host);
  EXPECT_EQ(session_->host_region_count(), 1u);
  session_->Close();
  EXPECT_EQ(session_->host_region_count(), 0u);
  EXPECT_FALSE(session_->UnregisterHostRegion(1).ok());
  munmap(host, kRegionBytes);
}

}  // namespace
}  // namespace openreg::daemon
