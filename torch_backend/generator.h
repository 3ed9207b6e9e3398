// openreg random number generators. Like CUDA's Philox generator, an
// openreg generator is just (seed, offset) and lives in the client: every
// random op takes one "draw" -- the current (seed, offset) travels with the
// op and the offset advances -- and the daemon derives a fresh CPU engine
// from the pair for that op alone. Results therefore depend only on the
// seed and on how many random ops came before, never on the daemon's state
// (a restarted daemon reproduces them), and successive ops differ.
#ifndef OPENREG_TORCH_BACKEND_GENERATOR_H_
#define OPENREG_TORCH_BACKEND_GENERATOR_H_

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace openreg::torch_backend {

// The (seed, offset) one random op runs with.
struct GeneratorDraw {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Drawn while a graph captured: 0 for a fixed draw; k > 0 for the
  // graph's k-th registered generator, `offset` then being relative to the
  // replay's draw (proto GeneratorState.graph_generator).
  uint32_t graph_generator = 0;
};

class GeneratorImpl final : public c10::GeneratorImpl {
 public:
  // Bytes of get_state(): the seed, then the offset (native endianness),
  // the same layout as CUDA's Philox state.
  static constexpr int64_t kStateBytes = 16;

  explicit GeneratorImpl(c10::DeviceIndex device,
                         uint64_t seed = c10::default_rng_seed_val);

  // Callers hold mutex_ for the methods below (as torch's Python bindings
  // do), per Note [Acquire lock when using random generators].
  void set_current_seed(uint64_t seed) override;  // also resets the offset
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;  // reseeds nondeterministically
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  GeneratorImpl* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of openreg device `device` (created on first use,
// seeded with c10::default_rng_seed_val as CUDA's are). Never contacts the
// daemon, so seeding all devices is cheap and works before connecting.
const at::Generator& DefaultGenerator(c10::DeviceIndex device);

// Takes one draw for a random op on `device`: from `generator`, or from the
// device's default generator when `generator` is undefined. Thread safe.
// While the current stream of `device` captures a graph, the draw is
// graph-relative (graphs/capture_registry.h) and the generator does not
// advance until the graph is replayed.
// Throws when `generator` is not an openreg generator (CUDA's message).
GeneratorDraw TakeDraw(const at::Generator& generator, c10::DeviceIndex device);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_GENERATOR_H_
