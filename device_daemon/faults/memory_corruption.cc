#include "device_daemon/faults/memory_corruption.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "data_plane/device_address.h"
#include "device_daemon/faults/corruption.h"
#include "device_daemon/memory/device_buffer.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

constexpr int kMemoryWordBytes = 8;

// Where CorruptWord changed memory: the word's byte offset and width.
struct CorruptedWord {
  uint64_t offset = 0;
  int width = 0;
};

// The step both raw-memory models share: corrupts the word of
// [data, data + size) holding byte `corruption.element()` (a random word
// when unset) and fills the record's element, bits and values. nullopt,
// with the reason in the record's message, when that byte lies beyond the
// range (`range` names it: "the 4096-byte copy").
std::optional<CorruptedWord> CorruptWord(char* data, uint64_t size,
                                         const proto::Corruption& corruption,
                                         std::mt19937_64& rng,
                                         absl::string_view range,
                                         proto::FaultRecord& record) {
  const uint64_t words = (size + kMemoryWordBytes - 1) / kMemoryWordBytes;
  const uint64_t word =
      corruption.has_element()
          ? static_cast<uint64_t>(corruption.element()) / kMemoryWordBytes
          : std::uniform_int_distribution<uint64_t>(0, words - 1)(rng);
  if (word >= words) {
    record.set_message(absl::StrCat("nothing to corrupt: byte ",
                                    corruption.element(), " is beyond ",
                                    range));
    return std::nullopt;
  }
  CorruptedWord corrupted;
  corrupted.offset = word * kMemoryWordBytes;
  corrupted.width = static_cast<int>(
      std::min<uint64_t>(kMemoryWordBytes, size - corrupted.offset));
  char* target = data + corrupted.offset;
  record.set_element(static_cast<int64_t>(corrupted.offset));
  record.set_value_before(FormatElement(target, corrupted.width, -1));
  for (uint32_t bit :
       CorruptElement(target, corrupted.width, corruption, rng)) {
    record.add_bits(bit);
  }
  record.set_value_after(FormatElement(target, corrupted.width, -1));
  return corrupted;
}

}  // namespace

void CorruptCopyDestination(const Firing& firing, const CommandFacts& facts,
                            Session& session, const proto::Command& command,
                            FaultLog& log) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewFaultRecord(firing, facts);
  record.set_dtype("bytes");
  // The destination: device memory, or the host side of a device-to-host
  // copy (staging or a pinned region; both are memory the client reads).
  absl::StatusOr<PinnedRange> device_range;
  PinnedHostRange host_range;
  char* data = nullptr;
  uint64_t size = 0;
  switch (command.body_case()) {
    case proto::Command::kH2D:
      size = command.h2d().size();
      device_range = session.PinRange(command.h2d().dst(), size);
      break;
    case proto::Command::kD2D:
      size = command.d2d().size();
      device_range = session.PinRange(command.d2d().dst(), size);
      break;
    case proto::Command::kMemset:
      size = command.memset().size();
      device_range = session.PinRange(command.memset().dst(), size);
      break;
    case proto::Command::kD2H: {
      const proto::CopyDeviceToHost& copy = command.d2h();
      size = copy.size();
      if (copy.has_host()) {
        absl::StatusOr<PinnedHostRange> host = session.PinHostRange(
            copy.host().region(), copy.host().offset(), size);
        if (host.ok()) {
          host_range = *std::move(host);
          data = host_range.data;
        }
      } else if (copy.staging_offset() <= session.limits().staging_bytes &&
                 size <=
                     session.limits().staging_bytes - copy.staging_offset()) {
        data = session.staging() + copy.staging_offset();
      }
      break;
    }
    default:
      break;
  }
  if (device_range.ok() && data == nullptr) data = device_range->data;
  if (data == nullptr || size == 0) {
    record.set_message("nothing to corrupt: the copy has no destination bytes");
    log.Append(std::move(record));
    return;
  }
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const std::optional<CorruptedWord> word =
      CorruptWord(data, size, fault.spec.corrupt_copy(), rng,
                  absl::StrCat("the ", size, "-byte copy"), record);
  if (word.has_value()) {
    record.set_message(
        absl::StrCat("corrupted the ", word->width, "-byte word at byte ",
                     word->offset, " of a ", size, "-byte ", record.command()));
  }
  log.Append(std::move(record));
}

void CorruptMemoryAtRest(const Firing& firing, const CommandFacts& facts,
                         Session& session, FaultLog& log) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewFaultRecord(firing, facts);
  record.set_dtype("bytes");
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  for (std::shared_ptr<DeviceBuffer>& buffer : session.Allocations()) {
    if (buffer->device() == facts.device && !buffer->lost() &&
        buffer->size() > 0) {
      buffers.push_back(std::move(buffer));
    }
  }
  if (buffers.empty()) {
    record.set_message(
        absl::StrCat("nothing to corrupt: the session holds no "
                     "memory on openreg:",
                     facts.device));
    log.Append(std::move(record));
    return;
  }
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const DeviceBuffer& buffer = *buffers[std::uniform_int_distribution<size_t>(
      0, buffers.size() - 1)(rng)];
  const std::optional<CorruptedWord> word =
      CorruptWord(buffer.data(), buffer.size(), fault.spec.corrupt_memory(),
                  rng, "the chosen allocation", record);
  if (word.has_value()) {
    record.set_message(absl::StrCat(
        "corrupted memory at rest: the ", word->width, "-byte word at ",
        absl::StrFormat("0x%x", buffer.address() + word->offset), " (byte ",
        word->offset, " of a ", buffer.size(), "-byte allocation)"));
  }
  log.Append(std::move(record));
}

void EnforceStuckRange(const Firing& firing, const CommandFacts& facts,
                       Devices& devices, FaultLog& log) {
  const proto::StuckAt& stuck = firing.fault->spec.stuck_at();
  const int device = DeviceOfAddress(stuck.address());
  if (!IsDeviceAddress(stuck.address()) || !devices.IsValid(device)) return;
  absl::StatusOr<char*> range =
      devices.arena(device).HostPointer(stuck.address(), stuck.bytes());
  if (!range.ok()) return;
  const int word_bytes =
      stuck.word_bytes() == 0 ? 4 : static_cast<int>(stuck.word_bytes());
  uint64_t changed = 0;
  int64_t first_changed = -1;
  for (uint64_t offset = 0; offset + word_bytes <= stuck.bytes();
       offset += word_bytes) {
    char* word = *range + offset;
    const char before = word[stuck.bit() / 8];
    ForceBit(word, word_bytes, stuck.bit(), stuck.value());
    if (word[stuck.bit() / 8] != before) {
      ++changed;
      if (first_changed < 0) first_changed = static_cast<int64_t>(offset);
    }
  }
  if (changed == 0) return;
  proto::FaultRecord record = NewFaultRecord(firing, facts);
  record.set_dtype("bytes");
  record.set_element(first_changed);
  record.add_bits(stuck.bit());
  record.set_message(absl::StrCat(
      "stuck bit ", stuck.bit(), " = ", stuck.value(), " changed ", changed,
      " word(s) in [", absl::StrFormat("0x%x", stuck.address()), ", +",
      stuck.bytes(), ") after ", record.command()));
  log.Append(std::move(record));
}

}  // namespace openreg::daemon
