// The session's staging area, split into chunks of kStagingChunkBytes.
// Host<->device copies go through it: the client copies host data into a
// chunk and enqueues CopyHostToDevice, or enqueues CopyDeviceToHost into a
// chunk and copies out once it completed.
//
// A chunk may be reused only after the daemon finished the last command
// that used it, so each chunk remembers that command's (stream, sequence).
// Chunks are handed out round-robin, preferring finished ones: a large
// copy then streams through several chunks while the daemon works on the
// previous ones (double buffering) instead of waiting chunk by chunk.
#ifndef OPENREG_RUNTIME_CLIENT_STAGING_POOL_H_
#define OPENREG_RUNTIME_CLIENT_STAGING_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace openreg::client {

// A command's place on a stream. sequence 0 means "no command".
struct StreamPosition {
  uint32_t slot = 0;
  uint64_t sequence = 0;
};

struct StagingChunk {
  int index = -1;
  char* data = nullptr;
  uint64_t offset = 0;    // from the start of the staging area
  uint64_t capacity = 0;  // bytes
  StreamPosition last_use;
};

class StagingPool {
 public:
  // `staging` is the session's staging area of `staging_bytes` bytes.
  StagingPool(char* staging, uint64_t staging_bytes);

  // Reserves a chunk no other thread holds, waiting up to `timeout` when
  // all are held. The caller must wait for the returned chunk's last_use to
  // complete before writing into it (see `finished`, used to prefer chunks
  // whose last use is already done). nullopt on timeout.
  std::optional<StagingChunk> Reserve(
      absl::FunctionRef<bool(const StreamPosition&)> finished,
      absl::Duration timeout);

  // Gives the chunk back; `last_use` is the last command that reads or
  // writes it (or the chunk's previous last_use if none was enqueued).
  void Release(int index, const StreamPosition& last_use);

  // A destroyed stream has completed everything (it was synchronized), and
  // its slot may be reused with a restarted sequence: forget it.
  void ForgetStream(uint32_t slot);

 private:
  struct ChunkState {
    uint64_t offset;
    uint64_t capacity;
    bool held = false;
    StreamPosition last_use;
  };

  char* const staging_;
  absl::Mutex mutex_;
  std::vector<ChunkState> chunks_ ABSL_GUARDED_BY(mutex_);
  size_t next_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t held_count_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_STAGING_POOL_H_
