"""openreg tensors across processes: torch.multiprocessing (Queue, Pipe,
Process arguments, share_memory) carries them by IPC handle, as it carries
CUDA tensors: the receiver maps the same device memory, no copy.

How it differs from CUDA (docs/ARCHITECTURE.md, "Sharing device memory"):
- The sender synchronizes the tensor's stream before sending, instead of
  sending an event: the receiver's first read sees every write queued
  before the send. To order later work between processes without blocking
  the host, share a torch.openreg.Event(interprocess=True) (events pickle
  by IPC handle, as CUDA's do).
- The daemon counts who has the memory open, so the data stays valid while
  any receiver holds it, even after the sender freed it or exited; the
  sender's caching allocator reuses a shared block only once no receiver
  holds it (checked by ipc_collect() and before the cache grows).

Installed when torch_openreg loads: only openreg tensors and storages take
this path; every other tensor keeps PyTorch's own reducers.
"""

from multiprocessing.reduction import ForkingPickler

import torch

from torch_openreg import _C

__all__ = ["ipc_collect"]

# Storages of this process by handle, weakly: the ones it shared (a handle
# that comes back to its exporter is its own storage, as CUDA's
# shared_cache does) and the ones it opened (a storage received twice is
# opened once).
_storages = {}


def ipc_collect():
    """Returns freed device blocks that were shared with other processes,
    and that no process holds open any more, to the caching allocator
    (torch.cuda.ipc_collect). Returns how many are still held elsewhere."""
    return _C._ipc_collect()


def _share(storage):
    """(handle, nbytes, device index) of an openreg UntypedStorage."""
    device = storage.device.index or 0
    # The receiver reads directly: everything queued on the storage's
    # device before the send must have run.
    torch.openreg.synchronize(device)
    if storage.nbytes() == 0:
        return b"", 0, device
    handle = _C._ipc_share(storage.data_ptr(), device)
    _remember(handle, storage)
    return handle, storage.nbytes(), device


def _remember(handle, storage):
    import weakref

    for stale in [key for key, ref in _storages.items() if ref() is None]:
        del _storages[stale]
    _storages[handle] = weakref.ref(storage)


def _open_storage(handle, nbytes, device):
    if nbytes == 0:
        return torch.UntypedStorage(0, device=torch.device("openreg", device))
    known = _storages.get(handle)
    storage = known() if known is not None else None
    if storage is None:
        storage = _C._ipc_open(handle, nbytes, device)
        _remember(handle, storage)
    return storage


def _rebuild_tensor(cls, size, stride, offset, dtype, requires_grad, handle,
                    nbytes, device):
    storage = _open_storage(handle, nbytes, device)
    tensor = torch.empty((0,), dtype=dtype,
                         device=torch.device("openreg", device))
    tensor.set_(storage, offset, size, stride)
    if cls is torch.nn.parameter.Parameter:
        # As rebuild_cuda_tensor: a Parameter keeps its requires_grad.
        tensor = torch.nn.parameter.Parameter(tensor,
                                              requires_grad=requires_grad)
    else:
        tensor.requires_grad_(requires_grad)
    return tensor


def _rebuild_storage(handle, nbytes, device):
    return _open_storage(handle, nbytes, device)


# Interprocess events of this process by handle, weakly: an event whose
# handle comes back to its exporter is the exporter's own event (the daemon
# refuses to open one's own handle), and one received twice is opened once.
_events = {}


def _reduce_event(event):
    handle = event.ipc_handle()
    _remember_event(handle, event)
    return (_rebuild_event, (event.device.index, handle))


def _remember_event(handle, event):
    import weakref

    for stale in [key for key, ref in _events.items() if ref() is None]:
        del _events[stale]
    _events[handle] = weakref.ref(event)


def _rebuild_event(device, handle):
    known = _events.get(handle)
    event = known() if known is not None else None
    if event is None:
        event = torch.openreg.Event.from_ipc_handle(device, handle)
        _remember_event(handle, event)
    return event


def _openreg_reducer(original):
    def reduce_tensor(tensor):
        if tensor.device.type != "openreg":
            return original(tensor)
        if tensor.requires_grad and not tensor.is_leaf:
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which "
                "requires_grad, since autograd does not support crossing "
                "process boundaries.  If you just want to transfer the data, "
                "call detach() on the tensor before serializing (e.g., "
                "putting it on the queue).")
        if tensor.layout != torch.strided or tensor.is_quantized:
            raise NotImplementedError(
                "openreg: only strided, non-quantized tensors can be shared "
                f"between processes, not a {tensor.layout} tensor")
        handle, nbytes, device = _share(tensor.untyped_storage())
        return (_rebuild_tensor,
                (type(tensor), tensor.size(), tensor.stride(),
                 tensor.storage_offset(), tensor.dtype, tensor.requires_grad,
                 handle, nbytes, device))
    return reduce_tensor


def _storage_reducer(original):
    def reduce_storage(storage):
        if storage.device.type != "openreg":
            return original(storage)
        return (_rebuild_storage, _share(storage))
    return reduce_storage


def install():
    """Registers the openreg reducers in front of PyTorch's."""
    import torch.multiprocessing.reductions  # noqa: F401  (its reducers first)

    reducers = ForkingPickler._extra_reducers
    tensor_classes = set(torch._tensor_classes) | {
        torch.Tensor, torch.nn.parameter.Parameter}
    for cls in tensor_classes:
        original = reducers.get(cls)
        if original is not None and not getattr(original, "_openreg", False):
            wrapped = _openreg_reducer(original)
            wrapped._openreg = True
            ForkingPickler.register(cls, wrapped)
    ForkingPickler.register(torch.openreg.Event, _reduce_event)
    original = reducers.get(torch.UntypedStorage)
    if original is not None and not getattr(original, "_openreg", False):
        wrapped = _storage_reducer(original)
        wrapped._openreg = True
        ForkingPickler.register(torch.UntypedStorage, wrapped)
