"""Memory management of openreg devices, shaped like torch.cuda's.

Statistics come from this process's caching allocator (what its tensors
hold and what it keeps reserved); mem_get_info asks the daemon, so it also
counts other clients' memory. The same numbers are available through
torch.accelerator.* when openreg is the current accelerator.
"""

import atexit
import collections
import contextlib
import pickle
import sys
import warnings

import torch

from torch_openreg import _C

__all__ = [
    "MemPool",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "empty_cache",
    "get_allocator_backend",
    "host_memory_stats",
    "list_gpu_processes",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "use_mem_pool",
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


def reset_max_memory_allocated(device=None):
    """As torch.cuda's: resets every peak statistic (FutureWarning says
    so, as on CUDA)."""
    warnings.warn(
        "torch.openreg.reset_max_memory_allocated now calls "
        "torch.openreg.reset_peak_memory_stats, which resets /all/ peak "
        "memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None):
    """As torch.cuda's: resets every peak statistic (FutureWarning says
    so, as on CUDA)."""
    warnings.warn(
        "torch.openreg.reset_max_memory_cached now calls "
        "torch.openreg.reset_peak_memory_stats, which resets /all/ peak "
        "memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def get_allocator_backend():
    """"native": this package's caching allocator (torch_backend/
    block_cache.cc), the only one openreg has (no cudaMallocAsync
    counterpart)."""
    return "native"


def host_memory_stats():
    """Statistics of the pinned host memory allocator (the same
    CachingHostAllocator CUDA uses), flattened and sorted like
    torch.cuda.host_memory_stats(): "allocated_bytes.current",
    "num_host_alloc", "host_alloc_time.avg", ..."""
    result = []

    def flatten(prefix, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, inner)
        else:
            result.append((prefix, value))

    flatten("", _C._host_memory_stats())
    result.sort()
    return collections.OrderedDict(result)


def caching_allocator_alloc(size, device=None, stream=None):
    """`size` bytes from openreg's caching allocator on `device` (default:
    current) for use on `stream` (a torch.openreg.Stream or its
    ``stream_id``; default: the device's current stream). Returns the
    address as an int; free it with :func:`caching_allocator_delete`."""
    from torch_openreg.openreg import streams

    index = _index(device)
    if stream is None:
        stream = streams.current_stream(index)
    if isinstance(stream, torch.Stream):
        if stream.device.type != "openreg" or stream.device_index != index:
            raise ValueError(
                f"caching_allocator_alloc: the stream is on {stream.device}, "
                f"not on openreg:{index}; pass a stream of that device")
        stream = stream.stream_id
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise TypeError(
            "caching_allocator_alloc: stream must be a torch.openreg.Stream "
            f"or an int stream id, got {type(stream).__name__}")
    return _C._caching_allocator_alloc(int(size), index, stream)


def caching_allocator_delete(mem_ptr):
    """Frees memory from :func:`caching_allocator_alloc` (the allocator
    remembers its device and stream)."""
    _C._caching_allocator_delete(int(mem_ptr))


class MemPool:
    """A private pool of openreg's caching allocator, as torch.cuda.MemPool:
    allocations made inside :func:`use_mem_pool` (on that thread and
    device) come from segments of this pool only, and their blocks, once
    freed, are reused only by allocations in the pool. When the MemPool is
    deleted, the pool's free segments go back to the daemon (the rest once
    freed, at the next ``empty_cache()``).

    `id` is ``(0, n)``, the form of torch.cuda's user pools, and is the
    ``segment_pool_id`` of the pool's segments in snapshots. Custom
    allocators, ``use_on_oom`` and ``no_split`` are refused: openreg has
    no pluggable allocator and no fallback or no-split pools."""

    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        for name, value, default in (("allocator", allocator, None),
                                     ("use_on_oom", use_on_oom, False),
                                     ("no_split", no_split, False)):
            if value != default:
                raise NotImplementedError(
                    f"torch.openreg.MemPool({name}={value!r}): openreg's "
                    "caching allocator has private pools but no pluggable "
                    "allocators, out-of-memory fallback pools or no-split "
                    f"pools; create the pool without {name}")
        self._pool = _C._mem_pool_create()
        self._uses = 0

    @property
    def id(self):
        return (0, self._pool)

    @property
    def allocator(self):
        return None

    def use_count(self):
        """1 for this object plus one per :func:`use_mem_pool` block
        currently routing allocations to the pool."""
        return 1 + self._uses

    def snapshot(self, include_traces=True):
        """The segments of this pool (:func:`memory_snapshot`)."""
        return memory_snapshot(self.id, include_traces=include_traces)

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None and _C is not None:
            _C._mem_pool_release(pool)


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    """Routes this thread's allocations on `device` (default: current) to
    `pool` inside the block, as torch.cuda.use_mem_pool. Other threads
    (autograd's backward thread too) keep the default pool."""
    if not isinstance(pool, MemPool):
        raise TypeError("use_mem_pool: expected a torch.openreg.MemPool, "
                        f"got {type(pool).__name__}")
    index = _index(device)
    previous = _C._mem_pool_set_thread_pool(index, pool._pool)
    pool._uses += 1
    try:
        yield
    finally:
        pool._uses -= 1
        _C._mem_pool_set_thread_pool(index, previous)


def _format_size(size, preferred):
    prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if preferred < 768 * 1024:
            break
        prefix = new_prefix
        size //= 1024
        preferred /= 1024
    return f"{size:6d} {prefix}"


def _format_count(count, preferred):
    prefixes = [" ", "K", "M"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if preferred < 750 * 1000:
            break
        prefix = new_prefix
        count //= 1000
        preferred /= 1000
    return f"{count:7d} {prefix} "


def memory_summary(device=None, abbreviated=False):
    """A printable table of the allocator's statistics for `device`, laid
    out as torch.cuda.memory_summary's (current, peak, total allocated and
    freed of each statistic, for all blocks and for the large and small
    pools)."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "Reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "Reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    title = f"PyTorch openreg memory summary, device ID {index}"
    ooms = f"openreg OOMs: {stats.get('num_ooms', 0)}"
    retries = f"daemon malloc retries: {stats.get('num_alloc_retries', 0)}"
    lines = ["=" * 75, f"{title:^75}", "-" * 75,
             f"{ooms:^37}|{retries:^37}", "=" * 75,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  "
             "| Tot Freed  "]
    for key, name, formatter in rows:
        lines.append("-" * 75)
        pools = [("all", name)]
        if not abbreviated:
            pools += [("large_pool", "      from large pool"),
                      ("small_pool", "      from small pool")]
        preferred = None
        for pool, label in pools:
            values = [stats.get(f"{key}.{pool}.{kind}", 0)
                      for kind in ("current", "peak", "allocated", "freed")]
            if preferred is None:
                preferred = values
            cells = " | ".join(formatter(v, p)
                               for v, p in zip(values, preferred))
            lines.append(f" {label:<21} | {cells} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


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


def _checked_index(device):
    """_index(device), refused with a ValueError naming the devices there
    are when the daemon has no such device."""
    from torch_openreg import openreg

    index = _index(device)
    count = openreg.device_count()
    if not 0 <= index < count:
        raise ValueError(f"openreg device {index} does not exist: the daemon "
                         f"has {count} (0-{count - 1})")
    return index


def list_gpu_processes(device=None):
    """The processes holding memory on the device, as torch.cuda's: "GPU:0"
    then one line per process ("process 1234 uses 20.000 MB GPU memory"),
    read from the daemon (openreg-ctl sessions), which sees every client."""
    import json
    import subprocess

    import torch_openreg

    index = _checked_index(device)
    done = subprocess.run(
        [torch_openreg.ctl_binary(), "--json",
         f"--socket={_C._daemon_socket_path()}", "sessions"],
        capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"list_gpu_processes: {done.stderr.strip()}")
    lines = [f"GPU:{index}"]
    for session in json.loads(done.stdout)["sessions"]:
        for usage in session["devices"]:
            used = int(usage["allocated_bytes"])
            if usage["device"] == index and used > 0:
                lines.append(f"process {session['pid']:>10d} uses "
                             f"{used / (1024 * 1024):12.3f} MB GPU memory")
    if len(lines) == 1:
        lines.append("no processes are running")
    return "\n".join(lines)


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
    """The segments of :func:`_snapshot` (torch.cuda.memory_snapshot); of
    one private pool's with `mempool_id` (a MemPool's ``id``)."""
    del include_traces
    segments = _snapshot()["segments"]
    if mempool_id is None:
        return segments
    wanted = tuple(mempool_id)
    return [s for s in segments if tuple(s["segment_pool_id"]) == wanted]
