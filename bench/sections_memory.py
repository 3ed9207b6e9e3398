"""Memory benchmarks: host <-> device copy bandwidth (pageable and pinned)
against a plain host memcpy of the same size in the same run, and the cost
of a device allocation without the caching allocator against a cache hit.
"""

import ctypes

from timing import compare, single_call

COPY_BYTES = 64 << 20
ALLOC_BYTES = 1 << 20


def copy_bandwidth(torch, scale):
    repeats = max(1, int(4 * scale))
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

    def versus_memcpy(name, copy):
        # Copies are bound by memory bandwidth, which other processes on a
        # small machine disturb: both sides are taken at their best call.
        return (name, "memcpy") + compare(
            plain_memcpy, copy, repeats, measure=single_call,
            device_sync=sync)

    label = f"{COPY_BYTES >> 20} MiB"
    rows = [
        versus_memcpy(f"H2D {label} pageable", lambda: device.copy_(host_a)),
        versus_memcpy(f"D2H {label} pageable", lambda: host_b.copy_(device)),
    ]
    pinned_a = torch.ones(count).pin_memory()
    pinned_b = torch.zeros(count, pin_memory=True)
    rows += [
        versus_memcpy(f"H2D {label} pinned (non_blocking)",
                      lambda: device.copy_(pinned_a, non_blocking=True)),
        versus_memcpy(f"D2H {label} pinned (non_blocking)",
                      lambda: pinned_b.copy_(device, non_blocking=True)),
    ]
    return rows


def allocation_cost(torch, scale):
    repeats = max(20, int(100 * scale))
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
        (f"device alloc {label} no cache (empty_cache)", "cache hit") +
        compare(cached, uncached, repeats, baseline_sync=sync,
                device_sync=sync),
        (f"pinned host alloc {label} (cached)", "CPU empty") +
        compare(pageable, pinned, repeats),
    ]


SECTIONS = [copy_bandwidth, allocation_cost]
