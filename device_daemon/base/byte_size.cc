#include "device_daemon/base/byte_size.h"

#include <iterator>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace openreg::daemon {
namespace {

struct Unit {
  const char* name;
  uint64_t multiplier;
};

constexpr Unit kUnits[] = {
    {"", 1},           {"B", 1},
    {"K", 1ull << 10}, {"KiB", 1ull << 10},
    {"M", 1ull << 20}, {"MiB", 1ull << 20},
    {"G", 1ull << 30}, {"GiB", 1ull << 30},
    {"T", 1ull << 40}, {"TiB", 1ull << 40},
};

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid byte size '", text, "': ", why));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view input = absl::StripAsciiWhitespace(text);
  size_t position = 0;
  absl::uint128 whole = 0;
  int whole_digits = 0;
  while (position < input.size() && absl::ascii_isdigit(input[position])) {
    whole = whole * 10 + (input[position] - '0');
    if (whole > absl::uint128(UINT64_MAX)) return Invalid(text, "too large");
    ++position;
    ++whole_digits;
  }
  // Fractional digits: kept as numerator / denominator, at most 18 digits so
  // that the denominator fits in 64 bits.
  absl::uint128 fraction = 0;
  absl::uint128 denominator = 1;
  int fraction_digits = 0;
  if (position < input.size() && input[position] == '.') {
    ++position;
    while (position < input.size() && absl::ascii_isdigit(input[position])) {
      if (fraction_digits < 18) {
        fraction = fraction * 10 + (input[position] - '0');
        denominator *= 10;
      }
      ++position;
      ++fraction_digits;
    }
    if (fraction_digits == 0) return Invalid(text, "no digits after '.'");
  }
  if (whole_digits == 0) return Invalid(text, "expected a number");

  absl::string_view unit_text =
      absl::StripLeadingAsciiWhitespace(input.substr(position));
  const Unit* unit = nullptr;
  for (const Unit& candidate : kUnits) {
    if (absl::EqualsIgnoreCase(unit_text, candidate.name)) {
      unit = &candidate;
      break;
    }
  }
  if (unit == nullptr) {
    return Invalid(text, absl::StrCat("unknown unit '", unit_text,
                                      "' (use B, K, M, G, T or KiB, MiB, "
                                      "GiB, TiB; all are powers of 1024)"));
  }
  const absl::uint128 bytes =
      whole * unit->multiplier + fraction * unit->multiplier / denominator;
  if (bytes > absl::uint128(UINT64_MAX)) return Invalid(text, "too large");
  return absl::Uint128Low64(bytes);
}

std::string FormatByteSize(uint64_t bytes) {
  static constexpr const char* kNames[] = {"KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int index = 0;
  while (value >= 1024 && index + 1 < static_cast<int>(std::size(kNames))) {
    value /= 1024;
    ++index;
  }
  return absl::StrFormat("%.2f %s", value, kNames[index]);
}

}  // namespace openreg::daemon
