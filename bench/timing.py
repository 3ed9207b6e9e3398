"""Timing shared by every benchmark section.

The machine is small and shared: its speed drifts by up to 2x over seconds.
A baseline and the openreg figure it is compared with are therefore
measured in alternating rounds, and each side's best round is kept, so
both see the same machine.
"""

import time


def no_sync():
    pass


def per_call(fn, repeats, sync=no_sync):
    """Seconds per call of fn() over `repeats` back-to-back calls, then one
    sync (throughput: asynchronous work is pipelined, as in real code)."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - start) / repeats


def single_call(fn, repeats, sync=no_sync):
    """Seconds of one synchronized call of fn() (latency), best of
    `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def compare(baseline, device, repeats, rounds=5, measure=per_call,
            baseline_sync=no_sync, device_sync=no_sync):
    """(baseline seconds, device seconds) per call: `rounds` alternating
    rounds of `measure` on each side after an untimed warm-up round (caches,
    lazily created streams and threads), best round each."""
    measure(baseline, repeats, baseline_sync)
    measure(device, repeats, device_sync)
    baseline_best = device_best = float("inf")
    for _ in range(rounds):
        baseline_best = min(baseline_best,
                            measure(baseline, repeats, baseline_sync))
        device_best = min(device_best, measure(device, repeats, device_sync))
    return baseline_best, device_best
