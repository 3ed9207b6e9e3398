#include "device_daemon/sessions/stream_taints.h"

#include "absl/status/status.h"
#include "data_plane/error_codes.h"
#include "device_daemon/base/errors.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kCommunicator = 7;

absl::Status CollectiveFailure() {
  return MakeError(proto::COLLECTIVE_FAILURE, "rank 1 (pid 42) ended");
}

TEST(StreamTaintsTest, AWaitPastAFailedCollectiveInheritsItsError) {
  StreamTaints taints;
  taints.Taint(/*slot=*/3, /*sequence=*/10, kCommunicator, CollectiveFailure());
  const absl::Status waited = taints.Check(3, 12);
  EXPECT_EQ(ErrorCodeOf(waited), proto::COLLECTIVE_FAILURE);
  EXPECT_NE(waited.message().find("past command 10"), absl::string_view::npos);
  EXPECT_NE(waited.message().find("rank 1 (pid 42) ended"),
            absl::string_view::npos);
  EXPECT_FALSE(taints.Check(3, 10).ok());
}

TEST(StreamTaintsTest, WorkBeforeTheFailureAndOtherStreamsAreUntouched) {
  StreamTaints taints;
  taints.Taint(3, 10, kCommunicator, CollectiveFailure());
  EXPECT_TRUE(taints.Check(3, 9).ok());
  EXPECT_TRUE(taints.Check(4, 100).ok());
}

TEST(StreamTaintsTest, TheFirstFailureOfAStreamIsKept) {
  StreamTaints taints;
  taints.Taint(3, 10, kCommunicator, CollectiveFailure());
  taints.Taint(3, 20, kCommunicator,
               MakeError(proto::COLLECTIVE_FAILURE, "a later one"));
  EXPECT_FALSE(taints.Check(3, 15).ok());
}

TEST(StreamTaintsTest, LeavingTheCommunicatorOrReusingTheSlotClearsIt) {
  StreamTaints taints;
  taints.Taint(3, 10, kCommunicator, CollectiveFailure());
  taints.Taint(4, 10, kCommunicator + 1, CollectiveFailure());
  taints.Clear(kCommunicator);
  EXPECT_TRUE(taints.Check(3, 50).ok());
  EXPECT_FALSE(taints.Check(4, 50).ok());
  taints.ClearSlot(4);
  EXPECT_TRUE(taints.Check(4, 50).ok());
}

}  // namespace
}  // namespace openreg::daemon
