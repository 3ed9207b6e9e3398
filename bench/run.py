"""openreg benchmarks: every figure is a ratio against a baseline measured
in the same run (CPU eager or memcpy), never an absolute pass/fail.

    make bench            # or: python3 bench/run.py [--quick]

Starts a private daemon (torch_openreg.testing.Daemon) and stops it by pid.
CPU eager uses the same intra-op thread count as the daemon's kernels.

Each section is a function (torch, scale) -> rows; a row is
(benchmark, baseline name, baseline seconds, openreg seconds). Sections
live in this file (ops, training) and in bench/sections_*.py modules.
"""

import argparse
import os

from timing import compare


def small_op_throughput(torch, repeats):
    rows = []
    for name, make_op in [
        ("add", lambda x: (lambda: torch.add(x, x))),
        ("mul_ (in place)", lambda x: (lambda: x.mul_(1.0))),
        ("add out=", lambda x: (
            lambda out=torch.empty_like(x): torch.add(x, x, out=out))),
        ("relu", lambda x: (lambda: torch.relu(x))),
        ("sum", lambda x: (lambda: x.sum())),
    ]:
        cpu = torch.randn(1024)
        device = cpu.to("openreg")
        rows.append((f"small op {name} (1024 floats)", "CPU eager") + compare(
            make_op(cpu), make_op(device), repeats, rounds=15,
            device_sync=torch.openreg.synchronize))
    return rows


def item_latency(torch, repeats):
    cpu = torch.randn(16)
    device = cpu.to("openreg")
    return [(".item() round trip", "CPU eager") + compare(
        lambda: cpu[3].item(), lambda: device[3].item(), repeats,
        rounds=15)]


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
    steps = {}
    for device in ("cpu", "openreg"):
        torch.manual_seed(0)
        model = build(torch).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = inputs.to(device)
        y = torch.randint(0, 10, (inputs.shape[0],)).to(device)

        def step(model=model, optimizer=optimizer, x=x, y=y):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()

        steps[device] = step
    name = f"training step {build.__name__.upper()} batch {inputs.shape[0]}"
    return [(name, "CPU eager") + compare(
        steps["cpu"], steps["openreg"], repeats,
        device_sync=torch.openreg.synchronize)]


def ops_and_training(torch, scale):
    rows = []
    rows += small_op_throughput(torch, int(500 * scale) or 1)
    rows += item_latency(torch, int(300 * scale) or 1)
    rows += training_step(torch, mlp, torch.randn(64, 256), int(10 * scale) or 1)
    rows += training_step(torch, cnn, torch.randn(32, 3, 32, 32), int(4 * scale) or 1)
    return rows


def sections():
    """The benchmark sections, in print order."""
    import importlib
    import pkgutil
    here = os.path.dirname(os.path.abspath(__file__))
    found = [ops_and_training]
    for module in sorted(m.name for m in pkgutil.iter_modules([here])
                         if m.name.startswith("sections_")):
        found += importlib.import_module(module).SECTIONS
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions (a smoke run)")
    parser.add_argument("--only", default="",
                        help="comma-separated section names (substrings of "
                             "the section functions' names) to run alone")
    args = parser.parse_args()
    wanted = [name for name in args.only.split(",") if name]
    scale = 0.1 if args.quick else 1.0

    from torch_openreg.testing import Daemon

    with Daemon(devices=2, memory_per_device="4GiB") as daemon:
        daemon.use()
        import torch

        threads = torch.get_num_threads()
        rows = []
        for section in sections():
            if wanted and not any(w in section.__name__ for w in wanted):
                continue
            rows += section(torch, scale)

        print(f"openreg benchmarks (client and CPU eager: {threads} threads; "
              f"daemon pid {daemon.pid})")
        print(f"{'benchmark':44} {'baseline':>20} {'openreg':>11} {'openreg/baseline':>17}")
        for name, baseline, baseline_time, device_time in rows:
            print(f"{name:44} {baseline:>9} {baseline_time * 1e6:8.1f}us "
                  f"{device_time * 1e6:9.1f}us {device_time / baseline_time:16.2f}x")
        print("(time ratio: 1.0x = as fast as the baseline; throughput or "
              "bandwidth ratio = 1 / it)")


if __name__ == "__main__":
    main()
