"""Memory management of openreg devices, shaped like torch.cuda's.

Statistics come from this process's caching allocator (what its tensors
hold and what it keeps reserved); mem_get_info asks the daemon, so it also
counts other clients' memory. The same numbers are available through
torch.accelerator.* when openreg is the current accelerator.
"""

import atexit
import pickle
import sys

import torch

from torch_openreg import _C

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
]


def _index(device):
    # The package's one device-argument rule (torch_openreg.openreg._index);
    # looked up at call time because this module is imported by it.
    from torch_openreg import openreg

    return openreg._index(device)


def memory_stats(device=None):
    """A dict of allocator statistics ("allocated_bytes.all.current", ...)
    as torch.cuda.memory_stats returns."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    """Bytes held by this process's tensors on the device."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    """Bytes this process holds from the daemon (tensors + cache)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    """Returns every fully free cached segment to the daemon."""
    torch.accelerator.empty_cache()


def mem_get_info(device=None):
    """(free, total) bytes of the device as the daemon sees them, including
    memory held by other clients."""
    return _C._mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction, device=None):
    """Caps what this process may reserve on the device at
    fraction * total memory; beyond it allocations raise OutOfMemoryError."""
    _C._set_memory_fraction(float(fraction), _index(device))


# ---- History and snapshots (torch.cuda.memory's private API) -------------

_CONTEXTS = (None, "state", "alloc", "all")
_ENABLED = (None, "state", "all")
_STACKS = ("python", "all")
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc",
            "segment_free", "oom")
_atexit_registered = False


def _record_memory_history(enabled="all", context="all", stacks="all",
                           max_entries=sys.maxsize, device=None,
                           clear_history=False, skip_actions=None, **kwargs):
    """As torch.cuda.memory._record_memory_history: records who allocated
    each live block and, with `enabled="all"`, the last `max_entries`
    alloc / free / segment events of every openreg device, for
    :func:`_snapshot` and PyTorch's memory visualizer.

    enabled: None stops recording, "state" keeps only the stacks of live
    blocks, "all" also keeps the event history. context: which events get
    a stack (None, "state": live blocks only, "alloc": also alloc events,
    "all": also free events). stacks: "python", or "all" to add C++
    frames (slower). `device` is accepted for compatibility: every device
    is recorded, as on CUDA. torch.cuda's other options (compile_context,
    global_record_annotations) have no effect here."""
    del device
    if isinstance(enabled, bool):  # torch.cuda's older form
        enabled = "all" if enabled else None
    unknown = set(kwargs) - {"compile_context", "global_record_annotations"}
    if unknown:
        raise TypeError("_record_memory_history: unexpected argument(s) "
                        f"{sorted(unknown)}")
    if enabled not in _ENABLED:
        raise ValueError(f"_record_memory_history: enabled={enabled!r}; "
                         f"expected one of {_ENABLED}")
    if context not in _CONTEXTS:
        raise ValueError(f"_record_memory_history: context={context!r}; "
                         f"expected one of {_CONTEXTS}")
    if stacks not in _STACKS:
        raise ValueError(f"_record_memory_history: stacks={stacks!r}; "
                         f"expected one of {_STACKS}")
    if not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError("_record_memory_history: max_entries must be a "
                         f"non-negative int, got {max_entries!r}")
    skip = 0
    for action in skip_actions or ():
        if action not in _ACTIONS:
            raise ValueError(f"_record_memory_history: unknown action "
                             f"{action!r} in skip_actions; expected some of "
                             f"{_ACTIONS}")
        skip |= 1 << _ACTIONS.index(action)
    frames = enabled is not None and context is not None
    _C._record_memory_history(
        frames=frames, cpp_frames=stacks == "all",
        frames_on_blocks=True,
        frames_on_alloc=context in ("alloc", "all"),
        frames_on_free=context == "all",
        record_trace=enabled == "all",
        max_entries=min(max_entries, 2**63 - 1),
        clear=bool(clear_history), skip_actions=skip)
    global _atexit_registered
    if frames and not _atexit_registered:
        # Tensors freed while the interpreter shuts down must not try to
        # capture Python frames.
        atexit.register(_stop_recording_at_exit)
        _atexit_registered = True


def _stop_recording_at_exit():
    _C._record_memory_history(
        frames=False, cpp_frames=False, frames_on_blocks=False,
        frames_on_alloc=False, frames_on_free=False, record_trace=False,
        max_entries=0, clear=True, skip_actions=0)


def _device_count():
    # Without a daemon nothing was ever allocated: an empty snapshot.
    from torch_openreg import openreg

    return openreg.device_count() if openreg.is_initialized() else 0


def _snapshot(device=None):
    """The allocator's state and recorded history in
    torch.cuda.memory._snapshot()'s format: "segments" (address,
    total_size, stream, segment_type, device, blocks with address, size,
    requested_size, state and frames) and "device_traces" (per device,
    events with action, addr, size, stream, time_us and frames). Every
    device is included, as on CUDA (`device` is accepted for
    compatibility)."""
    del device
    return _C._memory_snapshot(_device_count())


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickles :func:`_snapshot` to `filename`, for
    https://pytorch.org/memory_viz or
    ``python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html``."""
    snapshot = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


def memory_snapshot(mempool_id=None, include_traces=True):
    """The segments of :func:`_snapshot` (torch.cuda.memory_snapshot)."""
    if mempool_id is not None:
        raise NotImplementedError(
            "memory_snapshot(mempool_id=...): openreg's caching allocator "
            "has no private memory pools; call memory_snapshot() without it")
    del include_traces
    return _snapshot()["segments"]
