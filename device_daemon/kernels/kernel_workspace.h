// A cap on the host memory one kernel may hold inside the daemon: its
// temporaries, the storage its out= stand-ins grow into, the results of a
// synchronous launch. Without it, one launch (say, with bogus output
// shapes) could make the daemon allocate far more than any device holds
// before the mismatch is reported.
//
// Install() wraps c10's CPU allocator once per process. While a
// KernelWorkspace::Scope is alive on a thread, that thread's CPU
// allocations count against the scope's limit until they are freed (even
// after the scope ends); an allocation beyond the limit throws
// c10::OutOfMemoryError, which reaches the client as
// torch.OutOfMemoryError. Allocations of ATen's intra-op worker threads and
// outside any scope are not counted.
//
// Placement: while a KernelWorkspace::Placement is alive on a thread, an
// allocation of exactly the size of one of its slots (the client's output
// memory of the running launch) gets that memory, once per slot, instead
// of new memory; freeing it frees nothing. A kernel that allocates its
// result (convolution, batch norm) then writes it where the client reads
// it, and the reply has nothing to copy. Which allocation of that size
// takes the slot is the slot's `take_ordinal` (0: the first): some kernels
// first allocate a temporary of their result's size (convolution reorders
// its input, batch norm's backward its gradient), and the slot records
// the allocations of its size so that the caller can learn which one
// became the result (AllocationOrdinal) and ask for that one next time. A
// result may also be a temporary that took a slot, so the reply copies
// out of placed memory first (IsPlaced) before it writes any output.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_WORKSPACE_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_WORKSPACE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace openreg::daemon {

class KernelWorkspace {
 public:
  // Makes the accounting allocator c10's CPU allocator. Idempotent.
  static void Install();

  // Bytes counted against a scope, shared with its allocations' deleters.
  struct Budget {
    uint64_t limit = 0;
    // Named in the error; valid while the scope is (the only time
    // allocate() reads them).
    std::string_view op_name;
    std::string_view op_overload;
    std::atomic<uint64_t> live{0};
  };

  class Scope {
   public:
    // `limit_bytes` 0 = no limit (nothing is counted). The op's name and
    // overload must outlive the scope.
    Scope(uint64_t limit_bytes, std::string_view op_name,
          std::string_view op_overload);
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();

   private:
    std::shared_ptr<Budget> budget_;
    std::shared_ptr<Budget> outer_;  // restored at the end (nested scopes)
  };

  // How many allocations of a slot's size it records.
  static constexpr int kRecordedAllocations = 8;

  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
    // Which allocation of `bytes`, counted from 0, takes the slot.
    int take_ordinal = 0;
    bool taken = false;
    // While the placement is alive: how many allocations of `bytes` the
    // thread made, and where the first kRecordedAllocations of them are.
    int allocations = 0;
    std::array<const void*, kRecordedAllocations> addresses{};
  };

  class Placement {
   public:
    // `slots` must stay alive and in place while the placement is.
    explicit Placement(std::vector<Slot>* slots);
    Placement(const Placement&) = delete;
    Placement& operator=(const Placement&) = delete;
    ~Placement();

   private:
    std::vector<Slot>* outer_;
  };

  // True while `data` is memory a placement handed out and not yet freed.
  static bool IsPlaced(const void* data);

  // The ordinal of the allocation of `slot`'s size that was the last one
  // at `data` (an address is reused once its memory is freed); -1 when no
  // recorded allocation was.
  static int AllocationOrdinal(const Slot& slot, const void* data);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_WORKSPACE_H_
