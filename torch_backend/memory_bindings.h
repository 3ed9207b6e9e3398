// The _C functions behind torch.openreg.memory's history and snapshots
// (_record_memory_history, _snapshot), caching_allocator_alloc / _delete
// and host_memory_stats (python/torch_openreg/openreg/memory.py).
#ifndef OPENREG_TORCH_BACKEND_MEMORY_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_MEMORY_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterMemoryBindings(pybind11::module& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_MEMORY_BINDINGS_H_
