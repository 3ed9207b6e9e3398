// The IPC side of one session's memory: which of its allocations it may
// export, and the memory it opened from other sessions' handles
// (ipc/ipc_exports.h). An opened buffer is an entry of the session's
// AllocationTable, marked imported, so that the session's pointer checks
// see it like its own memory; this table counts the opens that keep it
// there and the bytes they hold. It owns no map of buffers itself: one
// address belongs to one entry, in one map, whichever way it came.
//
// Contract: not thread-safe; the owning Session's one mutex guards this
// table and the AllocationTable passed to it, which must be the same
// session's. An opened buffer stays in the allocation table until every
// open of it is closed; each call that removes it returns it for the
// caller to drop outside that lock.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_IMPORT_TABLE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_IMPORT_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/memory/device_buffer.h"
#include "device_daemon/sessions/allocation_table.h"

namespace openreg::daemon {

class ImportTable {
 public:
  // The allocation in `allocations` containing `address`, for export: its
  // buffer and the offset of `address` in it. Memory opened from a handle
  // cannot be exported again.
  static absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>>
  ExportableRange(const AllocationTable& allocations, uint64_t address);

  // Grants the session `buffer` (opened from a handle) and returns the
  // device address of `offset` in it. Opening the same range again returns
  // the same address and counts one more open.
  absl::StatusOr<uint64_t> Open(AllocationTable& allocations,
                                std::shared_ptr<DeviceBuffer> buffer,
                                uint64_t offset);
  // Undoes one Open of `address`. Returns the buffer when that was its
  // last open (it left `allocations`), null while other opens remain.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Close(
      AllocationTable& allocations, uint64_t address);
  // Bytes of the buffers opened and not yet closed.
  uint64_t imported_bytes() const { return imported_bytes_; }
  // Opens not yet closed of imported addresses in [begin, end).
  uint64_t CountOpens(uint64_t begin, uint64_t end) const;

 private:
  // Address handed out -> (base of its buffer, opens not yet closed).
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> opens_by_address_;
  // Base of an opened buffer -> opens of it not yet closed (all addresses).
  std::map<uint64_t, uint32_t> opens_by_buffer_;
  uint64_t imported_bytes_ = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_IMPORT_TABLE_H_
