#include "runtime_client/event_table.h"

namespace openreg::client {

EventTable::EventTable(uint32_t max_events) : events_(max_events) {}

void EventTable::Add(uint32_t slot, const EventInfo& info) {
  absl::MutexLock lock(&mutex_);
  if (slot >= events_.size()) return;
  events_[slot] = info;
}

void EventTable::Remove(uint32_t slot) {
  absl::MutexLock lock(&mutex_);
  if (slot < events_.size()) events_[slot].reset();
}

std::optional<EventInfo> EventTable::Find(uint32_t slot) const {
  absl::MutexLock lock(&mutex_);
  if (slot >= events_.size()) return std::nullopt;
  return events_[slot];
}

void EventTable::SetRecorded(uint32_t slot, const StreamPosition& position) {
  absl::MutexLock lock(&mutex_);
  if (slot >= events_.size() || !events_[slot].has_value()) return;
  events_[slot]->recorded = position;
  events_[slot]->recorded_work_done = false;
  events_[slot]->captured = {};
}

void EventTable::SetCaptured(uint32_t slot, const CapturePosition& position) {
  absl::MutexLock lock(&mutex_);
  if (slot >= events_.size() || !events_[slot].has_value()) return;
  events_[slot]->recorded = {};
  events_[slot]->recorded_work_done = false;
  events_[slot]->captured = position;
}

std::vector<uint32_t> EventTable::ForgetStream(uint32_t stream_slot) {
  absl::MutexLock lock(&mutex_);
  std::vector<uint32_t> interprocess;
  for (uint32_t slot = 0; slot < events_.size(); ++slot) {
    std::optional<EventInfo>& event = events_[slot];
    if (event.has_value() && event->recorded.sequence != 0 &&
        event->recorded.slot == stream_slot) {
      event->recorded_work_done = true;
      if (event->interprocess) interprocess.push_back(slot);
    }
  }
  return interprocess;
}

}  // namespace openreg::client
