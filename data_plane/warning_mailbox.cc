#include "data_plane/warning_mailbox.h"

#include <algorithm>
#include <cstring>

namespace openreg {

bool PostToMailbox(WarningMailbox& mailbox, std::string_view record) {
  uint32_t state = WarningMailbox::kEmpty;
  if (!mailbox.state.compare_exchange_strong(state, WarningMailbox::kWriting,
                                             std::memory_order_acquire)) {
    if (state != WarningMailbox::kReady ||
        !mailbox.state.compare_exchange_strong(state, WarningMailbox::kWriting,
                                               std::memory_order_acquire)) {
      mailbox.dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } else {
    mailbox.bytes = 0;
  }
  const uint32_t used = mailbox.bytes;
  const uint64_t needed = sizeof(uint32_t) + record.size();
  const bool fits = used <= WarningMailbox::kCapacity &&
                    needed <= WarningMailbox::kCapacity - used;
  if (fits) {
    const auto length = static_cast<uint32_t>(record.size());
    std::memcpy(mailbox.data + used, &length, sizeof(length));
    std::memcpy(mailbox.data + used + sizeof(length), record.data(),
                record.size());
    mailbox.bytes = used + static_cast<uint32_t>(needed);
  } else {
    mailbox.dropped.fetch_add(1, std::memory_order_relaxed);
  }
  mailbox.state.store(
      mailbox.bytes == 0 ? WarningMailbox::kEmpty : WarningMailbox::kReady,
      std::memory_order_release);
  return fits;
}

std::vector<std::string> TakeFromMailbox(WarningMailbox& mailbox,
                                         uint32_t* dropped) {
  std::vector<std::string> records;
  uint32_t state = WarningMailbox::kReady;
  if (mailbox.state.compare_exchange_strong(state, WarningMailbox::kReading,
                                            std::memory_order_acquire)) {
    const uint32_t used = std::min(mailbox.bytes, WarningMailbox::kCapacity);
    uint32_t offset = 0;
    while (used - offset >= sizeof(uint32_t)) {
      uint32_t length = 0;
      std::memcpy(&length, mailbox.data + offset, sizeof(length));
      offset += sizeof(length);
      if (length > used - offset) break;
      records.emplace_back(mailbox.data + offset, length);
      offset += length;
    }
    mailbox.bytes = 0;
    mailbox.state.store(WarningMailbox::kEmpty, std::memory_order_release);
  }
  *dropped = mailbox.dropped.exchange(0, std::memory_order_relaxed);
  return records;
}

}  // namespace openreg
