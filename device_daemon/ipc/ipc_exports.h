// Device memory and events shared between sessions through IPC handles
// (data_plane/ipc_handle.h), like cudaIpcGetMemHandle / OpenMemHandle and
// cudaIpcGetEventHandle / OpenEventHandle.
//
// Lifetime, by construction: an export holds only a weak reference to the
// exporter's buffer; each open adds the buffer (a strong reference) to the
// importer's session table. So the memory lives until the exporter has
// freed it and every importer has closed it or ended, whichever is last;
// a crashed importer or exporter releases only its own references. A
// handle opens while its memory exists (held by the exporter or an earlier
// importer) and only for a session of the exporter's uid.
//
// An event export holds a weak reference to the exporter's session; it
// opens while the exporter's event lives. The opened event names the
// exporter's event (ipc_event_wait.h says how a wait resolves).
#ifndef OPENREG_DEVICE_DAEMON_IPC_IPC_EXPORTS_H_
#define OPENREG_DEVICE_DAEMON_IPC_IPC_EXPORTS_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/memory/device_buffer.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {

struct OpenedMemory {
  uint64_t address = 0;  // in the importer's session
  uint64_t size = 0;     // bytes from `address` to the allocation's end
  int device = 0;
};

struct OpenedEvent {
  uint32_t event_slot = 0;  // in the importer's session
  int device = 0;
};

struct ExportStats {
  uint64_t export_id = 0;
  pid_t exporter_pid = 0;
  int device = 0;
  uint64_t bytes = 0;  // the exported allocation
};

class IpcExports {
 public:
  // A random instance id: handles of another daemon never resolve here.
  IpcExports();

  // A memory handle for `address` (anywhere inside one of `exporter`'s
  // allocations; the handle carries the offset). Exporting the same
  // allocation again gives the same export.
  absl::StatusOr<std::string> ExportMemory(const Session& exporter,
                                           uint64_t address);

  // Opens `handle` in `importer`. INVALID_VALUE for a malformed handle,
  // INVALID_HANDLE for one this daemon never made, made by an earlier
  // daemon, forged (wrong secret) or whose memory was freed;
  // PERMISSION_DENIED for another uid.
  absl::StatusOr<OpenedMemory> OpenMemory(Session& importer,
                                          absl::string_view handle);

  // A handle for interprocess event `event_slot` of `exporter`. Exporting
  // the same event again gives the same export.
  absl::StatusOr<std::string> ExportEvent(
      const std::shared_ptr<const Session>& exporter, uint32_t event_slot);

  // Opens an event handle in `importer`: errors as OpenMemory, and
  // INVALID_HANDLE once the exporter destroyed the event or ended.
  absl::StatusOr<OpenedEvent> OpenEvent(Session& importer,
                                        absl::string_view handle);

  // Live memory exports (those whose memory still exists), for statistics.
  std::vector<ExportStats> Stats() const;

 private:
  struct Export {
    std::weak_ptr<DeviceBuffer> buffer;
    std::array<uint8_t, 16> secret{};
    uid_t uid = 0;
    uint64_t exporter_session = 0;
    pid_t exporter_pid = 0;
    uint64_t bytes = 0;
    int device = 0;
  };

  struct EventExport {
    std::weak_ptr<const Session> exporter;
    uint32_t event_slot = 0;
    uint64_t serial = 0;
    std::array<uint8_t, 16> secret{};
    uid_t uid = 0;
    int device = 0;
  };

  // Drops exports whose memory or event is gone.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Decodes `bytes` as a handle of `kind` made by this daemon.
  absl::StatusOr<IpcHandle> DecodeOwnHandle(absl::string_view bytes,
                                            IpcHandleKind kind) const;

  const uint64_t instance_;
  mutable absl::Mutex mutex_;
  uint64_t next_export_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, Export> exports_ ABSL_GUARDED_BY(mutex_);
  // Which export a live buffer already has.
  std::map<const DeviceBuffer*, uint64_t> by_buffer_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, EventExport> event_exports_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_IPC_IPC_EXPORTS_H_
