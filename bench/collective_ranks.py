"""One rank of bench/sections_collectives.py: `python collective_ranks.py
BACKEND RANK WORLD PORT BYTES ITERATIONS`. BACKEND is occl (openreg tensors,
collectives in the daemon) or gloo (CPU tensors over loopback). Rank 0
prints one JSON line (prefix RESULT) with the per-iteration seconds of
all_reduce (after warm-up), and each process's CPU seconds over them."""

import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist


def main():
    backend, rank, world, port, size, iterations = (
        sys.argv[1], *map(int, sys.argv[2:7]))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if backend == "occl":
        device = torch.device("openreg",
                              rank % torch.openreg.device_count())
        torch.openreg.set_device(device)
        sync = torch.openreg.synchronize
    else:
        device, sync = torch.device("cpu"), (lambda: None)
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(3):
        dist.all_reduce(tensor)
    sync()
    samples = []
    dist.barrier()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    for _ in range(iterations):
        start = time.perf_counter()
        dist.all_reduce(tensor)
        sync()
        samples.append(time.perf_counter() - start)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage.ru_utime + usage.ru_stime - cpu_before) / iterations
    dist.barrier()
    if rank == 0:
        print("RESULT " + json.dumps({"samples": samples, "cpu": cpu}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
