// Bounds what one fuzz input may make a decoder allocate. A hostile peer
// must not be able to turn a small message into a large allocation (the
// "unbounded allocation" class of findings), so each target states a bound
// as a function of the input's size and checks it around every input.
//
// Counts every heap allocation of every thread between Arm() and
// Disarm(): through replaced operator new/delete in a plain build, and
// through the sanitizer allocator's malloc hooks in a sanitized one (a
// sanitizer owns operator new there).
#ifndef OPENREG_TESTS_FUZZ_ALLOCATION_LIMIT_H_
#define OPENREG_TESTS_FUZZ_ALLOCATION_LIMIT_H_

#include <cstddef>

namespace openreg::fuzz {

struct AllocationStats {
  size_t largest = 0;    // largest single allocation
  size_t peak_live = 0;  // most bytes allocated and not yet freed at once
  size_t count = 0;
};

class AllocationScope {
 public:
  // Starts counting (counts are process-wide: one scope at a time).
  AllocationScope();
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
  ~AllocationScope();

  // What was allocated since construction.
  AllocationStats Stats() const;
};

// False when allocations are not observable in this build (then targets
// skip their bound checks rather than pass them vacuously).
bool AllocationsObservable();

}  // namespace openreg::fuzz

#endif  // OPENREG_TESTS_FUZZ_ALLOCATION_LIMIT_H_
