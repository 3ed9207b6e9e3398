// openreg runtime: a CUDA-runtime-like C++ API over openreg-daemon.
//
// No libtorch. Every call connects lazily: the first call finds the daemon
// on $OPENREG_DAEMON_SOCKET (or the default socket), spawning one when
// autospawn is allowed, performs the version handshake and attaches a
// session. Calls return an Error; the message of the last failure on the
// calling thread is available from GetLastErrorMessage().
//
// Device pointers are opaque device addresses (see data_plane/
// device_address.h): never dereference them in the client.
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_RUNTIME_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace openreg {

// Values equal proto::ErrorCode so that codes cross processes unchanged.
enum class Error : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kInvalidDevice = 2,
  kOutOfMemory = 3,
  kNotReady = 4,
  kDaemonUnavailable = 5,
  kDeviceLost = 6,
  kVersionMismatch = 7,
  kKernelFailure = 8,
  kInvalidHandle = 9,
  kPermissionDenied = 10,
  kResourceExhausted = 11,
  kInternal = 12,
  // A kernel raised one of c10's error classes (IndexError, ValueError,
  // TypeError, NotImplementedError, LinAlgError); torch_openreg raises
  // the same Python class.
  kKernelIndexError = 13,
  kKernelValueError = 14,
  kKernelTypeError = 15,
  kKernelNotImplementedError = 16,
  kKernelLinAlgError = 17,
  kSyncTimeout = 18,  // a synchronizing call outlived SetSyncTimeout's limit
  // Injected faults (openreg/faults.h). Sticky: every later call of the
  // session fails with the same error until the process exits.
  kIllegalAddress = 19,
  kEccUncorrectable = 20,
  kDeviceFault = 21,  // the device is in the FAULT state until reset
  kCopyFailure = 22,
  kCollectiveFailure = 23,  // a collective's ranks disagreed, left or hung
  // Stream capture (openreg/graphs.h): a call capture does not permit
  // (cudaErrorStreamCaptureUnsupported), and a capture that cannot become
  // a graph (cudaErrorStreamCaptureInvalidated / Unjoined / Isolation).
  kStreamCaptureUnsupported = 24,
  kStreamCaptureInvalidated = 25,
};

// "invalid value", "out of memory", ...
const char* ErrorName(Error error);

// The last error on this thread, then reset to kSuccess (cudaGetLastError).
Error GetLastError();
// The last error on this thread, not reset (cudaPeekAtLastError).
Error PeekAtLastError();
// The message that went with the last error on this thread.
std::string GetLastErrorMessage();

// ---- Connection --------------------------------------------------------
// Connects and attaches now instead of at the first call.
Error Init();
// The control socket this process attaches to: $OPENREG_DAEMON_SOCKET,
// else the default path (data_plane/socket_path.h). Never connects.
std::string DaemonSocketPath();
// Where the client looks for the daemon: $OPENREG_DAEMON_SOCKET, else
// $XDG_RUNTIME_DIR/openreg/daemon.sock, else /tmp/openreg-$UID/daemon.sock.
std::string DefaultSocketPath();
// The daemon binary to spawn when none answers (if autospawn is allowed:
// $OPENREG_AUTOSPAWN unset or not "0"). $OPENREG_DAEMON_BINARY wins.
void SetDaemonBinary(const std::string& path);
// True once a session is attached (never connects).
bool IsConnected();
// Detaches the session (frees its memory in the daemon). Later calls
// attach a new session.
Error Shutdown();
// True in a child forked from a process that had attached: the session is
// the parent's and every call fails (start children with 'spawn'), as CUDA
// refuses to re-initialize in a forked child. Never connects.
bool InForkedChild();

// ---- Devices -----------------------------------------------------------
struct DeviceProperties {
  std::string name;
  uint64_t total_memory = 0;
  int multiprocessor_count = 0;
  int major = 0;
  int minor = 0;
};

Error GetDeviceCount(int* count);
// The calling thread's current device (default 0).
Error SetDevice(int device);
Error GetDevice(int* device);
Error GetDeviceProperties(DeviceProperties* properties, int device);
// Free and total bytes of `device` as the daemon sees them (all clients).
Error MemGetInfo(size_t* free_bytes, size_t* total_bytes, int device);
// Waits for every stream of the current device.
Error DeviceSynchronize();

// A watchdog for hung devices: synchronizing calls (device, stream and
// event synchronization, synchronous launches and copies), and launches
// that wait for room in a full command ring, that wait longer than
// `seconds` return kSyncTimeout, naming the stream and the last command it
// completed, instead of waiting forever. 0 (the default) waits
// as long as the daemon lives. The initial value is $OPENREG_SYNC_TIMEOUT
// (seconds). Process-wide; kInvalidValue for a negative or non-finite
// value.
Error SetSyncTimeout(double seconds);
double GetSyncTimeout();

// ---- Memory ------------------------------------------------------------
// Allocates on the current device. On out-of-memory the client waits for
// its pending frees once and retries before failing with kOutOfMemory.
Error Malloc(void** device_ptr, size_t size);
// Frees memory from Malloc. The memory is released after every command
// already submitted on any stream of this process's session has finished
// (all devices: a copy on another device may still read it); the call does
// not block.
Error Free(void* device_ptr);
// The device of a device pointer; kInvalidValue for anything else.
Error PointerGetDevice(const void* ptr, int* device);

enum class MemcpyKind {
  kHostToHost,
  kHostToDevice,
  kDeviceToHost,
  kDeviceToDevice,
};

// Default stream of a device is the stream whose id equals the device index.
using StreamId = uint32_t;
// The calling thread's current device's default stream.
inline constexpr StreamId kDefaultStream = 0xffffffffu;

// Synchronous: returns when the copy is complete.
Error Memcpy(void* dst, const void* src, size_t count, MemcpyKind kind);
// Ordered on `stream`. With a pinned host side (memory from HostAlloc) the
// call only enqueues the copy and returns: the daemon copies directly from
// or to that memory when the stream reaches it, so the host buffer must
// not be reused (H2D) or read (D2H) before the stream or an event recorded
// after the copy has completed. With pageable memory, host-to-device
// returns once the source has been staged (the host buffer may be reused)
// and device-to-host waits for the copy, as CUDA does.
Error MemcpyAsync(void* dst, const void* src, size_t count, MemcpyKind kind,
                  StreamId stream = kDefaultStream);
Error MemsetAsync(void* device_ptr, int value, size_t count,
                  StreamId stream = kDefaultStream);

// ---- IPC memory handles ------------------------------------------------
// Like cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle:
// another process of the same user on the same daemon opens the handle and
// reads and writes the same device memory (no copy). The memory lives until
// the exporter has freed it and every importer has closed it or exited,
// whichever is last (the daemon counts the references), so an importer
// never reads freed memory. A handle is 64 opaque, unguessable bytes; it
// carries the pointer's offset inside its allocation, so a pointer into a
// sub-block of an allocation opens at the same offset.
inline constexpr size_t kIpcHandleSize = 64;
struct IpcMemHandle {
  unsigned char bytes[kIpcHandleSize];
};
// A handle for `device_ptr` (anywhere inside an allocation of this
// process; not memory this process itself opened from a handle).
Error IpcGetMemHandle(IpcMemHandle* handle, void* device_ptr);
// Opens another process's handle: `*device_ptr` addresses the same memory
// (at the handle's offset). Opening the same handle again returns the same
// pointer and must be closed again. kInvalidHandle for a handle this
// daemon never made or whose memory is gone, kInvalidValue for a malformed
// one, kPermissionDenied for another user's.
Error IpcOpenMemHandle(void** device_ptr, const IpcMemHandle& handle);
// Closes a pointer from IpcOpenMemHandle (never Free it).
Error IpcCloseMemHandle(void* device_ptr);
// How many opens of handles inside [device_ptr, device_ptr + size), by any
// process, are not closed yet (an exporter's allocator reuses shared memory
// only at 0).
Error IpcImportCount(const void* device_ptr, size_t size, uint64_t* opens);

// ---- Pinned host memory ------------------------------------------------
// Like cudaHostAlloc / cudaFreeHost: host memory shared with the daemon
// (a memfd both processes map), so copies between it and the device need
// no staging and MemcpyAsync with it is truly asynchronous. The memory is
// page-aligned and resident (populated at allocation). It belongs to the
// current session: after Shutdown() it stays valid host memory, but copies
// with it are staged like pageable memory.
//
// Allocates `size` bytes (size 0 gives nullptr). kResourceExhausted when
// the system refuses the shared memory.
Error HostAlloc(void** ptr, size_t size);
// Frees memory from HostAlloc (`ptr` must be what HostAlloc returned).
// Like cudaFreeHost it waits for the session's queued work first, since
// queued copies may still use the memory.
Error HostFree(void* ptr);

struct HostRegionInfo {
  void* base = nullptr;  // what HostAlloc returned
  size_t size = 0;       // bytes HostAlloc was asked for
  uint32_t region = 0;   // the daemon's id of the region (never 0)
  size_t offset = 0;     // of the queried pointer from `base`
};
// Fills `info` when `ptr` lies inside memory from HostAlloc of the current
// session; kInvalidValue otherwise.
Error HostGetRegion(const void* ptr, HostRegionInfo* info);
// True when `ptr` lies inside memory from HostAlloc (of any session, never
// connects, never sets the last error): cudaPointerGetAttributes' "host".
bool IsHostAllocated(const void* ptr);

// ---- Streams -----------------------------------------------------------
// Creates a stream on the current device. Lower priority value = higher
// priority, as in CUDA.
Error StreamCreate(StreamId* stream, int priority = 0);
Error StreamDestroy(StreamId stream);
// kSuccess when all submitted work is done, kNotReady otherwise.
Error StreamQuery(StreamId stream);
Error StreamSynchronize(StreamId stream);
Error StreamGetDevice(StreamId stream, int* device);
// Makes `waiter` wait (on the device, the host does not block) until
// `waitee` has finished everything submitted to it so far.
Error StreamWaitStream(StreamId waiter, StreamId waitee);
// Resolves kDefaultStream to the current device's default stream.
StreamId ResolveStream(StreamId stream);

// ---- Events ------------------------------------------------------------
using EventId = uint32_t;
inline constexpr unsigned kEventDefault = 0;
inline constexpr unsigned kEventDisableTiming = 1;
// May be shared with other processes (IpcGetEventHandle); needs
// kEventDisableTiming, as cudaEventInterprocess does.
inline constexpr unsigned kEventInterprocess = 2;

// Creates an event on the current device.
Error EventCreate(EventId* event, unsigned flags = kEventDefault);
Error EventDestroy(EventId event);
Error EventRecord(EventId event, StreamId stream = kDefaultStream);
// kSuccess when the recorded work is done (or never recorded), else
// kNotReady.
Error EventQuery(EventId event);
Error EventSynchronize(EventId event);
Error StreamWaitEvent(StreamId stream, EventId event);
// Milliseconds between two recorded, completed events.
Error EventElapsedTime(float* milliseconds, EventId start, EventId end);

// ---- IPC event handles -------------------------------------------------
// Like cudaIpcGetEventHandle / cudaIpcOpenEventHandle: another process of
// the same user on the same daemon opens the handle and gets an event of
// its own that names this one. EventQuery, EventSynchronize and
// StreamWaitEvent on it wait for the exporter's latest EventRecord at the
// time of the call (later records do not move a wait already issued);
// StreamWaitEvent does not block the host. Each such call costs one
// control round trip. An imported event cannot be recorded (kInvalidValue:
// record a local interprocess event and share its handle instead) and is
// released with EventDestroy. A wait whose exporter exited before its
// recorded work finished fails with kInvalidHandle instead of returning.
struct IpcEventHandle {
  unsigned char bytes[kIpcHandleSize];
};
// A handle for `event`, created with kEventInterprocess by this process.
Error IpcGetEventHandle(IpcEventHandle* handle, EventId event);
// Opens another process's event handle as `*event` (on the exporter's
// device). Errors as IpcOpenMemHandle; kInvalidHandle also when the
// exporter destroyed the event or exited.
Error IpcOpenEventHandle(EventId* event, const IpcEventHandle& handle);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_RUNTIME_H_
