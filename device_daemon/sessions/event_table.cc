#include "device_daemon/sessions/event_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

absl::Status EventTable::CheckFlags(bool enable_timing, bool interprocess) {
  if (interprocess && enable_timing) {
    return InvalidValueError(
        "an interprocess event cannot record timestamps: create it with "
        "timing disabled (as cudaEventInterprocess requires "
        "cudaEventDisableTiming)");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> EventTable::Add(Entry entry) {
  for (uint32_t slot = 0; slot < max_events_; ++slot) {
    if (events_.count(slot) != 0) continue;
    entry.serial = next_serial_++;
    events_[slot] = std::move(entry);
    EventSlot* shared = &slots_[slot];
    shared->stream_slot = 0;
    shared->recorded_sequence.store(0, std::memory_order_relaxed);
    shared->timestamp_ns.store(0, std::memory_order_relaxed);
    shared->enqueued_position.store(0, std::memory_order_relaxed);
    shared->in_use.store(1, std::memory_order_release);
    return slot;
  }
  return MakeError(
      proto::RESOURCE_EXHAUSTED,
      absl::StrCat("all ", max_events_, " event slots are in use"));
}

absl::StatusOr<std::shared_ptr<const IpcEventSource>> EventTable::Remove(
    uint32_t slot) {
  auto entry = events_.find(slot);
  if (entry == events_.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  std::shared_ptr<const IpcEventSource> source =
      std::move(entry->second.imported);
  events_.erase(entry);
  slots_[slot].in_use.store(0, std::memory_order_release);
  return source;
}

// ---- Interprocess events -------------------------------------------------

absl::StatusOr<ExportableEvent> EventTable::ExportableAt(uint32_t slot) const {
  auto entry = events_.find(slot);
  if (entry == events_.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  if (entry->second.imported != nullptr) {
    return InvalidValueError(absl::StrCat(
        "event ", slot,
        " was opened from an IPC handle; only the process that created an "
        "event can export it"));
  }
  if (!entry->second.interprocess) {
    return InvalidValueError(absl::StrCat(
        "event ", slot,
        " was not created as an interprocess event; create it with "
        "kEventInterprocess (torch.openreg.Event(interprocess=True))"));
  }
  return ExportableEvent{entry->second.serial, entry->second.device};
}

bool EventTable::Holds(uint32_t slot, uint64_t serial) const {
  // Before Close() only live events count, after it only the kept serials
  // (the other map is empty then).
  auto kept = serials_at_close_.find(slot);
  if (kept != serials_at_close_.end()) return kept->second == serial;
  auto entry = events_.find(slot);
  return entry != events_.end() && entry->second.serial == serial;
}

absl::StatusOr<IpcEventSource> EventTable::ImportedSource(uint32_t slot) const {
  auto entry = events_.find(slot);
  if (entry == events_.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  if (entry->second.imported == nullptr) {
    return InvalidValueError(
        absl::StrCat("event ", slot, " was not opened from an IPC handle"));
  }
  return *entry->second.imported;
}

std::map<uint32_t, EventTable::Entry> EventTable::Close() {
  for (const auto& [slot, entry] : events_) {
    serials_at_close_[slot] = entry.serial;
  }
  std::map<uint32_t, Entry> released;
  std::swap(released, events_);
  return released;
}

}  // namespace openreg::daemon
