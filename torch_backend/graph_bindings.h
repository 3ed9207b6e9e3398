// torch_openreg._C's graph functions (torch.openreg.graphs): the graph
// implementation's registration and the capture queries of torch.cuda's
// shapes (docs/GRAPHS.md).
#ifndef OPENREG_TORCH_BACKEND_GRAPH_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_GRAPH_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterGraphBindings(pybind11::module& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_GRAPH_BINDINGS_H_
