// ThreadSanitizer only sees synchronization that is instrumented or that
// goes through an intercepted libc call. Debian's libabsl is neither built
// with -fsanitize=thread nor does absl::Mutex use pthreads (it spins and
// sleeps on futexes), so without help TSan would report every access that
// openreg guards with an absl::Mutex as a data race.
//
// This file gives TSan the mutex semantics back: the tsan config links
// every binary with -Wl,--wrap=<symbol> for absl's out-of-line locking
// entry points (see BUILD), so openreg's calls land here, and each wrapper
// tells TSan what the real function does (__tsan_mutex_* annotations, the
// same ones absl uses when it is itself built with TSan). Only calls from
// instrumented (openreg) code are wrapped; absl's and gRPC's internal
// locking stays invisible, which is fine since their memory accesses are
// invisible too.
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define OPENREG_STRINGIFY_INNER(x) #x
#define OPENREG_STRINGIFY(x) OPENREG_STRINGIFY_INNER(x)

// The symbol names wrapped in BUILD spell absl's inline namespace; a system
// absl with another one must fail here, not silently lose the annotations.
static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1);
static_assert(std::char_traits<char>::compare(
                  OPENREG_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME),
                  "debian3", 8) == 0,
              "update the --wrap symbols in third_party/sanitizers/BUILD");
// absl::Mutex is one word whose kMuWriter bit says a writer holds it.
static_assert(sizeof(absl::Mutex) == sizeof(std::atomic<intptr_t>));

// Exported by the TSan runtime but not declared in its public header.
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

namespace {

constexpr intptr_t kMuWriter = 0x0008;  // absl/synchronization/mutex.cc

// Await and CondVar::Wait keep the mode the caller holds the mutex in.
unsigned HeldMode(const absl::Mutex* mu) {
  const auto* word = reinterpret_cast<const std::atomic<intptr_t>*>(mu);
  return (word->load(std::memory_order_relaxed) & kMuWriter) != 0
             ? 0
             : __tsan_mutex_read_lock;
}

void BeforeLock(void* mu, unsigned flags) { __tsan_mutex_pre_lock(mu, flags); }

void AfterLock(void* mu, unsigned flags) {
  __tsan_mutex_post_lock(mu, flags, 0);
}

void Released(void* mu, unsigned flags) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
}

// The condition of a LockWhen/Await runs inside absl while TSan believes
// the mutex is not held; its reads are ordered by the real mutex.
struct IgnoreAccesses {
  IgnoreAccesses() { __tsan_ignore_thread_begin(); }
  ~IgnoreAccesses() { __tsan_ignore_thread_end(); }
};

// notified_yet_, which the inline HasBeenNotified() reads with acquire.
void* NotifiedFlag(const absl::Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n) +
                           sizeof(absl::Mutex));
}

}  // namespace

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// OPENREG_WRAP(symbol, result, parameters...) declares __real_<symbol>
// (the original, renamed so by the linker) and starts __wrap_<symbol>.
#define OPENREG_WRAP(symbol, result, ...)         \
  extern "C" result __real_##symbol(__VA_ARGS__); \
  extern "C" result __wrap_##symbol(__VA_ARGS__)

// ---- Mutex: exclusive and shared ------------------------------------------

OPENREG_WRAP(_ZN4absl7debian35Mutex4LockEv, void, Mutex* mu) {
  BeforeLock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  AfterLock(mu, 0);
}

OPENREG_WRAP(_ZN4absl7debian35Mutex7TryLockEv, bool, Mutex* mu) {
  BeforeLock(mu, __tsan_mutex_try_lock);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  AfterLock(mu, locked ? __tsan_mutex_try_lock
                       : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed);
  return locked;
}

OPENREG_WRAP(_ZN4absl7debian35Mutex6UnlockEv, void, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

OPENREG_WRAP(_ZN4absl7debian35Mutex10ReaderLockEv, void, Mutex* mu) {
  BeforeLock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  AfterLock(mu, __tsan_mutex_read_lock);
}

OPENREG_WRAP(_ZN4absl7debian35Mutex13ReaderTryLockEv, bool, Mutex* mu) {
  BeforeLock(mu, __tsan_mutex_try_read_lock);
  const bool locked = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(mu);
  AfterLock(mu, locked ? __tsan_mutex_try_read_lock
                       : __tsan_mutex_try_read_lock_failed);
  return locked;
}

OPENREG_WRAP(_ZN4absl7debian35Mutex12ReaderUnlockEv, void, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

// ---- Locking once a condition holds ---------------------------------------

OPENREG_WRAP(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, void, Mutex* mu,
             const Condition& cond) {
  BeforeLock(mu, 0);
  {
    IgnoreAccesses ignore;
    __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(mu, cond);
  }
  AfterLock(mu, 0);
}

OPENREG_WRAP(
    _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
    bool, Mutex* mu, const Condition& cond, Duration timeout) {
  BeforeLock(mu, 0);
  bool met;
  {
    IgnoreAccesses ignore;
    met =
        __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
            mu, cond, timeout);
  }
  AfterLock(mu, 0);  // held either way
  return met;
}

OPENREG_WRAP(
    _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
    bool, Mutex* mu, const Condition& cond, Time deadline) {
  BeforeLock(mu, 0);
  bool met;
  {
    IgnoreAccesses ignore;
    met =
        __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
            mu, cond, deadline);
  }
  AfterLock(mu, 0);
  return met;
}

OPENREG_WRAP(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE, void,
             Mutex* mu, const Condition& cond) {
  BeforeLock(mu, __tsan_mutex_read_lock);
  {
    IgnoreAccesses ignore;
    __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(mu, cond);
  }
  AfterLock(mu, __tsan_mutex_read_lock);
}

// ---- Waiting while holding the mutex: released, then held again ----------

OPENREG_WRAP(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, void, Mutex* mu,
             const Condition& cond) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  {
    IgnoreAccesses ignore;
    __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, cond);
  }
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
}

OPENREG_WRAP(
    _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
    bool, Mutex* mu, const Condition& cond, Duration timeout) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  bool met;
  {
    IgnoreAccesses ignore;
    met =
        __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
            mu, cond, timeout);
  }
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
  return met;
}

OPENREG_WRAP(
    _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE, bool,
    Mutex* mu, const Condition& cond, Time deadline) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  bool met;
  {
    IgnoreAccesses ignore;
    met =
        __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
            mu, cond, deadline);
  }
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
  return met;
}

OPENREG_WRAP(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, void, CondVar* cv,
             Mutex* mu) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
}

OPENREG_WRAP(
    _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, bool,
    CondVar* cv, Mutex* mu, Duration timeout) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(
          cv, mu, timeout);
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
  return timed_out;
}

OPENREG_WRAP(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE,
             bool, CondVar* cv, Mutex* mu, Time deadline) {
  const unsigned mode = HeldMode(mu);
  Released(mu, mode);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(
          cv, mu, deadline);
  BeforeLock(mu, mode);
  AfterLock(mu, mode);
  return timed_out;
}

// ---- Destruction: TSan forgets the mutex (its address may be reused) ----

OPENREG_WRAP(_ZN4absl7debian35MutexD1Ev, void, Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  __real__ZN4absl7debian35MutexD1Ev(mu);
}

// ---- Notification: Notify() happens before every wait that sees it ------

OPENREG_WRAP(_ZN4absl7debian312Notification6NotifyEv, void, Notification* n) {
  __tsan_release(n);
  __tsan_release(NotifiedFlag(n));
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}

OPENREG_WRAP(_ZNK4absl7debian312Notification19WaitForNotificationEv, void,
             const Notification* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  __tsan_acquire(const_cast<Notification*>(n));
}

OPENREG_WRAP(
    _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
    bool, const Notification* n, Duration timeout) {
  const bool notified =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
          n, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
