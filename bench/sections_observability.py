"""Observability costs. The profiler: small-op throughput (torch.add of
1024 floats on openreg, a synchronize every 50 ops) while torch.profiler
records the device timeline, against the same loop under a CPU-only
profile (what openreg's device recording adds; the issue's bar: >= 0.9x
throughput, a time ratio <= 1.11x) and against no profiler at all (what
profiling costs in total, most of it torch's own per-op recording).

`openreg-smi`: how long it takes to answer with 64
client processes attached (the issue's bar: <= 50 ms), against the same
command with no client and against starting a trivial program (/bin/true),
all in the same run. Whole commands are timed, as a user waits for them:
process start, the two control calls, formatting.

Clients are forked from a forkserver that imported torch; each attaches,
allocates 1 MiB on openreg:0 and holds it until the measurement ends.
"""

import statistics
import subprocess
import time

import multiprocessing as mp

import torch_openreg

CLIENTS = 64


def profiler_cost(torch, scale):
    from torch.profiler import ProfilerActivity, profile

    from timing import per_call

    repeats = max(50, int(2000 * scale))
    x = torch.randn(1024, device="openreg")

    def loop():
        for _ in range(50):
            torch.add(x, x)
        torch.openreg.synchronize()

    def under(activities):
        def run(fn, count, sync):
            with profile(activities=activities):
                return per_call(fn, count, sync)
        return run

    plain = cpu_only = device = float("inf")
    rounds = 5
    for _ in range(rounds + 1):  # the first round warms up
        plain = min(plain, per_call(loop, repeats // 50) / 50)
        cpu_only = min(cpu_only, under([ProfilerActivity.CPU])(
            loop, repeats // 50, lambda: None) / 50)
        device = min(device, under(
            [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])(
                loop, repeats // 50, lambda: None) / 50)
    return [
        ("small op add, profiler with device timeline", "CPU-only prof",
         cpu_only, device),
        ("small op add, profiler with device timeline", "no profiler",
         plain, device),
    ]


def _holder(ready, done):
    import torch

    held = torch.ones(1 << 18, device="openreg")
    torch.openreg.synchronize()
    ready.release()
    done.wait()
    del held


def _median_seconds(argv, repeats):
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def smi_answer_time(torch, scale):
    repeats = max(5, int(40 * scale))
    query = [torch_openreg.smi_binary(),
             "--query-gpu=index,memory.used,utilization.gpu",
             "--format=csv"]
    table = [torch_openreg.smi_binary()]
    baseline = _median_seconds(["/bin/true"], repeats)
    rows = [("openreg-smi --query-gpu, no client", "/bin/true", baseline,
             _median_seconds(query, repeats))]
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    ready = context.Semaphore(0)
    done = context.Event()
    holders = [context.Process(target=_holder, args=(ready, done))
               for _ in range(CLIENTS)]
    for holder in holders:
        holder.start()
    try:
        for _ in holders:
            if not ready.acquire(timeout=300):
                raise RuntimeError("a client did not attach within 300 s")
        rows.append((f"openreg-smi --query-gpu, {CLIENTS} clients",
                     "/bin/true", baseline, _median_seconds(query, repeats)))
        rows.append((f"openreg-smi (table), {CLIENTS} clients", "/bin/true",
                     baseline, _median_seconds(table, repeats)))
    finally:
        done.set()
        for holder in holders:
            holder.join(timeout=60)
    return rows


SECTIONS = [profiler_cost, smi_answer_time]
