"""torch.compile on openreg (docs/COMPILE.md), in alternating rounds of the
same run: the MLP training step of ops_and_training with its forward and
loss compiled (Inductor's fused kernels run by the daemon) against the
same step in openreg eager and in CPU eager (uncompiled); a small
transformer block's forward compiled (and with mode="reduce-overhead":
replayed as an openreg graph) against openreg eager; a chain of
100 small elementwise ops compiled (one fused kernel) against openreg
eager; and the same steps compiled on CPU against CPU eager, which is
what Inductor's fusion wins on this machine at most. Printed beside the
table: fusion's ceiling for the MLP step and the block (the share of
openreg eager's kernel time in ops the compiled version still runs through
ATen, from the daemon's cost profile), what loading a compiled kernel into
the daemon costs per kernel, and a second process's first compiled call
with Inductor's cache warm (no compile). The issue's bars: the compiled MLP
step >= 1.3x faster than openreg eager (time ratio <= 0.77x) and faster
than CPU eager; the compiled block's forward <= 0.7x openreg eager."""

import os
import subprocess
import sys
import textwrap
import time

from sections_graphs import _alternate, _time
from sections_models import transformer_block

ROUNDS = 5


def _mlp(torch):
    nn = torch.nn
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def _training_step(torch, device, compiled):
    torch.manual_seed(0)
    model = _mlp(torch).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 256).to(device)
    y = torch.randint(0, 10, (64,)).to(device)

    def loss_of(model, x, y):
        return torch.nn.functional.cross_entropy(model(x), y)

    loss_fn = torch.compile(loss_of) if compiled else loss_of

    def step():
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        optimizer.step()

    return step


def _eager_and_compiled_forward(torch, device, tokens, steps, scale,
                                mode=None):
    """Seconds per forward of a transformer block, eager and compiled."""
    torch.manual_seed(0)
    block = transformer_block(torch).to(device).eval()
    tokens = tokens.to(device)
    compiled = torch.compile(block, mode=mode)
    sync = torch.openreg.synchronize if device != "cpu" else None
    with torch.no_grad():
        for forward in (block, compiled, block, compiled, compiled):
            forward(tokens)  # compiles on first use (captures on the second)
        if sync is not None:
            sync()
        return _alternate(max(2, int(ROUNDS * scale)),
                          lambda: _time(lambda: block(tokens), steps, sync),
                          lambda: _time(lambda: compiled(tokens), steps,
                                        sync))


def _chain(x):
    for _ in range(50):
        x = x * 1.0001 + 0.001
    return x


def compiled_steps(torch, scale):
    steps = max(2, int(20 * scale))
    sync = torch.openreg.synchronize
    cpu_step = _training_step(torch, "cpu", compiled=False)
    cpu_compiled_step = _training_step(torch, "cpu", compiled=True)
    eager_step = _training_step(torch, "openreg", compiled=False)
    compiled_step = _training_step(torch, "openreg", compiled=True)
    for step in (cpu_step, cpu_compiled_step, eager_step, compiled_step):
        step()
        step()  # compiles on first use; the second is warm
    sync()
    cpu, cpu_compiled, eager, compiled = _alternate(
        max(2, int(ROUNDS * scale)),
        lambda: _time(cpu_step, steps),
        lambda: _time(cpu_compiled_step, steps),
        lambda: _time(eager_step, steps, sync),
        lambda: _time(compiled_step, steps, sync))
    _print_fusion_ceiling(torch, "MLP training step", eager_step,
                          compiled_step, bar=1 / 1.3)
    # The CPU rows give Inductor's own gain on this machine: what fusion
    # can win at most.
    rows = [("MLP step, forward+loss compiled", "openreg eager", eager,
             compiled),
            ("MLP step, forward+loss compiled", "CPU eager", cpu, compiled),
            ("MLP step compiled, on CPU (Inductor's gain)", "CPU eager", cpu,
             cpu_compiled)]

    torch.manual_seed(0)
    tokens = torch.randn(8, 32, 64)
    _print_block_fusion_ceiling(torch, tokens)
    rows.append(("transformer block forward compiled", "openreg eager",
                 *_eager_and_compiled_forward(torch, "openreg", tokens,
                                              steps, scale)))
    rows.append(("block forward, mode=reduce-overhead", "openreg eager",
                 *_eager_and_compiled_forward(torch, "openreg", tokens,
                                              steps, scale,
                                              mode="reduce-overhead")))
    rows.append(("block forward compiled, on CPU (Inductor's gain)",
                 "CPU eager",
                 *_eager_and_compiled_forward(torch, "cpu", tokens, steps,
                                              scale)))

    x = torch.randn(1000, device="openreg")
    compiled_chain = torch.compile(_chain)
    compiled_chain(x)
    sync()
    chain_eager, chain_compiled = _alternate(
        max(2, int(ROUNDS * scale)),
        lambda: _time(lambda: _chain(x), steps, sync),
        lambda: _time(lambda: compiled_chain(x), steps, sync))
    rows.append(("chain of 100 small ops compiled (1 kernel)",
                 "openreg eager", chain_eager, chain_compiled))
    _print_module_loads_and_cache(torch)
    return rows


def _kernel_ns_by_op(torch, fn, repeats=5):
    """Daemon kernel nanoseconds of `repeats` calls of `fn`, by ATen op
    (an overload's kernel counted with its op: `aten::mm.out` is
    `aten::mm`) or compiled kernel, from the daemon's cost profile."""
    fn()
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for _ in range(repeats):
            fn()
        torch.openreg.synchronize()
    totals = {}
    for op in costs.ops:
        name = op["op"].split(".")[0]
        totals[name] = totals.get(name, 0) + op["kernel_ns"]
    return totals


def _print_fusion_ceiling(torch, name, eager, compiled, bar):
    """What fusion can win at most, measured in this run: the share of
    openreg eager's kernel time spent in ATen ops that the compiled step
    still runs as the same kernels (matrix products and attention, which
    Inductor calls as extern kernels, the uncompiled optimizer, fallbacks).
    Were every fused kernel free, the compiled step's kernels would take
    that share of eager's: its time ratio cannot go below it while the
    daemon's kernels bound the step."""
    eager_ns = _kernel_ns_by_op(torch, eager)
    still_aten = {op for op in _kernel_ns_by_op(torch, compiled)
                  if op.startswith("aten::")}
    total = sum(eager_ns.values())
    kept = sum(ns for op, ns in eager_ns.items() if op in still_aten)
    share = kept / total if total else float("nan")
    largest = sorted(still_aten & eager_ns.keys(),
                     key=lambda op: -eager_ns[op])[:3]
    print(f"fusion's ceiling, {name}: {share:.0%} of openreg eager's kernel "
          f"time is in ops the compiled version still runs through ATen "
          f"({', '.join(op[len('aten::'):] for op in largest)}, ...): "
          f"compiled/eager >= {share:.2f}x if every fused kernel were free "
          f"(the issue's bar: <= {bar:.2f}x)")


def _print_block_fusion_ceiling(torch, tokens):
    torch.manual_seed(0)
    block = transformer_block(torch).to("openreg").eval()
    device_tokens = tokens.to("openreg")
    compiled = torch.compile(block)
    with torch.no_grad():
        _print_fusion_ceiling(torch, "transformer block forward",
                              lambda: block(device_tokens),
                              lambda: compiled(device_tokens), bar=0.7)


def _print_module_loads_and_cache(torch):
    from torch_openreg.inductor import kernels

    paths = sorted(kernels._loaded._ids)
    # A fresh process (session): each library is read and dlopen'ed anew.
    probe = textwrap.dedent(f"""
        import time, torch
        from torch_openreg import _C
        torch.ones(1, device="openreg")  # attach first
        start = time.perf_counter()
        for path in {paths!r}:
            _C._load_module(path)
        print((time.perf_counter() - start) / max(1, {len(paths)}))
        """)
    loaded = subprocess.run([sys.executable, "-c", probe], env=os.environ,
                            capture_output=True, text=True, timeout=600)
    per_kernel = (float(loaded.stdout.split()[-1]) * 1e3
                  if loaded.returncode == 0 else float("nan"))
    print(f"module load: {per_kernel:.2f} ms per compiled kernel "
          f"({len(paths)} kernels loaded into a fresh session)")
    second = textwrap.dedent("""
        import time, torch
        import torch._inductor.cpp_builder as cpp_builder
        builds = []
        original = cpp_builder.CppBuilder.build
        def counting(self):
            if not self.get_target_file_path().endswith(".i"):
                builds.append(1)
            return original(self)
        cpp_builder.CppBuilder.build = counting
        x = torch.randn(1000, device="openreg")
        start = time.perf_counter()
        def chain(x):
            for _ in range(50):
                x = x * 1.0001 + 0.001
            return x
        torch.compile(chain)(x).cpu()
        print(len(builds), time.perf_counter() - start)
        """)
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", second], env=os.environ,
                         capture_output=True, text=True, timeout=600)
    if run.returncode == 0:
        builds, seconds = run.stdout.split()[-2:]
        whole = time.perf_counter() - started
        print(f"second process: {builds} compiles, first compiled call "
              f"{float(seconds):.2f} s (process {whole:.1f} s with import)")
    else:
        print("second process failed:", run.stderr[-500:])


SECTIONS = [compiled_steps]
