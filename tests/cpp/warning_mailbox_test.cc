// The per-stream warning mailbox (data_plane/warning_mailbox.h).
#include "data_plane/warning_mailbox.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace openreg {
namespace {

std::unique_ptr<WarningMailbox> EmptyMailbox() {
  auto mailbox = std::make_unique<WarningMailbox>();
  mailbox->state.store(WarningMailbox::kEmpty);
  mailbox->dropped.store(0);
  mailbox->bytes = 0;
  return mailbox;
}

TEST(WarningMailboxTest, PostedRecordsAreTakenOnceInOrder) {
  auto mailbox = EmptyMailbox();
  ASSERT_TRUE(PostToMailbox(*mailbox, "first"));
  ASSERT_TRUE(PostToMailbox(*mailbox, std::string("with\0zero", 9)));
  uint32_t dropped = 7;
  EXPECT_EQ(TakeFromMailbox(*mailbox, &dropped),
            (std::vector<std::string>{"first", std::string("with\0zero", 9)}));
  EXPECT_EQ(dropped, 0u);
  EXPECT_TRUE(TakeFromMailbox(*mailbox, &dropped).empty());
  ASSERT_TRUE(PostToMailbox(*mailbox, "after"));
  EXPECT_EQ(TakeFromMailbox(*mailbox, &dropped),
            (std::vector<std::string>{"after"}));
}

TEST(WarningMailboxTest, WhatDoesNotFitIsCountedAsDropped) {
  auto mailbox = EmptyMailbox();
  const std::string big(1000, 'x');
  int posted = 0;
  while (PostToMailbox(*mailbox, big)) ++posted;
  EXPECT_EQ(posted, 4);  // 4 * (4 + 1000) <= 4096 < 5 * 1004
  EXPECT_FALSE(PostToMailbox(*mailbox, big));
  uint32_t dropped = 0;
  EXPECT_EQ(TakeFromMailbox(*mailbox, &dropped).size(), 4u);
  EXPECT_EQ(dropped, 2u);
  EXPECT_TRUE(PostToMailbox(*mailbox, big));  // room again
}

TEST(WarningMailboxTest, HostileSharedStateNeverMakesPostWriteOutside) {
  auto mailbox = EmptyMailbox();
  // A client may scribble anything over the segment.
  mailbox->state.store(WarningMailbox::kReady);
  mailbox->bytes = 0xFFFFFFF0u;
  EXPECT_FALSE(PostToMailbox(*mailbox, "record"));
  mailbox->state.store(12345);
  EXPECT_FALSE(PostToMailbox(*mailbox, "record"));
  mailbox->state.store(WarningMailbox::kReading);
  EXPECT_FALSE(PostToMailbox(*mailbox, "record"));
  EXPECT_EQ(mailbox->dropped.load(), 3u);
}

TEST(WarningMailboxTest, TakeIgnoresTruncatedRecords) {
  auto mailbox = EmptyMailbox();
  ASSERT_TRUE(PostToMailbox(*mailbox, "whole"));
  mailbox->bytes += 3;  // a partial length field after the record
  uint32_t dropped = 0;
  EXPECT_EQ(TakeFromMailbox(*mailbox, &dropped),
            (std::vector<std::string>{"whole"}));
}

TEST(WarningMailboxTest, ConcurrentPostAndTakeLoseNothingUncounted) {
  auto mailbox = EmptyMailbox();
  constexpr int kRecords = 20000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kRecords; ++i) PostToMailbox(*mailbox, "w");
    done.store(true);
  });
  uint64_t taken = 0, dropped_total = 0;
  while (true) {
    const bool finished = done.load();
    uint32_t dropped = 0;
    for (const std::string& record : TakeFromMailbox(*mailbox, &dropped)) {
      EXPECT_EQ(record, "w");
      ++taken;
    }
    dropped_total += dropped;
    if (finished) break;
  }
  writer.join();
  uint32_t dropped = 0;
  taken += TakeFromMailbox(*mailbox, &dropped).size();
  dropped_total += dropped;
  EXPECT_EQ(taken + dropped_total, static_cast<uint64_t>(kRecords));
}

}  // namespace
}  // namespace openreg
