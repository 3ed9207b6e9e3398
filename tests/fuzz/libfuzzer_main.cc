// What a fuzz target needs besides itself under libFuzzer (`make fuzz`,
// --config=fuzz): Fail() and, with $OPENREG_FUZZ_WRITE_SEEDS=DIR, writing
// the target's seeds to DIR (the starting corpus) instead of fuzzing.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace openreg::fuzz {

void Fail(const char* file, int line, const std::string& message) {
  std::cerr << file << ":" << line << ": " << message << "\n";
  std::abort();  // libFuzzer saves the input as crash-<sha1>
}

}  // namespace openreg::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const char* dir = std::getenv("OPENREG_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return 0;
  mkdir(dir, 0755);
  const std::vector<std::string> seeds = openreg::fuzz::Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::string(dir) + "/seed-" + std::to_string(i),
                      std::ios::binary);
    out << seeds[i];
  }
  {
    // libFuzzer's dictionary format: one quoted token per line, \xNN
    // escapes. (Scoped: std::exit below skips local destructors.)
    std::ofstream dictionary(std::string(dir) + ".dict");
    for (const std::string& token : openreg::fuzz::Dictionary()) {
      dictionary << '"';
      for (unsigned char c : token) {
        static constexpr char kHex[] = "0123456789abcdef";
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
          dictionary << c;
        } else {
          dictionary << "\\x" << kHex[c >> 4] << kHex[c & 15];
        }
      }
      dictionary << "\"\n";
    }
  }
  std::cout << "wrote " << seeds.size() << " seeds to " << dir << "\n";
  std::exit(0);
}
