// The doorbell page: how a client wakes the daemon's executor threads after
// it gave an idle (parked) stream new work.
//
// The daemon creates ONE page (a memfd) at start and passes its fd to every
// client at attach, next to the session segment's fd. The page holds one
// futex word per device. The executors of device d sleep on word d when
// they have nothing to run; they never sleep on a stream's ring, so the
// number of daemon threads does not depend on the number of streams.
//
// The protocol, per stream (StreamSlot::parked, session_layout.h):
//   daemon, when a stream's ring is empty: parked = 1 (seq_cst), re-read
//     the ring's tail; if a command arrived meanwhile, take the stream back
//     (exchange(parked, 0) == 1) and run it. Whoever clears `parked` makes
//     the stream runnable again, exactly once.
//   client, after publishing a command (the ring's tail, seq_cst):
//     if ClaimParked(&slot->parked): RingDoorbell(&page->devices[device]).
// Both sides write first and read second (seq_cst), so at least one of
// them sees the other's write (Dekker): a command is never left unnoticed
// in the ring of a parked stream.
//
// Trust: every client can write the whole page and its own `parked` words.
// All it can achieve is waking executors for nothing (a spurious wake),
// making other clients spin or sleep in their waits, or delaying its own
// streams: an executor re-checks the daemon's own state
// after every wake, and sleeps with a timeout after which it also looks at
// the rings of parked streams.
#ifndef OPENREG_DATA_PLANE_DOORBELL_H_
#define OPENREG_DATA_PLANE_DOORBELL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "data_plane/device_address.h"
#include "data_plane/futex.h"

namespace openreg {

// One device's doorbell and load, each alone in its cache line.
struct Doorbell {
  alignas(64) std::atomic<uint32_t> word;  // bumped by every ring; a futex word
  // Streams of the device queued for an executor, published by the daemon
  // at every change; clients only read it (ShouldSpinBeforeSleeping).
  alignas(64) std::atomic<uint32_t> queued_streams;
};

// Lives in shared memory: trivially constructible, zero-filled by the
// daemon, no pointers.
struct DoorbellPage {
  Doorbell devices[kMaxDevices];
};

inline constexpr uint64_t kDoorbellPageBytes = sizeof(DoorbellPage);

// Bumps the word, so that an executor about to sleep on its old value does
// not, and wakes one sleeping executor: one parked stream needs one.
inline void RingDoorbell(Doorbell* doorbell) {
  doorbell->word.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeOne(&doorbell->word);
}

// Client side, before a synchronizing wait for one of the device's streams:
// whether to spin before sleeping. Not while as many streams as the host
// has cores are queued for the device's executors: the device is
// oversubscribed, the wait will be long, and a spinning client would take
// a core from the daemon or from another client (64 clients on 2 cores
// spent 0.4 us per op spinning). A hostile value only changes how this
// host's clients wait, never what runs.
inline bool ShouldSpinBeforeSleeping(const Doorbell& doorbell) {
  static const uint32_t cores =
      std::max(1u, std::thread::hardware_concurrency());
  return doorbell.queued_streams.load(std::memory_order_relaxed) < cores;
}

// Client side, after publishing a command: true when this call took the
// stream out of the parked state, and so must ring its device's doorbell.
// The load first keeps the common case (the stream is running) to one
// shared read.
inline bool ClaimParked(std::atomic<uint32_t>* parked) {
  return parked->load(std::memory_order_seq_cst) != 0 &&
         parked->exchange(0, std::memory_order_seq_cst) != 0;
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_DOORBELL_H_
