#include "torch_backend/launch_settings.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/graph_task.h>

namespace openreg::torch_backend {

op_codec::KernelSettings LaunchSettings() {
  // -1 outside a backward pass (the forward, the main thread).
  const int graph_task = torch::autograd::get_current_graph_task_id();
  thread_local int synced_graph_task = -1;
  if (graph_task != -1 && graph_task != synced_graph_task) {
    at::init_num_threads();
    synced_graph_task = graph_task;
  }
  return op_codec::CurrentKernelSettings();
}

}  // namespace openreg::torch_backend
