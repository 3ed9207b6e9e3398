// How a client wakes the daemon's executor threads after it gave an idle
// (parked) stream new work.
//
// Two things, both handed to the client at attach (attach_protocol.h):
// - its session's ring fds, one per device (ring_fds[device]): eventfds of
//   its own that the executors of that device alone watch (epoll), so a
//   ring wakes only an executor that can run the stream. Writing it is the
//   ring. The kernel keeps a ring until an executor collects it, so no
//   ring is ever lost, and only the session holds its fds: another client
//   cannot hide, forge or steal this session's rings.
// - the daemon's doorbell page (ONE memfd for all clients, mapped shared):
//   per device a hint word that every ring bumps, so that an executor
//   running other streams notices a ring at its next command boundary with
//   one load instead of a system call; and the number of the device's
//   queued streams, which clients read to decide how to wait.
// Executors never sleep on a stream's ring, so the number of daemon
// threads does not depend on the number of streams.
//
// The protocol, per stream (StreamSlot::parked, session_layout.h):
//   daemon, when a stream's ring is empty: parked = 1 (seq_cst), re-read
//     the ring's tail; if a command arrived meanwhile, take the stream back
//     (exchange(parked, 0) == 1) and run it. Whoever clears `parked` makes
//     the stream runnable again, exactly once.
//   client, after publishing a command (the ring's tail, seq_cst):
//     if ClaimParked(&slot->parked): RingDoorbell(&page->devices[device],
//     ring_fds[device]).
// Both sides write first and read second (seq_cst), so at least one of
// them sees the other's write (Dekker): a command is never left unnoticed
// in the ring of a parked stream.
//
// Trust: every client can write the whole doorbell page and its own
// `parked` words. Rewriting the page can wake executors for nothing, make
// them miss the hint (a ring is then seen when an executor next waits,
// within a slice, not at the next command boundary) or make other clients
// spin or sleep in their waits; it cannot delay another session's ring
// beyond that, since the ring itself is that session's eventfd. An
// executor re-checks the daemon's own state after every wake and sleeps
// with a timeout after which it also looks at the rings of parked streams.
#ifndef OPENREG_DATA_PLANE_DOORBELL_H_
#define OPENREG_DATA_PLANE_DOORBELL_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <thread>

#include "data_plane/device_address.h"

namespace openreg {

// One device's ring hint and load, each alone in its cache line.
struct Doorbell {
  alignas(64) std::atomic<uint32_t> word;  // bumped by every ring: a hint
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

// Bumps the device's hint word (for executors that are running) and
// writes the session's ring fd for that device (for executors that wait):
// one parked stream needs one executor. A full eventfd (after 2^64 - 2
// rings nobody collected) cannot lose the ring: it is already pending.
inline void RingDoorbell(Doorbell* doorbell, int ring_fd) {
  doorbell->word.fetch_add(1, std::memory_order_seq_cst);
  const uint64_t one = 1;
  ssize_t written;
  do {
    written = write(ring_fd, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
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
