// The GoogleTest driver of a fuzz target (fuzz_target.h), for `make test`:
// every seed, then mutations of the seeds for a bounded time, from a fixed
// random seed. No coverage feedback (that is libFuzzer's job in `make
// fuzz`), but the same target code, so a finding of either reproduces in
// the other.
//
//   --fuzz_seconds=N     mutation time budget (BUILD sets a few seconds)
//   $OPENREG_FUZZ_SECONDS  overrides --fuzz_seconds (e.g. 60 for a long run)
//   $OPENREG_FUZZ_RUNS     a fixed number of mutated inputs instead of time
//   $OPENREG_FUZZ_SEED     the mutator's random seed (default 1)
//   $OPENREG_FUZZ_WRITE_SEEDS=DIR  writes the seeds to DIR and exits (the
//                          starting corpus of `make fuzz`)
//   FILE...              runs just these inputs (a saved failing input, or
//                        one libFuzzer found) and exits
//
// An input that fails (a check, a crash, a sanitizer report) is written to
// $TEST_UNDECLARED_OUTPUTS_DIR (else /tmp) as fuzz-failure-input; rerun it
// with the libFuzzer binary, or as a seed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_target.h"

// Present in sanitized builds: called before the runtime exits on a report.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

namespace openreg::fuzz {
namespace {

double fuzz_seconds = 3;

// The input being run, for the failure handlers (no allocation there).
const uint8_t* current_data = nullptr;
size_t current_size = 0;
char failure_path[4096] = "/tmp/fuzz-failure-input";

void SaveCurrentInput() {
  if (current_data == nullptr) return;
  const int fd = open(failure_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t written = 0;
  while (written < current_size) {
    const ssize_t n = write(fd, current_data + written, current_size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  static const char kNote[] = "\nfuzz: the failing input was saved to ";
  ssize_t ignored = write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
  ignored = write(STDERR_FILENO, failure_path, strlen(failure_path));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

void OnFatalSignal(int signal) {
  SaveCurrentInput();
  // Default action (core, abort status) so that the test fails as it would.
  ::signal(signal, SIG_DFL);
  raise(signal);
}

void InstallFailureHandlers() {
  if (const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::snprintf(failure_path, sizeof(failure_path), "%s/fuzz-failure-input",
                  dir);
  }
  if (__sanitizer_set_death_callback != nullptr) {
    __sanitizer_set_death_callback(SaveCurrentInput);
  }
  for (int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    struct sigaction action {};
    action.sa_handler = OnFatalSignal;
    sigemptyset(&action.sa_mask);
    // Sanitizers install their own SEGV handlers first; keep theirs (they
    // call the death callback) by only taking signals nobody handles.
    struct sigaction previous {};
    sigaction(signal, nullptr, &previous);
    if (previous.sa_handler == SIG_DFL) sigaction(signal, &action, nullptr);
  }
}

void RunOne(const std::string& input) {
  current_data = reinterpret_cast<const uint8_t*>(input.data());
  current_size = input.size();
  LLVMFuzzerTestOneInput(current_data, current_size);
  current_data = nullptr;
}

// libFuzzer-like mutations without coverage feedback: bit and byte edits,
// interesting integers, insertions, erasures, duplications, dictionary
// tokens and splices with other inputs, stacked one to four deep.
class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> dictionary, size_t max_size)
      : random_(seed),
        dictionary_(std::move(dictionary)),
        max_size_(max_size) {}

  std::string Mutate(const std::string& base,
                     const std::vector<std::string>& pool) {
    std::string data = base;
    for (int steps = 1 + Below(4); steps > 0; --steps) MutateOnce(&data, pool);
    if (data.size() > max_size_) data.resize(max_size_);
    return data;
  }

  size_t Below(size_t n) { return n == 0 ? 0 : random_() % n; }

 private:
  void MutateOnce(std::string* data, const std::vector<std::string>& pool) {
    static constexpr uint64_t kInteresting[] = {
        0,          1,          2,          7,          8,
        0x7f,       0x80,       0xff,       0x100,      0x7fff,
        0x8000,     0xffff,     0x10000,    0x7fffffff, 0x80000000,
        0xffffffff, 1ull << 32, 1ull << 40, ~0ull >> 1, ~0ull};
    const size_t size = data->size();
    switch (Below(12)) {
      case 0:  // flip a bit
        if (size > 0) (*data)[Below(size)] ^= static_cast<char>(1 << Below(8));
        break;
      case 1:  // random byte
        if (size > 0) (*data)[Below(size)] = static_cast<char>(random_());
        break;
      case 2: {  // an interesting integer, 1, 2, 4 or 8 bytes little-endian
        const size_t width = size_t{1} << Below(4);
        if (size < width) break;
        uint64_t value = kInteresting[Below(std::size(kInteresting))];
        if (Below(2) == 0) value = ~value + 1;  // and its negation
        std::memcpy(&(*data)[Below(size - width + 1)], &value, width);
        break;
      }
      case 3: {  // insert random bytes
        std::string bytes(1 + Below(8), '\0');
        for (char& c : bytes) c = static_cast<char>(random_());
        data->insert(Below(size + 1), bytes);
        break;
      }
      case 4:  // erase a range
        if (size > 0) {
          const size_t at = Below(size);
          data->erase(at, 1 + Below(std::min<size_t>(size - at, 16)));
        }
        break;
      case 5:  // duplicate a range
        if (size > 0) {
          const size_t at = Below(size);
          const std::string piece =
              data->substr(at, 1 + Below(std::min<size_t>(size - at, 64)));
          data->insert(Below(size + 1), piece);
        }
        break;
      case 6:  // insert or overwrite with a dictionary token
      case 7:
        if (!dictionary_.empty()) {
          const std::string& token = dictionary_[Below(dictionary_.size())];
          const size_t at = Below(size + 1);
          if (Below(2) == 0 || at + token.size() > size) {
            data->insert(at, token);
          } else {
            data->replace(at, token.size(), token);
          }
        }
        break;
      case 8:  // splice: our prefix, another input's suffix
        if (!pool.empty()) {
          const std::string& other = pool[Below(pool.size())];
          *data = data->substr(0, Below(size + 1)) +
                  other.substr(Below(other.size() + 1));
        }
        break;
      case 9:  // truncate
        data->resize(Below(size + 1));
        break;
      case 10:  // nudge a byte (lengths, counts, digits)
        if (size > 0) {
          (*data)[Below(size)] += static_cast<char>(Below(2) == 0 ? 1 : -1);
        }
        break;
      default:  // swap two bytes
        if (size > 1) std::swap((*data)[Below(size)], (*data)[Below(size)]);
    }
  }

  std::mt19937_64 random_;
  const std::vector<std::string> dictionary_;
  const size_t max_size_;
};

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10)
                                            : fallback;
}

TEST(FuzzTargetTest, EverySeedIsHandled) {
  const std::vector<std::string> seeds = Seeds();
  ASSERT_FALSE(seeds.empty());
  for (const std::string& seed : seeds) RunOne(seed);
  std::cout << seeds.size() << " seeds\n";
}

TEST(FuzzTargetTest, MutatedSeedsAreHandledWithinTheTimeBudget) {
  const std::vector<std::string> seeds = Seeds();
  ASSERT_FALSE(seeds.empty());
  size_t longest = 0;
  for (const std::string& seed : seeds)
    longest = std::max(longest, seed.size());
  const uint64_t seed = EnvOr("OPENREG_FUZZ_SEED", 1);
  const uint64_t runs = EnvOr("OPENREG_FUZZ_RUNS", 0);
  const char* seconds_env = std::getenv("OPENREG_FUZZ_SECONDS");
  const double seconds =
      seconds_env != nullptr ? std::atof(seconds_env) : fuzz_seconds;
  Mutator mutator(seed, Dictionary(), std::max<size_t>(2 * longest, 256));

  // Mutants are kept now and then so that edits can accumulate.
  std::vector<std::string> pool = seeds;
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(seconds);
  uint64_t executed = 0;
  while (runs != 0 ? executed < runs
                   : std::chrono::steady_clock::now() - start < budget) {
    const std::string input =
        mutator.Mutate(pool[mutator.Below(pool.size())], pool);
    RunOne(input);
    ++executed;
    if (mutator.Below(16) == 0) {
      if (pool.size() < seeds.size() + 512) {
        pool.push_back(input);
      } else {
        pool[seeds.size() + mutator.Below(512)] = input;
      }
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << executed << " mutated inputs in " << elapsed << " s (seed "
            << seed << ")\n";
  EXPECT_GT(executed, 0u);
}

// $OPENREG_FUZZ_WRITE_SEEDS: one file per seed, named by index.
bool WriteSeeds(const char* dir) {
  mkdir(dir, 0755);
  const std::vector<std::string> seeds = Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::string(dir) + "/seed-" + std::to_string(i),
                      std::ios::binary);
    out << seeds[i];
    if (!out) return false;
  }
  std::cout << "wrote " << seeds.size() << " seeds to " << dir << "\n";
  return true;
}

// Runs the inputs in `files`; a failure aborts as during fuzzing.
int RunFiles(const std::vector<std::string>& files) {
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "cannot read " << file << "\n";
      return 1;
    }
    const std::string input((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    RunOne(input);
    std::cout << file << ": handled\n";
  }
  return 0;
}

}  // namespace

void Fail(const char* file, int line, const std::string& message) {
  std::cerr << file << ":" << line << ": " << message << "\n";
  std::abort();  // SIGABRT: the handler saves the input
}

}  // namespace openreg::fuzz

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    static constexpr char kSeconds[] = "--fuzz_seconds=";
    if (std::strncmp(argv[i], kSeconds, sizeof(kSeconds) - 1) == 0) {
      openreg::fuzz::fuzz_seconds = std::atof(argv[i] + sizeof(kSeconds) - 1);
    }
  }
  if (const char* dir = std::getenv("OPENREG_FUZZ_WRITE_SEEDS")) {
    return openreg::fuzz::WriteSeeds(dir) ? 0 : 1;
  }
  openreg::fuzz::InstallFailureHandlers();
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') files.push_back(argv[i]);
  }
  if (!files.empty()) return openreg::fuzz::RunFiles(files);
  return RUN_ALL_TESTS();
}
