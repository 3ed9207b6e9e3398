// The client's side of one stream slot: the producer end of its command
// ring and the sequence number of the last command written to it.
#ifndef OPENREG_RUNTIME_CLIENT_STREAM_CONTEXT_H_
#define OPENREG_RUNTIME_CLIENT_STREAM_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/command_ring.h"
#include "data_plane/session_layout.h"
#include "runtime_client/stream_capture.h"

namespace openreg::client {

struct StreamContext {
  StreamContext(uint32_t slot, StreamSlot* shared, char* ring_buffer,
                uint64_t ring_bytes, char* reply_area, uint32_t max_streams)
      : slot(slot),
        shared(shared),
        reply_area(reply_area),
        writer(&shared->ring, ring_buffer, ring_bytes),
        waiters(new std::atomic<uint64_t>[max_streams]()) {}

  const uint32_t slot;
  StreamSlot* const shared;
  char* const reply_area;

  // The ring has a single producer: writers of this stream serialize here,
  // and a synchronous op holds it until its reply has been read, so that
  // two threads never interleave replies on one stream.
  absl::Mutex mutex;
  RingWriter writer ABSL_GUARDED_BY(mutex);

  // Read without the mutex (LastSubmitted, fences, queries).
  std::atomic<bool> active{false};
  std::atomic<int> device{-1};
  std::atomic<uint64_t> last_submitted{0};

  // The capture this stream records into (openreg/graphs.h), if any: its
  // commands go there instead of the ring. capture_id mirrors it for
  // checks without the mutex.
  std::shared_ptr<StreamCapture> capture ABSL_GUARDED_BY(mutex);
  std::atomic<uint64_t> capture_id{0};

  // waiters[w] = the last command of stream slot w that waits for this
  // stream (WaitStream, or a FreeMemory fence). Destroying this stream
  // first lets those commands pass: the daemon restarts a reused slot's
  // counter at 0, so a wait still queued for the old stream would stall or
  // fail on the new one.
  std::unique_ptr<std::atomic<uint64_t>[]> waiters;
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_STREAM_CONTEXT_H_
