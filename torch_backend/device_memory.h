// What the caching allocator (block_cache.h) needs from one device: whole
// segments of device memory, and events that fence a block's reuse behind
// the streams that used it. RuntimeDeviceMemory is the runtime client on
// one device; tests inject a fake, so the cache is tested without a daemon.
#ifndef OPENREG_TORCH_BACKEND_DEVICE_MEMORY_H_
#define OPENREG_TORCH_BACKEND_DEVICE_MEMORY_H_

#include <c10/core/Device.h>

#include <cstddef>
#include <string>

#include "openreg/runtime.h"

namespace openreg::torch_backend {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // kOutOfMemory when the device cannot serve `size` bytes.
  virtual Error Malloc(void** ptr, size_t size) = 0;
  // Stream-ordered: queued work on the memory finishes first.
  virtual Error Free(void* ptr) = 0;
  virtual Error CreateEvent(EventId* event) = 0;
  virtual Error RecordEvent(EventId event, StreamId stream) = 0;
  // kSuccess once the recorded work is done, kNotReady before.
  virtual Error QueryEvent(EventId event) = 0;
  virtual Error SynchronizeEvent(EventId event) = 0;
  // Opens by other processes, not yet closed, of IPC handles inside
  // [ptr, ptr + size).
  virtual Error ImportCount(const void* ptr, size_t size, uint64_t* opens) = 0;
  // Free and total bytes of the device, all clients together (the
  // history's "oom" events record what was free).
  virtual Error MemGetInfo(size_t* free_bytes, size_t* total_bytes) = 0;

  // The message of the last failure on this thread.
  virtual std::string LastErrorMessage() = 0;
  // Answers a failure the cache handles itself (see ignored_error.h).
  virtual void IgnoreError(Error error, const char* reason) = 0;
};

// The runtime client's memory and events on `device` (the calling thread's
// current device is switched for each call and restored).
class RuntimeDeviceMemory : public DeviceMemory {
 public:
  explicit RuntimeDeviceMemory(c10::DeviceIndex device) : device_(device) {}

  Error Malloc(void** ptr, size_t size) override;
  Error Free(void* ptr) override;
  Error CreateEvent(EventId* event) override;
  Error RecordEvent(EventId event, StreamId stream) override;
  Error QueryEvent(EventId event) override;
  Error SynchronizeEvent(EventId event) override;
  Error ImportCount(const void* ptr, size_t size, uint64_t* opens) override;
  Error MemGetInfo(size_t* free_bytes, size_t* total_bytes) override;
  std::string LastErrorMessage() override;
  void IgnoreError(Error error, const char* reason) override;

 private:
  const c10::DeviceIndex device_;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DEVICE_MEMORY_H_
