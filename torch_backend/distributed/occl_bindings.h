// torch_openreg._C._occl_init(): binds ProcessGroupOCCL as a subclass of
// torch's c10d Backend. Called by torch_openreg.distributed after
// torch.distributed is imported (which registers the Backend class that
// pybind11 must find first).
#ifndef OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterOcclBindings(pybind11::module_& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_BINDINGS_H_
