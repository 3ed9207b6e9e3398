// Per-device default generators for openreg. For now the generator lives in
// the client and its state does not travel with random ops: the daemon draws
// from its own CPU generator (see docs/ARCHITECTURE.md, known gaps).
#ifndef OPENREG_TORCH_BACKEND_GENERATOR_H_
#define OPENREG_TORCH_BACKEND_GENERATOR_H_

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace openreg::torch_backend {

class GeneratorImpl : public at::CPUGeneratorImpl {
 public:
  explicit GeneratorImpl(c10::DeviceIndex device);
};

const at::Generator& DefaultGenerator(c10::DeviceIndex device);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_GENERATOR_H_
