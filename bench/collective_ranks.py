"""One rank of bench/sections_collectives.py: `python collective_ranks.py
BACKEND RANK WORLD PORT BYTES ITERATIONS`. BACKEND is occl (openreg tensors,
collectives in the daemon), gloo (CPU tensors over loopback), ddp (a DDP
training step of the MLP of mlp_step(), BYTES ignored) or death (2 ranks:
both print READY after a first all_reduce; rank 1 then sleeps until the
bench kills it, rank 0 waits in its next all_reduce and prints when the
error came, its text, and the group timeout). Rank 0 prints one
JSON line (prefix RESULT) with the per-iteration seconds (after warm-up)
and its CPU seconds per iteration."""

import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist


GLOBAL_BATCH = 256


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))


def mlp_step(model, optimizer, x, y):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def ddp_main(rank, world, iterations):
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(device)
    dist.init_process_group(backend="occl", rank=rank, world_size=world)
    model = DDP(mlp().to(device), device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(GLOBAL_BATCH // world, 256).to(device)
    y = torch.randint(0, 10, (GLOBAL_BATCH // world,)).to(device)
    for _ in range(3):
        mlp_step(model, optimizer, x, y)
    torch.openreg.synchronize()
    dist.barrier()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        mlp_step(model, optimizer, x, y)
        torch.openreg.synchronize()
        samples.append(time.perf_counter() - start)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage.ru_utime + usage.ru_stime - cpu_before) / iterations
    dist.barrier()
    if rank == 0:
        print("RESULT " + json.dumps({"samples": samples, "cpu": cpu}),
              flush=True)
    dist.destroy_process_group()


DEATH_GROUP_TIMEOUT = 60.0


def death_main(rank, world):
    import datetime

    device = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(device)
    dist.init_process_group(
        backend="occl", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=DEATH_GROUP_TIMEOUT))
    tensor = torch.ones(1024, device=device)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    print("READY", flush=True)
    if rank != 0:
        time.sleep(600)  # killed by the bench
        return
    try:
        dist.all_reduce(tensor)
        torch.openreg.synchronize()
        error = None
    except dist.DistBackendError as failure:
        error = str(failure)
    print("RESULT " + json.dumps({"error_at": time.time(), "error": error,
                                  "timeout": DEATH_GROUP_TIMEOUT}),
          flush=True)


def main():
    backend, rank, world, port, size, iterations = (
        sys.argv[1], *map(int, sys.argv[2:7]))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "ddp":
        ddp_main(rank, world, iterations)
        return
    if backend == "death":
        death_main(rank, world)
        return
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
