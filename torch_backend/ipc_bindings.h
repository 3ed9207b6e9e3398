// The _C functions behind torch_openreg's torch.multiprocessing support
// (python/torch_openreg/openreg/ipc.py): sharing a storage's memory through
// an IPC handle, opening one as a storage, collecting shared blocks.
#ifndef OPENREG_TORCH_BACKEND_IPC_BINDINGS_H_
#define OPENREG_TORCH_BACKEND_IPC_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace openreg::torch_backend {

void RegisterIpcBindings(pybind11::module& module);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_IPC_BINDINGS_H_
