// The device memory one session holds, by address: what it allocated, and
// what it opened from another session's IPC handle (marked imported;
// import_table.h counts the opens). Both kinds share one ordered map
// because a pointer a client sends may point into either, and every such
// pointer is checked here (PinRange) before the daemon touches the memory
// behind it.
//
// Contract: not thread-safe; the owning Session's one mutex guards this
// table together with the session's other tables. Errors name what is
// wrong with a pointer: not a device address, inside an allocation rather
// than at its start, already freed, another session's, or a range running
// past its allocation. Buffers leave the table as shared_ptrs so that the
// caller drops them (returning the memory to its arena) outside that lock.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_ALLOCATION_TABLE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_ALLOCATION_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/memory/device_buffer.h"

namespace openreg::daemon {

// Device memory a command may use, kept alive (pinned) for as long as this
// object exists even if the allocation is freed meanwhile.
struct PinnedRange {
  std::shared_ptr<DeviceBuffer> buffer;  // null for an empty range
  char* data = nullptr;                  // first byte of the range
};

class AllocationTable {
 public:
  struct Entry {
    std::shared_ptr<DeviceBuffer> buffer;
    // Opened from another session's IPC handle: not this session's to
    // free.
    bool imported = false;
  };

  // `devices` tells another session's allocation from a wild pointer.
  explicit AllocationTable(const Devices* devices) : devices_(devices) {}

  // Adds memory this session allocated; returns its address.
  uint64_t Add(std::shared_ptr<DeviceBuffer> buffer);
  // Removes the allocation at `address` (Session::Free) and returns its
  // buffer. Errors say whether the pointer is unknown, interior, already
  // freed, owned by another session or opened from an IPC handle.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Remove(uint64_t address);
  // The range [address, address + bytes), pinned, when it lies inside one
  // entry (allocated or imported). An empty range is always valid.
  absl::StatusOr<PinnedRange> PinRange(uint64_t address, uint64_t bytes) const;
  // Bytes this session allocated (imported memory not counted).
  uint64_t allocated_bytes() const { return allocated_bytes_; }
  // The same, by device (devices without an allocation are absent).
  const std::map<int, uint64_t>& allocated_bytes_by_device() const {
    return allocated_bytes_by_device_;
  }
  // Every entry's buffer, allocated or imported.
  std::vector<std::shared_ptr<DeviceBuffer>> Buffers() const;

  // The entry containing `address`, or null.
  const Entry* FindContaining(uint64_t address) const;
  // Why `address` is not the start of an allocation of this session.
  absl::Status DescribeBadPointer(uint64_t address) const;

  // ---- Imported entries (import_table.h) ----------------------------
  // The entry starting at `base`, or null.
  const Entry* FindStartingAt(uint64_t base) const;
  // Adds `buffer`, opened from an IPC handle, at its address.
  void AddImported(std::shared_ptr<DeviceBuffer> buffer);
  // Removes the imported entry at `base` and returns its buffer.
  std::shared_ptr<DeviceBuffer> RemoveImported(uint64_t base);

 private:
  void RememberFreed(uint64_t address);

  const Devices* devices_;
  std::map<uint64_t, Entry> entries_;  // by address
  uint64_t allocated_bytes_ = 0;
  std::map<int, uint64_t> allocated_bytes_by_device_;
  // Recently freed addresses, to tell a double free from a wild pointer.
  std::set<uint64_t> recently_freed_;
  std::deque<uint64_t> recently_freed_order_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_ALLOCATION_TABLE_H_
