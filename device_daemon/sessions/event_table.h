// The events one session created or opened from another session's IPC
// handle, by event slot, together with those slots' shared words in the
// session segment (EventSlot). Each event gets a serial, unique within the
// session, that tells an event apart from a later one reusing its slot:
// an IPC handle names (slot, serial).
//
// Contract: not thread-safe; the owning Session's one mutex guards it. Add
// resets a slot's shared words and marks it in use; Remove marks it free.
// After Close() the table holds no event but still answers Holds() for
// the events that lived then, so that an importer can tell "the exporter
// ended" from "the event was destroyed". Imported events hold their
// exporter's Session: the caller drops them outside the lock.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_EVENT_TABLE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_EVENT_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data_plane/session_layout.h"

namespace openreg::daemon {

class Session;

// An event opened from another session's IPC handle names the exporter's
// event. The exporter's Session object is kept (not its memory: a closed
// session has released that) so that its stream counters stay readable
// after it ends; the reference is dropped when the importer destroys the
// event or closes.
struct IpcEventSource {
  std::shared_ptr<const Session> exporter;
  uint32_t event_slot = 0;
  uint64_t serial = 0;  // which event of that slot (slots are reused)
};

struct ExportableEvent {
  uint64_t serial = 0;
  int device = 0;
};

class EventTable {
 public:
  struct Entry {
    int device = 0;
    bool enable_timing = false;
    bool interprocess = false;
    uint64_t serial = 0;
    std::shared_ptr<const IpcEventSource> imported;  // null if local
  };

  // `slots` are the segment's `max_events` event slots.
  EventTable(EventSlot* slots, uint32_t max_events)
      : slots_(slots), max_events_(max_events) {}

  // An `interprocess` event cannot time, as in CUDA.
  static absl::Status CheckFlags(bool enable_timing, bool interprocess);

  // Puts `entry` in a free event slot (assigning its serial).
  absl::StatusOr<uint32_t> Add(Entry entry);
  // Frees event `slot`; returns what it named if it was opened from a
  // handle (null otherwise).
  absl::StatusOr<std::shared_ptr<const IpcEventSource>> Remove(uint32_t slot);
  bool IsLive(uint32_t slot) const { return events_.count(slot) != 0; }

  // ---- Interprocess events (ipc_exports.h, ipc_event_wait.h) ----------
  // Interprocess event `slot`, for export.
  absl::StatusOr<ExportableEvent> ExportableAt(uint32_t slot) const;
  // True while event `serial` lives in `slot`, and after Close() for the
  // events that lived at the time.
  bool Holds(uint32_t slot, uint64_t serial) const;
  // What event `slot`, opened from a handle, names.
  absl::StatusOr<IpcEventSource> ImportedSource(uint32_t slot) const;

  // Empties the table, keeping each live event's serial for Holds(), and
  // returns the events for the caller to drop.
  std::map<uint32_t, Entry> Close();

 private:
  EventSlot* slots_;
  uint32_t max_events_;
  std::map<uint32_t, Entry> events_;  // by slot
  uint64_t next_serial_ = 1;
  // The serial of every event live at Close() (Holds after close).
  std::map<uint32_t, uint64_t> serials_at_close_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_EVENT_TABLE_H_
