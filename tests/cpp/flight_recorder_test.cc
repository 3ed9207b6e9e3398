#include "device_daemon/collectives/flight_recorder.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

proto::FlightRecorderIdentity Identity(int global_rank, uint32_t entries) {
  proto::FlightRecorderIdentity identity;
  identity.set_group_name("0");
  identity.set_group_desc("default_pg");
  identity.add_group_ranks(0);
  identity.add_group_ranks(1);
  identity.set_global_rank(global_rank);
  identity.set_entries(entries);
  return identity;
}

FlightRecorder::Op AllReduce(uint64_t number) {
  FlightRecorder::Op op;
  op.name = "all_reduce";
  op.number = number;
  op.input_numel = op.output_numel = 4;
  op.dtype = "Float";
  return op;
}

TEST(FlightRecorderTest, AnUndescribedRankRecordsNothing) {
  FlightRecorder recorder(2);
  EXPECT_FALSE(recorder.Started(0, AllReduce(0)).has_value());
  EXPECT_TRUE(recorder.Snapshot().empty());
}

TEST(FlightRecorderTest, ARankKeepsItsLastEntriesWithTheirStates) {
  FlightRecorder recorder(2);
  recorder.Describe(1, Identity(1, 2));
  for (uint64_t number = 0; number < 3; ++number) {
    const std::optional<uint64_t> id = recorder.Started(1, AllReduce(number));
    ASSERT_TRUE(id.has_value());
    if (number == 1) recorder.Finished(1, *id, absl::OkStatus());
    if (number == 2) {
      recorder.Finished(1, *id, absl::DeadlineExceededError("rank 0 late"));
    }
  }
  const auto records = recorder.Snapshot();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].rank, 1);
  EXPECT_EQ(records[0].identity.global_rank(), 1);
  EXPECT_EQ(records[0].dropped, 1u);
  ASSERT_EQ(records[0].entries.size(), 2u);
  const FlightRecorder::Entry& done = records[0].entries[0];
  EXPECT_EQ(done.record_id, 1u);
  EXPECT_EQ(done.collective_seq_id, 2u);
  EXPECT_NE(done.finished_ns, 0);
  EXPECT_FALSE(done.failed);
  const FlightRecorder::Entry& failed = records[0].entries[1];
  EXPECT_TRUE(failed.failed);
  EXPECT_EQ(failed.error, "rank 0 late");
}

TEST(FlightRecorderTest, TransfersCountApartFromCollectives) {
  FlightRecorder recorder(2);
  recorder.Describe(0, Identity(0, 10));
  recorder.Started(0, AllReduce(0));
  FlightRecorder::Op send;
  send.name = "send";
  send.point_to_point = true;
  send.peer = 1;
  recorder.Started(0, send);
  recorder.Started(0, send);
  const auto entries = recorder.Snapshot()[0].entries;
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[1].collective_seq_id, 0u);
  EXPECT_EQ(entries[1].p2p_seq_id, 1u);
  EXPECT_EQ(entries[2].p2p_seq_id, 2u);
  EXPECT_EQ(entries[2].op_id, 3u);
}

TEST(FlightRecorderTest, ZeroEntriesKeepsNothing) {
  FlightRecorder recorder(1);
  recorder.Describe(0, Identity(0, 0));
  EXPECT_FALSE(recorder.Started(0, AllReduce(0)).has_value());
  EXPECT_TRUE(recorder.Snapshot()[0].entries.empty());
}

}  // namespace
}  // namespace openreg::daemon
