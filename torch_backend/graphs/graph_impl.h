// openreg's at::GraphImplInterface (torch.accelerator.Graph,
// torch.openreg.graph; docs/GRAPHS.md). Capture records what the current
// stream would run (openreg/graphs.h), allocations of the capturing
// streams come from a private pool of the caching allocator, and random
// ops draw graph-relative numbers from the generators they use; replay is
// one command on the current stream that runs the daemon's copy.
#ifndef OPENREG_TORCH_BACKEND_GRAPHS_GRAPH_IMPL_H_
#define OPENREG_TORCH_BACKEND_GRAPHS_GRAPH_IMPL_H_

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "openreg/graphs.h"
#include "torch_backend/block_cache.h"
#include "torch_backend/generator.h"

namespace openreg::torch_backend {

class GraphImpl final : public at::GraphImplInterface {
 public:
  explicit GraphImpl(const at::GraphImplArgs& args);
  ~GraphImpl() override;

  void capture_begin(at::MempoolId_t pool,
                     at::GraphCaptureMode capture_mode) override;
  void capture_end() override;
  // The daemon's graph is ready when capture_end returns.
  void instantiate() override;
  void replay() override;
  void reset() override;
  at::MempoolId_t pool() const override;
  void enable_debug_mode() override;
  // Writes the daemon's description of the recorded commands.
  void debug_dump(const std::string& path) override;

  // A random op recorded by this capture draws from `generator`: it is
  // registered with the graph (from now on each replay takes one draw of
  // it and advances it by the capture's whole increment) and the op gets
  // an offset relative to the replay's draw.
  GeneratorDraw RecordDraw(GeneratorImpl* generator);

 private:
  struct RegisteredGenerator {
    c10::intrusive_ptr<c10::GeneratorImpl> generator;
    uint64_t increment = 0;  // offsets the capture used
  };

  void CheckNoGraph(const char* call) const;

  c10::DeviceIndex device_ = -1;
  StreamId capture_stream_ = 0;
  uint64_t capture_id_ = 0;
  GraphId graph_ = 0;
  PoolId pool_ = 0;
  bool holds_pool_ = false;
  bool debug_mode_ = false;
  std::mutex mutex_;  // guards generators_ (captured ops on any thread)
  std::vector<RegisteredGenerator> generators_;
};

// Registers GraphImpl for PrivateUse1 under its current backend name
// (c10::DeviceTypeName), once the name is set (torch_openreg's import).
void RegisterGraphImpl();

// The graph pool handle of torch.openreg.graph_pool_handle(): a pool id
// no graph holds yet (graphs that capture into it share it).
PoolId NewGraphPoolId();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_GRAPHS_GRAPH_IMPL_H_
