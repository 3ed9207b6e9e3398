// Where the ranks of one communicator meet for each collective.
//
// Every rank enqueues its collectives in the same order (as NCCL requires),
// so the k-th collective of each rank is the same operation. A rank's
// stream arrives with its part (what the collective reads and writes of
// that rank, pinned in its own session) and waits, inside a BlockingRegion
// (its device's other streams keep running), until all ranks have arrived.
// The last to arrive runs the collective over every part, once; every rank
// then returns that one outcome.
//
// Promises:
// - The runner sees the parts in rank order, whoever arrived last and
//   whenever: a result computed in a fixed order over them does not depend
//   on arrival order or thread count.
// - Ranks that disagree on the operation (their parts' signatures differ:
//   kind, dtype, count, root) fail that collective, all of them, naming
//   both sides; nothing is read or written.
// - Abort (a rank's session ended, the communicator was destroyed) wakes
//   every waiting rank and fails every later arrival with its status.
// - A rank that waits past its deadline fails with DEADLINE_EXCEEDED naming
//   the ranks that did not arrive, and the rendezvous is aborted: the others
//   cannot complete that collective either.
#ifndef OPENREG_DEVICE_DAEMON_COLLECTIVES_RENDEZVOUS_H_
#define OPENREG_DEVICE_DAEMON_COLLECTIVES_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace openreg::daemon {

class Rendezvous {
 public:
  // What one rank brings to a collective.
  struct Part {
    // Must be equal across the ranks of one collective.
    std::string signature;
    // The rank's buffers and whatever keeps them pinned; opaque here.
    std::shared_ptr<void> payload;
  };
  // Runs the collective; called once per collective, parts by rank.
  using Runner =
      std::function<absl::Status(absl::Span<const Part* const> parts)>;

  // `names`, when given (one per rank), are the rank numbers messages
  // show: a point-to-point channel's two places are ranks s and d of its
  // communicator.
  explicit Rendezvous(int size, std::vector<int> names = {});
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int size() const { return size_; }

  // Rank `rank`'s arrival at its collective number `sequence` (0, 1, ...).
  // Blocks until the collective ran (by whichever rank came last), the
  // rendezvous is aborted, or `deadline`. `cancelled`, when set, is asked
  // every kCancelCheck while waiting: if it says so (the rank's stream is
  // being stopped), the rank gives up with CANCELLED and the rendezvous is
  // aborted, since the collective can no longer complete.
  absl::Status Arrive(int rank, uint64_t sequence, Part part, const Runner& run,
                      absl::Time deadline,
                      const std::function<bool()>& cancelled = {});

  static constexpr absl::Duration kCancelCheck = absl::Milliseconds(100);

  // Fails every waiting and later arrival with `why` (not OK). The first
  // abort's status is kept.
  void Abort(absl::Status why);

  // The abort status, or OK.
  absl::Status aborted() const;

  // A collective some ranks arrived at and that has not run yet.
  struct Waiting {
    uint64_t sequence = 0;
    // The first arrived rank's signature ("all_reduce(sum) of 4 x Float").
    std::string signature;
    // Ranks (as messages name them) that arrived, and when.
    std::vector<std::pair<int, absl::Time>> arrived;
    std::vector<int> missing;
  };
  // The collectives waiting now, by sequence; none once aborted (nothing
  // will run any more: aborted() says why).
  std::vector<Waiting> WaitingRounds() const;

 private:
  struct Round {
    std::vector<std::optional<Part>> parts;
    std::vector<absl::Time> arrived_at;
    int arrived = 0;
    int departed = 0;
    bool done = false;
    absl::Status outcome;
  };

  absl::Status RunLocked(uint64_t sequence, Round& round, const Runner& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string MissingRanksLocked(const Round& round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Rank `rank` as messages name it.
  int Name(int rank) const;

  const int size_;
  const std::vector<int> names_;
  mutable absl::Mutex mutex_;
  // Node-based: a waiting rank holds a reference to its round while others
  // insert later rounds.
  absl::node_hash_map<uint64_t, Round> rounds_ ABSL_GUARDED_BY(mutex_);
  absl::Status aborted_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_COLLECTIVES_RENDEZVOUS_H_
