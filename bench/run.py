"""openreg benchmarks: every figure is a ratio against a baseline measured
in the same run (CPU eager), never an absolute pass/fail.

    make bench            # or: python3 bench/run.py [--quick]

Starts a private daemon (torch_openreg.testing.Daemon) and stops it by pid.
CPU eager uses the same intra-op thread count as the daemon's kernels.
"""

import argparse
import os
import time


def timed(fn, repeats, sync=lambda: None):
    """Seconds per call of fn(), after one warm-up call."""
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - start) / repeats


def small_op_throughput(torch, repeats):
    rows = []
    for name, make_op in [
        ("add", lambda x: (lambda: torch.add(x, x))),
        ("mul_ (in place)", lambda x: (lambda: x.mul_(1.0))),
        ("relu", lambda x: (lambda: torch.relu(x))),
        ("sum", lambda x: (lambda: x.sum())),
    ]:
        cpu = torch.randn(1024)
        device = cpu.to("openreg")
        cpu_time = timed(make_op(cpu), repeats)
        device_time = timed(make_op(device), repeats, torch.openreg.synchronize)
        rows.append((f"small op {name} (1024 floats)", cpu_time, device_time))
    return rows


def item_latency(torch, repeats):
    cpu = torch.randn(16)
    device = cpu.to("openreg")
    return [(".item() round trip", timed(lambda: cpu[3].item(), repeats),
             timed(lambda: device[3].item(), repeats))]


def mlp(torch):
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))


def cnn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1),
        nn.Linear(32 * 8 * 8, 10))


def training_step(torch, build, inputs, repeats):
    rows = []
    times = {}
    for device in ("cpu", "openreg"):
        torch.manual_seed(0)
        model = build(torch).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = inputs.to(device)
        y = torch.randint(0, 10, (inputs.shape[0],)).to(device)

        def step():
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()

        sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
        times[device] = timed(step, repeats, sync)
    rows.append((f"training step {build.__name__.upper()} batch {inputs.shape[0]}",
                 times["cpu"], times["openreg"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0

    from torch_openreg.testing import Daemon

    with Daemon(devices=1, memory_per_device="4GiB") as daemon:
        daemon.use()
        import torch

        threads = torch.get_num_threads()
        rows = []
        rows += small_op_throughput(torch, int(3000 * scale) or 1)
        rows += item_latency(torch, int(2000 * scale) or 1)
        rows += training_step(torch, mlp, torch.randn(64, 256), int(50 * scale) or 1)
        rows += training_step(torch, cnn, torch.randn(32, 3, 32, 32), int(20 * scale) or 1)

        print(f"openreg benchmarks (client and CPU eager: {threads} threads; "
              f"daemon pid {daemon.pid})")
        print(f"{'benchmark':44} {'CPU eager':>11} {'openreg':>11} {'openreg/CPU time':>17}")
        for name, cpu_time, device_time in rows:
            print(f"{name:44} {cpu_time * 1e6:9.1f}us {device_time * 1e6:9.1f}us "
                  f"{device_time / cpu_time:16.2f}x")
        print("(time ratio: 1.0x = as fast as CPU eager; throughput ratio = 1 / it)")


if __name__ == "__main__":
    main()
