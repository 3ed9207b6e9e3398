"""Memory benchmarks: host <-> device copy bandwidth (pageable and pinned)
against a plain host memcpy of the same size in the same run, and the cost
of a device allocation without the caching allocator against a cache hit.
"""

import ctypes
import time

COPY_BYTES = 64 << 20
ALLOC_BYTES = 1 << 20


def _per_call(fn, repeats, sync):
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - start) / repeats


def _best_call(fn, repeats, sync):
    """Fastest single call of fn() (synchronized): copies are bound by
    memory bandwidth, which other processes on a small machine disturb, so
    baseline and openreg are both taken at their best."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def copy_bandwidth(torch, scale):
    repeats = max(3, int(20 * scale))
    sync = torch.openreg.synchronize
    count = COPY_BYTES // 4
    # Every buffer is touched first, so that no figure includes first-touch
    # page faults.
    host_a = torch.ones(count)
    host_b = torch.zeros(count)
    device = torch.empty(count, device="openreg")
    device.fill_(1.0)
    sync()

    def plain_memcpy():
        ctypes.memmove(host_b.data_ptr(), host_a.data_ptr(), COPY_BYTES)

    memcpy_time = _best_call(plain_memcpy, repeats, lambda: None)
    label = f"{COPY_BYTES >> 20} MiB"
    rows = [
        (f"H2D {label} pageable", "memcpy", memcpy_time,
         _best_call(lambda: device.copy_(host_a), repeats, sync)),
        (f"D2H {label} pageable", "memcpy", memcpy_time,
         _best_call(lambda: host_b.copy_(device), repeats, sync)),
    ]
    pinned_a = torch.ones(count).pin_memory()
    pinned_b = torch.zeros(count, pin_memory=True)
    rows += [
        (f"H2D {label} pinned (non_blocking)", "memcpy", memcpy_time,
         _best_call(lambda: device.copy_(pinned_a, non_blocking=True),
                    repeats, sync)),
        (f"D2H {label} pinned (non_blocking)", "memcpy", memcpy_time,
         _best_call(lambda: pinned_b.copy_(device, non_blocking=True),
                    repeats, sync)),
    ]
    return rows


def allocation_cost(torch, scale):
    repeats = max(20, int(500 * scale))
    sync = torch.openreg.synchronize
    count = ALLOC_BYTES // 4

    def cached():
        torch.empty(count, device="openreg")

    def uncached():
        # empty_cache() returns the freed block to the daemon, so the next
        # allocation misses the cache and asks the daemon (Malloc, gRPC).
        torch.openreg.empty_cache()
        torch.empty(count, device="openreg")

    def pinned():
        torch.empty(count, pin_memory=True)

    def pageable():
        torch.empty(count)

    label = f"{ALLOC_BYTES >> 20} MiB"
    return [
        (f"device alloc {label} no cache (empty_cache)", "cache hit",
         _per_call(cached, repeats, sync), _per_call(uncached, repeats, sync)),
        (f"pinned host alloc {label} (cached)", "CPU empty",
         _per_call(pageable, repeats, lambda: None),
         _per_call(pinned, repeats, lambda: None)),
    ]


SECTIONS = [copy_bandwidth, allocation_cost]
