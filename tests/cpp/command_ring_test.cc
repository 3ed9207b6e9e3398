// The shared-memory command ring (data_plane/command_ring.h), including a
// reader facing a producer that broke the ring's invariants.
#include "data_plane/command_ring.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace openreg {
namespace {

class CommandRingTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kCapacity = 1024;

  CommandRingTest()
      : control_(new RingControl()),  // value-initialized: all zero
        buffer_(kCapacity, '\0'),
        writer_(control_.get(), buffer_.data(), kCapacity),
        reader_(control_.get(), buffer_.data(), kCapacity) {}

  std::string Read() {
    std::string payload;
    absl::Status status = reader_.TryRead(&payload);
    EXPECT_TRUE(status.ok()) << status;
    return payload;
  }

  std::unique_ptr<RingControl> control_;
  std::vector<char> buffer_;
  RingWriter writer_;
  RingReader reader_;
};

TEST_F(CommandRingTest, RoundTripsRecordsInOrder) {
  ASSERT_TRUE(writer_.TryWrite("alpha", 5).ok());
  ASSERT_TRUE(writer_.TryWrite("", 0).ok());
  ASSERT_TRUE(writer_.TryWrite("gamma!!!", 8).ok());
  EXPECT_EQ(Read(), "alpha");
  EXPECT_EQ(Read(), "");
  EXPECT_EQ(Read(), "gamma!!!");
  std::string payload;
  EXPECT_TRUE(absl::IsUnavailable(reader_.TryRead(&payload)));
  EXPECT_EQ(control_->head.Load(), control_->tail.Load());
  EXPECT_EQ(writer_.FreeBytes(), kCapacity);
}

TEST_F(CommandRingTest, WrapsAroundWithPadding) {
  // 200-byte payloads take 208 bytes: four fit before the end (832), the
  // fifth needs a padding record over the last 192 bytes.
  const std::string payload(200, 'x');
  for (int round = 0; round < 20; ++round) {
    std::string tagged = payload;
    tagged[0] = static_cast<char>('a' + round % 26);
    ASSERT_TRUE(writer_.TryWrite(tagged.data(), tagged.size()).ok()) << round;
    EXPECT_EQ(Read(), tagged) << round;
  }
  // Positions only grow; the ring went round several times.
  EXPECT_GT(control_->head.Load(), 3 * kCapacity);
  EXPECT_EQ(control_->head.Load() % 8, 0u);
}

TEST_F(CommandRingTest, FullRingReportsResourceExhaustedThenRecovers) {
  const std::string payload(120, 'p');  // 128 bytes per record
  int written = 0;
  absl::Status status;
  while ((status = writer_.TryWrite(payload.data(), payload.size())).ok()) {
    ++written;
  }
  EXPECT_EQ(written, 8);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_EQ(writer_.FreeBytes(), 0u);
  EXPECT_EQ(Read(), payload);
  EXPECT_TRUE(writer_.TryWrite(payload.data(), payload.size()).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Read(), payload);
}

TEST_F(CommandRingTest, WriterKeepsCountingRoomAfterTheRingRestartsAtZero) {
  // The writer remembers the last head it read; a reused stream slot's ring
  // starts again at 0 under the same writer (the daemon resets it).
  const std::string payload(120, 'r');  // 128 bytes per record
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(writer_.TryWrite(payload.data(), payload.size()).ok()) << i;
    EXPECT_EQ(Read(), payload) << i;
  }
  control_->tail.value.store(0);
  control_->head.value.store(0);
  int written = 0;
  absl::Status status;
  while ((status = writer_.TryWrite(payload.data(), payload.size())).ok()) {
    ++written;
  }
  EXPECT_EQ(written, 8);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_EQ(control_->tail.Load(), kCapacity);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Read(), payload) << i;
}

TEST_F(CommandRingTest, AFullRingsWriterGoesOnOnceAQuarterIsFree) {
  // Records of 128 bytes: the ring holds 8, and a quarter is 2 of them.
  const std::string payload(120, 'w');
  while (writer_.TryWrite(payload.data(), payload.size()).ok()) {
  }
  std::atomic<bool> written{false};
  std::thread producer([&] {
    EXPECT_TRUE(
        writer_.Write(payload.data(), payload.size(), absl::Seconds(5)).ok());
    written.store(true);
  });
  // The writer found the ring full and sleeps for room.
  while (control_->head.sleepers.load() == 0) std::this_thread::yield();
  std::string out;
  EXPECT_TRUE(reader_.TryRead(&out).ok());
  // One record of room is not enough: the writer would be woken (and the
  // reader pay a futex wake) once per record.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(written.load());
  EXPECT_TRUE(reader_.TryRead(&out).ok());
  producer.join();
  EXPECT_TRUE(written.load());
  // The second record's room is still free; then the ring is full again.
  EXPECT_TRUE(
      writer_.Write(payload.data(), payload.size(), absl::Milliseconds(20))
          .ok());
  EXPECT_TRUE(absl::IsResourceExhausted(
      writer_.Write(payload.data(), payload.size(), absl::Milliseconds(20))));
}

TEST_F(CommandRingTest, ARecordLargerThanAQuarterWaitsForItsOwnRoom) {
  const std::string small(120, 's');
  while (writer_.TryWrite(small.data(), small.size()).ok()) {
  }
  const std::string large(writer_.MaxPayload(), 'l');  // half the ring
  std::thread consumer([this] {
    std::string out;
    for (int i = 0; i < 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_TRUE(reader_.TryRead(&out).ok());
    }
  });
  EXPECT_TRUE(writer_.Write(large.data(), large.size(), absl::Seconds(5)).ok());
  consumer.join();
  EXPECT_EQ(Read(), large);
}

TEST_F(CommandRingTest, RejectsOversizedPayloads) {
  EXPECT_EQ(writer_.MaxPayload(), kCapacity / 2 - kRecordHeaderBytes);
  const std::string too_big(writer_.MaxPayload() + 1, 'b');
  absl::Status status = writer_.TryWrite(too_big.data(), too_big.size());
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(control_->tail.Load(), 0u);  // nothing written
  const std::string largest(writer_.MaxPayload(), 'l');
  EXPECT_TRUE(writer_.TryWrite(largest.data(), largest.size()).ok());
  EXPECT_EQ(Read(), largest);
}

TEST_F(CommandRingTest, TailBehindHeadIsDataLoss) {
  ASSERT_TRUE(writer_.TryWrite("abc", 3).ok());
  Read();
  control_->tail.value.store(0);  // producer moved tail backwards
  std::string payload;
  EXPECT_TRUE(absl::IsDataLoss(reader_.TryRead(&payload)));
}

TEST_F(CommandRingTest, TailTooFarAheadIsDataLoss) {
  control_->tail.value.store(kCapacity + 8);
  std::string payload;
  EXPECT_TRUE(absl::IsDataLoss(reader_.TryRead(&payload)));
}

TEST_F(CommandRingTest, MisalignedTailIsDataLoss) {
  ASSERT_TRUE(writer_.TryWrite("abc", 3).ok());
  control_->tail.value.store(control_->tail.Load() + 3);
  std::string payload;
  EXPECT_TRUE(absl::IsDataLoss(reader_.TryRead(&payload)));
}

TEST_F(CommandRingTest, RecordLengthPastTailIsDataLoss) {
  ASSERT_TRUE(writer_.TryWrite("abcdefgh", 8).ok());
  uint32_t huge_length = 4000;  // claims far more than was published
  std::memcpy(buffer_.data(), &huge_length, sizeof(huge_length));
  std::string payload;
  absl::Status status = reader_.TryRead(&payload);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_TRUE(payload.empty());
}

TEST_F(CommandRingTest, RecordOverrunningTheBufferEndIsDataLoss) {
  // Move both positions near the end, then publish a record whose length
  // would run past the buffer's end instead of wrapping via padding.
  control_->head.value.store(kCapacity - 16);
  control_->tail.value.store(kCapacity - 16);
  const uint32_t header[2] = {64, kRecordData};
  std::memcpy(buffer_.data() + kCapacity - 16, header, sizeof(header));
  control_->tail.value.store(kCapacity - 16 + 72);
  std::string payload;
  EXPECT_TRUE(absl::IsDataLoss(reader_.TryRead(&payload)));
}

TEST_F(CommandRingTest, UnknownRecordKindIsDataLoss) {
  ASSERT_TRUE(writer_.TryWrite("abc", 3).ok());
  const uint32_t bad_kind = 77;
  std::memcpy(buffer_.data() + 4, &bad_kind, sizeof(bad_kind));
  std::string payload;
  EXPECT_TRUE(absl::IsDataLoss(reader_.TryRead(&payload)));
}

TEST_F(CommandRingTest, ConcurrentProducerAndConsumerKeepOrder) {
  constexpr int kRecords = 20000;
  std::thread producer([this] {
    for (int i = 0; i < kRecords; ++i) {
      const std::string payload = std::to_string(i) + std::string(i % 97, '.');
      ASSERT_TRUE(
          writer_.Write(payload.data(), payload.size(), absl::Seconds(10))
              .ok());
    }
  });
  for (int i = 0; i < kRecords; ++i) {
    std::string payload;
    absl::Status status;
    while (absl::IsUnavailable(status = reader_.TryRead(&payload))) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(payload, std::to_string(i) + std::string(i % 97, '.'));
  }
  producer.join();
}

}  // namespace
}  // namespace openreg
