// torch_openreg._C's compiled-module functions (openreg/modules.h), which
// torch_openreg's Inductor backend uses (docs/COMPILE.md): load a kernel
// library into the daemon, unload it, launch its entry on the current
// stream with tensors and scalars.
#ifndef OPENREG_TORCH_BACKEND_MODULE_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_MODULE_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterModuleBindings(pybind11::module& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_MODULE_BINDINGS_H_
