// Random ring commands for fuzzing the daemon's data plane: real ATen op
// launches with arguments that mostly follow each op's signature (then get
// mutated), tensors that mostly fit in the given buffers, copies, memsets,
// events, waits that can finish, and bytes that do not parse. Used by
// command_fuzz_test (real ATen kernels) and, as the seeds of its corpus, by
// the byte-level command record fuzzer (tests/fuzz).
#ifndef OPENREG_TESTS_CPP_COMMAND_GENERATOR_H_
#define OPENREG_TESTS_CPP_COMMAND_GENERATOR_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "protos/commands.pb.h"

namespace openreg {

class CommandGenerator {
 public:
  // `buffers` are device addresses of `buffer_bytes` each that commands
  // mostly point into (at least one).
  CommandGenerator(uint32_t seed, std::vector<uint64_t> buffers,
                   uint64_t buffer_bytes);

  // An op launch (most kinds of arguments, in-place and synchronous).
  proto::Command Launch();
  // A copy, memset, event record, stream wait or empty command.
  proto::Command Other();
  // Bytes that do not parse as a Command (tag 0 is invalid), so that the
  // record fails as "malformed" instead of faulting the stream as a
  // command with the wrong sequence.
  std::string Garbage();
  uint32_t Next() { return random_(); }

 private:
  int64_t SmallInt();
  uint64_t Address();
  proto::TensorRef Tensor();
  // A view that fits inside one of the buffers, of `dtype`.
  proto::TensorRef ValidTensor(int32_t dtype);
  proto::Argument FromSignature(char code);
  proto::Scalar Scalar();
  proto::Argument Argument(int depth = 0);

  std::mt19937 random_;
  std::vector<uint64_t> buffers_;
  uint64_t buffer_bytes_;
};

}  // namespace openreg

#endif  // OPENREG_TESTS_CPP_COMMAND_GENERATOR_H_
