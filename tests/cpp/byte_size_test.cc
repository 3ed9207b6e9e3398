#include "device_daemon/base/byte_size.h"

#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

TEST(ParseByteSizeTest, PlainBytes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize(" 17 "), 17u);
  EXPECT_EQ(*ParseByteSize("512B"), 512u);
}

TEST(ParseByteSizeTest, BinaryUnits) {
  EXPECT_EQ(*ParseByteSize("1K"), 1024u);
  EXPECT_EQ(*ParseByteSize("1KiB"), 1024u);
  EXPECT_EQ(*ParseByteSize("3M"), 3u << 20);
  EXPECT_EQ(*ParseByteSize("3MiB"), 3u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("2 GiB"), 2ull << 30);
}

TEST(ParseByteSizeTest, UnitsAreCaseInsensitive) {
  EXPECT_EQ(*ParseByteSize("2gib"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("5k"), 5u * 1024);
  EXPECT_EQ(*ParseByteSize("1mib"), 1u << 20);
}

TEST(ParseByteSizeTest, FractionsRoundDown) {
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("0.5K"), 512u);
  EXPECT_EQ(*ParseByteSize("1.0001K"), 1024u);
  EXPECT_EQ(*ParseByteSize("2.5"), 2u);
}

TEST(ParseByteSizeTest, RejectsGarbage) {
  for (const char* text : {"", "GiB", "-1", "1.", ".5G", "2GB", "2 MB", "1e9",
                           "12Q", "0x100", "1..2", "2 G i B"}) {
    absl::StatusOr<uint64_t> parsed = ParseByteSize(text);
    EXPECT_FALSE(parsed.ok()) << "'" << text << "' parsed as " << *parsed;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(ParseByteSizeTest, ErrorNamesTheUnit) {
  absl::StatusOr<uint64_t> parsed = ParseByteSize("2GB");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("'GB'"), absl::string_view::npos)
      << parsed.status();
}

TEST(ParseByteSizeTest, RejectsOverflow) {
  EXPECT_EQ(*ParseByteSize("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseByteSize("18446744073709551616").ok());
  EXPECT_FALSE(ParseByteSize("16777216TiB").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999999").ok());
}

TEST(FormatByteSizeTest, PicksReadableUnits) {
  EXPECT_EQ(FormatByteSize(0), "0 B");
  EXPECT_EQ(FormatByteSize(1023), "1023 B");
  EXPECT_EQ(FormatByteSize(1024), "1.00 KiB");
  EXPECT_EQ(FormatByteSize(1536), "1.50 KiB");
  EXPECT_EQ(FormatByteSize(2ull << 30), "2.00 GiB");
  EXPECT_EQ(FormatByteSize(3ull << 40), "3.00 TiB");
}

}  // namespace
}  // namespace openreg::daemon
