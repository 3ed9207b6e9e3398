"""Memory management of openreg devices, shaped like torch.cuda's.

Statistics come from this process's caching allocator (what its tensors
hold and what it keeps reserved); mem_get_info asks the daemon, so it also
counts other clients' memory. The same numbers are available through
torch.accelerator.* when openreg is the current accelerator.
"""

import torch

from torch_openreg import _C

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
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
