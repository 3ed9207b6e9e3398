// Human-friendly byte sizes for flags and log lines: "2GiB", "512M",
// "1.5G", "4096".
#ifndef OPENREG_DEVICE_DAEMON_BASE_BYTE_SIZE_H_
#define OPENREG_DEVICE_DAEMON_BASE_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace openreg::daemon {

// Parses a number of bytes with an optional binary unit: B, K/KiB, M/MiB,
// G/GiB, T/TiB (case-insensitive, all powers of 1024). A fractional number
// ("1.5GiB") is rounded down to whole bytes. Decimal units (KB, MB, ...) are
// rejected rather than guessed at.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// "2.00 GiB", "512.00 MiB", "100 B": for messages, not for parsing back.
std::string FormatByteSize(uint64_t bytes);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_BYTE_SIZE_H_
