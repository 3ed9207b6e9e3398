#include "runtime_client/staging_pool.h"

#include <algorithm>

#include "data_plane/session_layout.h"

namespace openreg::client {

StagingPool::StagingPool(char* staging, uint64_t staging_bytes)
    : staging_(staging) {
  const uint64_t chunk_bytes = std::min(kStagingChunkBytes, staging_bytes);
  for (uint64_t offset = 0; offset + chunk_bytes <= staging_bytes;
       offset += chunk_bytes) {
    chunks_.push_back(ChunkState{offset, chunk_bytes});
  }
}

std::optional<StagingChunk> StagingPool::Reserve(
    absl::FunctionRef<bool(const StreamPosition&)> finished,
    absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return held_count_ < chunks_.size();
  };
  if (!mutex_.AwaitWithTimeout(absl::Condition(&any_free), timeout)) {
    return std::nullopt;
  }
  // First free chunk in round-robin order whose last use is done, else the
  // first free chunk at all (its user then waits for that last use).
  const size_t count = chunks_.size();
  std::optional<size_t> chosen;
  for (size_t step = 0; step < count; ++step) {
    const size_t index = (next_ + step) % count;
    if (chunks_[index].held) continue;
    if (!chosen.has_value()) chosen = index;
    if (finished(chunks_[index].last_use)) {
      chosen = index;
      break;
    }
  }
  ChunkState& chunk = chunks_[*chosen];
  chunk.held = true;
  ++held_count_;
  next_ = (*chosen + 1) % count;
  return StagingChunk{static_cast<int>(*chosen), staging_ + chunk.offset,
                      chunk.offset, chunk.capacity, chunk.last_use};
}

void StagingPool::Release(int index, const StreamPosition& last_use) {
  absl::MutexLock lock(&mutex_);
  ChunkState& chunk = chunks_[index];
  chunk.held = false;
  chunk.last_use = last_use;
  --held_count_;
}

void StagingPool::ForgetStream(uint32_t slot) {
  absl::MutexLock lock(&mutex_);
  for (ChunkState& chunk : chunks_) {
    if (chunk.last_use.slot == slot) chunk.last_use = StreamPosition{};
  }
}

}  // namespace openreg::client
