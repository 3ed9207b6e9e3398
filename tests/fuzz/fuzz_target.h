// What every fuzz target in tests/fuzz provides. A target is one function
// that takes arbitrary bytes (libFuzzer's entry point, so the same code runs
// under libFuzzer in `make fuzz` and under the GoogleTest driver,
// fuzz_test_main.cc, in `make test`) plus the seeds it starts from.
//
// A target fails by aborting (OPENREG_FUZZ_CHECK): that is what libFuzzer
// and the sanitizers treat as a finding, and the GoogleTest driver reports
// the input that did it.
#ifndef OPENREG_TESTS_FUZZ_FUZZ_TARGET_H_
#define OPENREG_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace openreg::fuzz {

// Inputs every run starts from: well-formed and nearly well-formed ones, so
// that mutations reach past the first checks. Defined by each target.
std::vector<std::string> Seeds();

// Byte strings worth splicing into inputs (field names, magic numbers).
// Defined by each target; may be empty.
std::vector<std::string> Dictionary();

// Prints `message` with the current input's location and aborts.
[[noreturn]] void Fail(const char* file, int line, const std::string& message);

}  // namespace openreg::fuzz

#define OPENREG_FUZZ_CHECK(condition, message)                        \
  do {                                                                \
    if (!(condition)) {                                               \
      ::openreg::fuzz::Fail(                                          \
          __FILE__, __LINE__,                                         \
          std::string("check failed: " #condition ": ") + (message)); \
    }                                                                 \
  } while (false)

#endif  // OPENREG_TESTS_FUZZ_FUZZ_TARGET_H_
