// The _C functions behind torch_openreg.faults (fault injection): protos
// cross into Python as JSON text, which the Python module turns into
// typed objects.
#ifndef OPENREG_TORCH_BACKEND_FAULT_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_FAULT_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterFaultBindings(pybind11::module& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_FAULT_BINDINGS_H_
