"""Observability costs: how long `openreg-smi` takes to answer with 64
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


SECTIONS = [smi_answer_time]
