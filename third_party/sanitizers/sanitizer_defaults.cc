// Default options and suppressions of the sanitizer runtimes, compiled into
// every binary of a sanitizer config (.bazelrc puts this library in with
// --custom_malloc, which Bazel links into every cc_binary and cc_test), so
// that `bazel test --config=asan` needs no environment and no path to a
// suppression file. $ASAN_OPTIONS, $UBSAN_OPTIONS and $TSAN_OPTIONS still
// override these (the runtimes read the environment after the defaults).
//
// Exactly one of OPENREG_SANITIZE_ADDRESS, OPENREG_SANITIZE_UNDEFINED and
// OPENREG_SANITIZE_THREAD is defined (see BUILD).

// The runtimes look these up by name, so they must be exported and kept.
#define OPENREG_SANITIZER_HOOK \
  extern "C" __attribute__((visibility("default"), used)) const char*

#if defined(OPENREG_SANITIZE_ADDRESS) || defined(OPENREG_SANITIZE_UNDEFINED)
// Findings must fail the test that hit them: UBSan is built with
// -fno-sanitize-recover, halt_on_error says so for the runtime too.
OPENREG_SANITIZER_HOOK __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
#endif

#if defined(OPENREG_SANITIZE_ADDRESS)
// check_initialization_order: static initializers across files (the daemon
// registers kernels from static initializers). detect_leaks is on by
// default on x86-64 Linux; said here so that nobody wonders. Not
// detect_stack_use_after_return: gcc 12's fake stack frames are only 32-byte
// aligned, so every alignas(64) local (SessionHeader, WaitableCounter) then
// trips UBSan's alignment check although the real stack aligns it.
OPENREG_SANITIZER_HOOK __asan_default_options() {
  return "detect_leaks=1:check_initialization_order=1:strict_init_order=1";
}

OPENREG_SANITIZER_HOOK __lsan_default_suppressions() {
  return
#include "third_party/sanitizers/lsan.supp.inc"
      ;
}
#endif

#if defined(OPENREG_SANITIZE_THREAD)
// halt_on_error=0: report every race of a run, then exit with 66 so that
// the test fails. second_deadlock_stack: both stacks of a lock inversion.
OPENREG_SANITIZER_HOOK __tsan_default_options() {
  return "halt_on_error=0:second_deadlock_stack=1";
}

OPENREG_SANITIZER_HOOK __tsan_default_suppressions() {
  return
#include "third_party/sanitizers/tsan.supp.inc"
      ;
}
#endif
