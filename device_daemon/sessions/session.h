// One attached client: its identity, its shared-memory segment
// (session_segment.h), its streams (run by the StreamEngine,
// stream_engine.h) and its lifetime, composed of the tables of everything
// else it created: allocation_table.h, import_table.h, host_region_table.h
// and event_table.h. Ending the session — detach, client exit or crash —
// frees all of it and nothing else.
//
// One mutex, the session's, guards its open/closed state and all its
// tables, so that each request sees the session whole: Close() empties
// every table at once, no request adds to a table after it, and a pointer
// check, an export or a free sees allocations and imports together.
//
// Every pointer a client sends is checked (ValidateRange / ValidateTensor)
// against the allocations this session holds before the daemon touches the
// memory behind it. The segment is writable by the client, so the daemon
// never trusts the SessionHeader in it (session_segment.h).
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/session_layout.h"
#include "data_plane/shared_memory.h"
#include "data_plane/tensor_extent.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/devices/session_ring.h"
#include "device_daemon/memory/device_buffer.h"
#include "device_daemon/sessions/activity_trace.h"
#include "device_daemon/sessions/allocation_table.h"
#include "device_daemon/sessions/event_table.h"
#include "device_daemon/sessions/host_region_table.h"
#include "device_daemon/sessions/import_table.h"
#include "device_daemon/sessions/module_table.h"
#include "device_daemon/sessions/session_segment.h"
#include "device_daemon/sessions/stream_engine.h"
#include "device_daemon/sessions/stream_taints.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

struct SessionIdentity {
  uint64_t id = 0;
  uint64_t token = 0;  // secret: proves a control request comes from the client
  PeerCredentials peer{};
  std::string client_name;
};

// What one session holds on one device.
struct SessionDeviceUsage {
  uint64_t allocated_bytes = 0;
  uint32_t streams = 0;
};

struct SessionStatsSnapshot {
  uint64_t id = 0;
  pid_t pid = 0;
  uint64_t allocated_bytes = 0;
  uint64_t imported_bytes = 0;
  uint32_t modules = 0;
  uint32_t streams = 0;
  uint64_t commands_executed = 0;
  // By device, for the devices where the session has memory or streams.
  std::map<int, SessionDeviceUsage> devices;
};

class Session {
 public:
  // Creates the segment, writes its header and starts the default streams
  // (slot i = device i). With a null `engine` no streams run (for
  // tests of the tables).
  static absl::StatusOr<std::unique_ptr<Session>> Create(
      SessionIdentity identity, Devices* devices, StreamEngine* engine,
      const SessionLimits& limits = SessionLimits());

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  uint64_t id() const { return identity_.id; }
  uint64_t token() const { return identity_.token; }
  pid_t pid() const { return identity_.peer.pid; }
  uid_t uid() const { return identity_.peer.uid; }
  const std::string& client_name() const { return identity_.client_name; }
  const SharedMemory& segment() const { return segment_.memory(); }
  // The fd the client writes to ring for its parked streams of `device`
  // (doorbell.h); ring_fds() holds every device's, device 0 first.
  int ring_fd(int device) const { return ring_.fd(device); }
  const std::vector<int>& ring_fds() const { return ring_.fds(); }
  Devices& devices() const { return *devices_; }

  // The daemon's trusted copy of the segment layout.
  const SessionHeader& layout() const { return segment_.layout(); }
  const SessionLimits& limits() const { return segment_.layout().limits; }
  StreamSlot* stream_slot(uint32_t slot) const {
    return segment_.stream_slot(slot);
  }
  EventSlot* event_slot(uint32_t slot) const {
    return segment_.event_slot(slot);
  }
  char* ring_buffer(uint32_t slot) const { return segment_.ring_buffer(slot); }
  char* reply_area(uint32_t slot) const { return segment_.reply_area(slot); }
  char* staging() const { return segment_.staging(); }

  // A request that can fail checks first the arguments that need no
  // table, then that the session is open (INVALID_HANDLE once closed, the
  // sticky error once there is one), then asks the table that owns it.

  // ---- Memory (allocation_table.h) -------------------------------------
  // Allocates on `device` after the StreamEngine admits it.
  absl::StatusOr<uint64_t> Allocate(int device, uint64_t size);
  // Removes an allocation from the table; the memory returns to the device
  // once no command in flight still uses it. Errors say whether the pointer
  // is unknown, interior, already freed or owned by another session.
  absl::Status Free(uint64_t address);
  // OK when [address, address + bytes) lies inside one allocation of this
  // session. An empty range is always valid.
  absl::Status ValidateRange(uint64_t address, uint64_t bytes) const;
  absl::StatusOr<PinnedRange> PinRange(uint64_t address, uint64_t bytes) const;
  // Checks a tensor's dtype, sizes, strides and device, then the bytes it
  // spans (see tensor_extent.h).
  absl::StatusOr<TensorExtent> ValidateTensor(
      const proto::TensorRef& tensor) const;
  // ValidateTensor + PinRange of its span. `extent` may be null.
  absl::StatusOr<PinnedRange> PinTensor(const proto::TensorRef& tensor,
                                        TensorExtent* extent = nullptr) const;
  // Changes whenever memory leaves this session's tables (a free, an
  // import closed, the session closed): a reference checked against them
  // still holds while it has not changed (a graph's decoded launches,
  // kernels/decoded_launch.h).
  uint64_t memory_generation() const {
    return memory_generation_.load(std::memory_order_acquire);
  }
  uint64_t allocated_bytes() const;

  // ---- IPC memory (import_table.h, ipc_exports.h) -----------------------
  // The allocation of this session containing `address`, for export: its
  // buffer and the offset of `address` in it. Memory this session opened
  // from a handle cannot be exported again.
  absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>>
  ExportableRange(uint64_t address) const;
  // Grants this session `buffer` (opened from a handle) and returns the
  // device address of `offset` in it. Opening the same range again returns
  // the same address and counts one more open.
  absl::StatusOr<uint64_t> OpenImported(std::shared_ptr<DeviceBuffer> buffer,
                                        uint64_t offset);
  // Undoes one OpenImported of `address`; the memory stays granted until
  // every open of the buffer is closed.
  absl::Status CloseImported(uint64_t address);
  uint64_t imported_bytes() const;
  // Opens not yet closed of imported addresses in [begin, end).
  uint64_t CountOpenImports(uint64_t begin, uint64_t end) const;
  // The session's live allocations, imported ones included (for faults in
  // memory at rest). Also after Close() (then empty).
  std::vector<std::shared_ptr<DeviceBuffer>> Allocations() const;

  // ---- Pinned host regions (host_region_table.h) ---------------------
  // Maps the client's memfd `client_fd` (see host_region.h); returns the
  // region id (never 0) copy commands use.
  absl::StatusOr<uint32_t> RegisterHostRegion(int client_fd, uint64_t size);
  // Forgets the region; commands already holding it finish first.
  absl::Status UnregisterHostRegion(uint32_t region);
  // OK when [offset, offset + bytes) lies inside registered `region`. An
  // empty range is always valid.
  absl::StatusOr<PinnedHostRange> PinHostRange(uint32_t region, uint64_t offset,
                                               uint64_t bytes) const;
  size_t host_region_count() const;

  // ---- Compiled modules (module_table.h, loaded_module.h) ---------------
  // Loads the client's shared library `client_fd` (see loaded_module.h for
  // what is checked); returns the module id (never 0) launches name.
  absl::StatusOr<uint64_t> LoadModule(int client_fd, const std::string& name);
  // Forgets the module; launches already holding it finish first.
  absl::Status UnloadModule(uint64_t module);
  // The loaded module `module`, held for one launch.
  absl::StatusOr<std::shared_ptr<LoadedModule>> FindModule(
      uint64_t module) const;
  size_t module_count() const;

  // ---- Streams (run by the StreamEngine, stream_engine.h) -------------
  // Takes a free slot >= device_count, resets it and has the engine start
  // running it.
  absl::StatusOr<uint32_t> CreateStream(int device, int priority);
  // Runs the commands already in the stream's ring, then frees the slot.
  // Default streams cannot be destroyed.
  absl::Status DestroyStream(uint32_t slot);
  // True while `slot` is a created stream the engine still runs (false
  // once destroyed, faulted or the session closed).
  bool IsStreamAlive(uint32_t slot) const;
  // How many times stream slot `slot` has been (re)started: a captured
  // position on it is stale once this changes.
  uint64_t StreamGeneration(uint32_t slot) const;

  // Streams a failed collective tainted (stream_taints.h), also published
  // in the stream's shared slot so that the client sends such waits.
  void TaintStream(uint32_t slot, uint64_t sequence, uint64_t communicator,
                   const absl::Status& why);
  // The session left `communicator`: its failures taint nothing any more.
  void ClearTaints(uint64_t communicator);
  const StreamTaints& taints() const { return taints_; }

  // ---- Events (event_table.h) ------------------------------------------
  // An `interprocess` event may be exported (ExportableEventAt); it cannot
  // time, as in CUDA.
  absl::StatusOr<uint32_t> CreateEvent(int device, bool enable_timing,
                                       bool interprocess = false);
  absl::Status DestroyEvent(uint32_t slot);
  bool IsEventLive(uint32_t slot) const;

  // ---- Interprocess events (ipc_exports.h, ipc_event_wait.h) ------------
  // Interprocess event `slot` of this session, for export.
  absl::StatusOr<ExportableEvent> ExportableEventAt(uint32_t slot) const;
  // True while event `serial` lives in `slot`, and after Close() for the
  // events that lived at the time.
  bool HoldsEvent(uint32_t slot, uint64_t serial) const;
  // Adds an event that names `source` (opened from a handle); returns its
  // slot in this session.
  absl::StatusOr<uint32_t> OpenImportedEvent(IpcEventSource source, int device);
  // What event `slot`, opened from a handle, names.
  absl::StatusOr<IpcEventSource> ImportedEventSource(uint32_t slot) const;

  // ---- Sticky errors ----------------------------------------------------
  // Makes `error` the session's sticky error (the first one wins): every
  // later command and request fails with it, and the client sees it in the
  // segment header and fails every later call at the call.
  void MakeSticky(const absl::Status& error);
  // OK, or the sticky error. One atomic load when there is none.
  absl::Status StickyError() const;

  // ---- Lifetime --------------------------------------------------------
  // Stops every stream (waiting for the command each one runs), then
  // frees all memory, host regions, imports, streams and events. Idempotent;
  // later requests fail with INVALID_HANDLE. The segment stays mapped until
  // destruction.
  void Close();
  bool closed() const;
  // True once Close() has stopped every stream: the completion counters
  // are final.
  bool streams_stopped() const {
    return streams_stopped_.load(std::memory_order_acquire);
  }

  // torch.profiler's record of this session's device activity.
  ActivityTrace& activity_trace() { return activity_trace_; }

  void CountCommand() {
    commands_executed_.fetch_add(1, std::memory_order_relaxed);
  }
  SessionStatsSnapshot Stats() const;

 private:
  struct StreamEntry {
    int device = 0;
    int priority = 0;
    std::shared_ptr<RunningStream> worker;  // null without an engine
    bool destroying = false;
  };

  Session(SessionIdentity identity, Devices* devices, StreamEngine* engine,
          SessionSegment segment, SessionRing ring);

  absl::Status CheckOpen() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // kInvalidDevice unless `device` is one of the daemon's devices.
  absl::Status CheckDevice(int device) const;
  // Resets a stream slot's shared words and marks it active for `device`,
  // then has the engine start running it.
  void ActivateStream(uint32_t slot, int device, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Forgets stream `slot` and marks its shared slot free.
  void FreeStreamSlotLocked(uint32_t slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Frees the slots of destroyed streams whose last work has finished.
  void ReapDestroyedStreamsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const SessionIdentity identity_;
  Devices* const devices_;
  StreamEngine* const engine_;
  const SessionSegment segment_;
  const SessionRing ring_;
  std::atomic<uint64_t> commands_executed_{0};
  ActivityTrace activity_trace_;
  std::atomic<bool> has_sticky_error_{false};
  std::atomic<bool> streams_stopped_{false};
  // Advanced under mutex_ with each removal from the memory tables.
  std::atomic<uint64_t> memory_generation_{0};
  StreamTaints taints_;
  absl::Status sticky_error_ ABSL_GUARDED_BY(mutex_);

  // The one lock of the session's state and all its tables (see above).
  mutable absl::Mutex mutex_;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  AllocationTable allocations_ ABSL_GUARDED_BY(mutex_);
  ImportTable imports_ ABSL_GUARDED_BY(mutex_);
  HostRegionTable host_regions_ ABSL_GUARDED_BY(mutex_);
  ModuleTable modules_ ABSL_GUARDED_BY(mutex_);
  EventTable events_ ABSL_GUARDED_BY(mutex_);
  std::map<uint32_t, StreamEntry> streams_ ABSL_GUARDED_BY(mutex_);  // by slot
  // Per stream slot, how many times ActivateStream started it.
  std::vector<uint64_t> stream_generations_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_H_
