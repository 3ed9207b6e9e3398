"""The intra-op threads a kernel runs with in the daemon
(device_daemon/kernels/launch_threads.h): one thread wherever that cannot
change the result (pointwise ops, matrix products, launches small enough
that ATen runs them inline), the client's count elsewhere, one fewer while
the client is busy where a probe found the same bits
(device_daemon/kernels/core_sharing.h); and the results equal CPU eager's,
bit for bit, at the client's count either way."""

import ast
import os
import sys
import time

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from daemon_fixture import Daemon, process_daemon, python_env, run_python
from intra_op_threads import GRAIN_SIZE, num_threads

# Before torch.testing._internal, whose import asks whether openreg is
# available (which connects: to the default socket's daemon, before).
DAEMON = process_daemon(devices=1)

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402,E501


def kernel_threads(run):
    """The intra-op threads of each op `run` launched, by op name. `run` runs
    once before the profile: a signature's first launch is the checked one
    (ARCHITECTURE, "The path of one torch.add"), and only the launches
    after it are the ones every later call makes."""
    run()
    torch.openreg.synchronize()  # earlier commands are not counted
    with torch.openreg.command_costs() as costs:
        run()
    return {op["op"]: op["kernel_threads"] for op in costs.ops
            if not op["op"].startswith("copy_")}


def assert_bitwise_equal(actual, expected, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        what
    same = actual.cpu() == expected
    if actual.is_floating_point() or actual.is_complex():
        same |= actual.cpu().isnan() & expected.isnan()
    assert bool(same.all()), (
        f"{what} differs from CPU in {int((~same).sum())} of "
        f"{same.numel()} elements")


def test_small_launches_and_pointwise_ops_run_on_one_thread_blas_does_not():
    small = torch.randn(1024, device="openreg")
    large = torch.randn(4 * GRAIN_SIZE, device="openreg")
    matrix = torch.randn(256, 512, device="openreg")
    with num_threads(2):
        threads = kernel_threads(lambda: (
            small + 1, small.sum(), torch.nn.functional.gelu(large),
            matrix @ matrix.t()))
    assert threads == {"aten::add.Tensor": 1, "aten::sum.dim_IntList": 1,
                       "aten::gelu": 1,  # pointwise, at any size
                       "aten::mm": 2}, threads  # BLAS splits by itself


def test_large_reductions_keep_the_clients_count():
    # (The libraries that split by thread count at any size, FFT and BLAS,
    # are covered by tests/cpp/launch_threads_test.cc.)
    large = torch.randn(4 * GRAIN_SIZE, device="openreg")
    with num_threads(2):
        threads = kernel_threads(lambda: (large.sum(), large.cumsum(0)))
    assert threads == {"aten::sum.dim_IntList": 2, "aten::cumsum": 2}, threads


def test_a_client_on_one_thread_gets_one_thread_everywhere():
    large = torch.randn(4 * GRAIN_SIZE, device="openreg")
    matrix = torch.randn(10, 32, device="openreg")
    with num_threads(1):
        threads = kernel_threads(lambda: (large.sum(), matrix @ matrix.t()))
    assert threads == {"aten::sum.dim_IntList": 1, "aten::mm": 1}, threads


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16,
                                   torch.float64])
def test_matrix_products_equal_cpu_bitwise_at_the_clients_count(threads,
                                                                dtype):
    """Matrix products keep the client's count at every size: MKL's gemm
    gives other bits on one thread than on two for some small shapes
    (10x32 by 32x64, the last layer of a small classifier's backward)."""
    generator = torch.Generator().manual_seed(threads)

    def randn(*sizes):
        return torch.randn(*sizes, generator=generator).to(dtype)

    with num_threads(threads):
        for m, k, n in [(10, 32, 64), (10, 64, 32), (256, 64, 1000),
                        (1000, 256, 64), (16, 100000, 16),
                        (4, 500000, 4), (64, 65536, 64), (512, 512, 512)]:
            a, b, c = randn(m, k), randn(k, n), randn(m, n)
            batched_a, batched_b = randn(3, m, min(k, 4096)), randn(
                3, min(k, 4096), n)
            vector = randn(k)
            for compute, inputs in [
                    (torch.mm, (a, b)),
                    (torch.addmm, (c, a, b)),
                    (torch.bmm, (batched_a, batched_b)),
                    (lambda x, y, z: torch.baddbmm(x, y, z, beta=0.5),
                     (c.expand(3, m, n), batched_a, batched_b)),
                    (torch.mv, (a, vector)),
                    (torch.addmv, (c[:, 0], a, vector))]:
                expected = compute(*inputs)
                actual = compute(*[t.to("openreg") for t in inputs])
                assert_bitwise_equal(actual, expected)


# Ops with their own parallel loops over small grains (softmax rows,
# pooling windows, normalization statistics, scatter/index accumulation,
# sorting), reductions and convolutions: PyTorch's own sample inputs,
# which are small, so they run on one thread in the daemon.
SAMPLED_OPS = [
    "softmax", "log_softmax", "nn.functional.layer_norm",
    "nn.functional.batch_norm", "nn.functional.group_norm", "cumsum",
    "sum", "mean", "var", "std", "norm", "logsumexp", "amax", "argmax",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.conv2d", "nn.functional.conv1d", "index_add",
    "scatter_add", "index_put", "nn.functional.embedding",
    "nn.functional.nll_loss", "nn.functional.cross_entropy", "topk", "sort",
    "matmul", "nn.functional.linear", "nn.functional.interpolate",
    "nn.functional.gelu", "addcdiv", "lerp",
]


def _samples():
    by_name = {}
    for info in op_db:
        if info.name in SAMPLED_OPS:
            by_name.setdefault(info.name, info)
    assert set(by_name) == set(SAMPLED_OPS), set(SAMPLED_OPS) - set(by_name)
    for name in SAMPLED_OPS:
        info = by_name[name]
        for sample in info.sample_inputs("cpu", torch.float32,
                                         requires_grad=False):
            yield name, info, sample


def _run(info, sample, device, threads):
    def moved(value):
        return value.to(device) if isinstance(value, torch.Tensor) else value

    with num_threads(threads):
        torch.manual_seed(0)
        result = info(moved(sample.input), *tree_map(moved, sample.args),
                      **tree_map(moved, sample.kwargs))
    return [t.cpu() for t in tree_flatten(result)[0]
            if isinstance(t, torch.Tensor)]


def _bitwise_equal(a, b):
    return all(x.dtype == y.dtype and x.shape == y.shape and bool(
        ((x == y) | (x.isnan() & y.isnan())).all()) for x, y in zip(a, b))


def test_small_samples_of_pytorchs_ops_equal_cpu_bitwise_at_two_threads():
    """openreg's result at two client threads (its kernels on one) is CPU
    eager's at two. (Before layer_norm and group_norm ran as CPU's kernels
    in the daemon, kernels/decomposed_cpu_ops.h, they differed at any
    thread count: the check at one thread on both sides is kept so that an
    op differing for another reason is told apart.)"""
    compared, differ_anyway = 0, set()
    one_thread_ops = set()
    for name, info, sample in _samples():
        if any(t.numel() > GRAIN_SIZE for t in tree_flatten(
                (sample.input, sample.args, sample.kwargs))[0]
               if isinstance(t, torch.Tensor)):
            continue
        torch.openreg.synchronize()
        with torch.openreg.command_costs() as costs:
            on_device = _run(info, sample, "openreg", threads=2)
        one_thread_ops |= {op["op"] for op in costs.ops
                           if op["kernel_threads"] == 1}
        on_cpu = _run(info, sample, "cpu", threads=2)
        if not _bitwise_equal(_run(info, sample, "openreg", threads=1),
                              _run(info, sample, "cpu", threads=1)):
            differ_anyway.add(name)
            continue
        assert _bitwise_equal(on_device, on_cpu), f"{name} on {sample}"
        compared += 1
    assert compared > 300, (compared, differ_anyway)
    assert not differ_anyway, differ_anyway
    # The premise holds: these kernels did run on one thread.
    assert {"aten::_softmax", "aten::cumsum", "aten::index_add",
            "aten::sort.stable", "aten::topk"} <= one_thread_ops, one_thread_ops


def test_large_launches_equal_cpu_bitwise_at_three_threads():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(4 * GRAIN_SIZE + 17, generator=generator)
    rows = torch.randn(300, 700, generator=generator)
    with num_threads(3):
        for compute, inputs in [
                (torch.nn.functional.gelu, (x,)),
                (lambda t: t.sum(), (x,)),
                (lambda t: torch.softmax(t, dim=1), (rows,)),
                (lambda t: t.var(dim=0), (rows,)),
                (lambda t: torch.addcdiv(t, t, t.abs() + 1, value=0.5), (x,))]:
            expected = compute(*inputs)
            actual = compute(*[t.to("openreg") for t in inputs])
            assert_bitwise_equal(actual, expected)


def _stay_busy_until_done(device):
    """Keeps the client running Python, as a training loop does between its
    launches, instead of asleep waiting for the stream: it polls for the
    round's work to finish. The launches then all start while the client is
    busy however slow a loaded host makes the daemon (a fixed busy time let
    the daemon fall behind and run the last launches while the client slept
    in its final copy)."""
    if device == "cpu":
        return
    done = torch.openreg.Event()
    done.record()
    while not done.query():
        pass


def _products_and_layer_norm_backward(device, launches):
    """`launches` rounds of a matrix product and layer norm's backward on
    `device`, the client busy in Python until each is done; the last
    round's results, on the CPU."""
    generator = torch.Generator().manual_seed(5)
    a = torch.randn(256, 64, generator=generator).to(device)
    b = torch.randn(64, 192, generator=generator).to(device)
    x = torch.randn(8, 32, 64, generator=generator).to(device)
    grad = torch.randn(8, 32, 64, generator=generator).to(device)
    layer = torch.nn.LayerNorm(64).to(device)
    x.requires_grad_()
    for _ in range(launches):
        product = a @ b
        grads = torch.autograd.grad(layer(x), [x, layer.weight, layer.bias],
                                    grad)
        _stay_busy_until_done(device)
    return [t.detach().cpu() for t in (product, *grads)]


def _busy_costs_with_cpus_bits(threads, launches):
    """The cost profile of `launches` busy rounds at `threads` intra-op
    threads, after checking their results against CPU eager's bitwise."""
    with num_threads(threads):
        expected = _products_and_layer_norm_backward("cpu", 1)
        torch.openreg.synchronize()
        with torch.openreg.command_costs() as costs:
            actual = _products_and_layer_norm_backward("openreg", launches)
    for got, want in zip(actual, expected):
        assert_bitwise_equal(got, want)
    return costs


def test_a_busy_client_leaves_a_core_and_still_gets_cpus_bits():
    """While a 2-thread client is busy in Python, its matrix products run on
    one thread in the daemon and layer norm's backward in row chunks on one
    (kernels/core_sharing.h: a probe found the same bits for their
    signatures); the results are CPU eager's at two threads, and the cost
    profile still shows the launches' count of two."""
    costs = _busy_costs_with_cpus_bits(2, 6)
    ops = {op["op"]: op for op in costs.ops}
    for name in ("aten::mm", "aten::native_layer_norm_backward"):
        assert ops[name]["kernel_threads"] == 2, costs.table()
        # The first launch of a signature is the checked one, the second
        # busy one is seen, the third probed: three or more of six leave
        # the core.
        assert ops[name]["fewer_threads"] >= 3, costs.table()


def test_a_busy_three_thread_clients_layer_norm_backward_runs_on_two():
    """For a client of more than two threads too, layer norm's backward
    runs in row chunks side by side on one thread fewer while the client
    is busy (kernels/layer_norm_backward_in_chunks.h), with CPU eager's
    bits at three threads (on this host's two cores: the bits depend on
    the count, not on the cores)."""
    costs = _busy_costs_with_cpus_bits(3, 8)
    # Checked, seen, probed, then the core left while the client is busy:
    # four or more of eight in chunks, which only the chunked form can do
    # with these bits (the kernel on two threads sums otherwise).
    backward = {op["op"]: op for op in costs.ops}[
        "aten::native_layer_norm_backward"]
    assert backward["kernel_threads"] == 3, costs.table()
    assert backward["fewer_threads"] >= 4, costs.table()


# Runs in a fresh interpreter: a backward pass at two threads (the autograd
# engine's worker for openreg starts with that count), then at three;
# prints the count each pass's layer norm backward ran with in the daemon
# and whether its results are CPU eager's at that count.
_BACKWARD_AFTER_SET_NUM_THREADS = """
import torch
x = torch.randn(64, 64)
grad = torch.randn(64, 64)
layer = torch.nn.LayerNorm(64)
def gradients(device):
    inputs = x.to(device).requires_grad_()
    module = layer.to(device)
    out = module(inputs)
    return [t.cpu() for t in torch.autograd.grad(
        out, [inputs, module.weight, module.bias], grad.to(device))]
for threads in (2, 3):
    torch.set_num_threads(threads)
    expected = gradients("cpu")
    with torch.openreg.command_costs() as costs:
        actual = gradients("openreg")
    ran = [op["kernel_threads"] for op in costs.ops
           if op["op"] == "aten::native_layer_norm_backward"]
    same = all(torch.equal(a, e) for a, e in zip(actual, expected))
    print(threads, ran[0], same)
"""


def test_a_backward_pass_after_set_num_threads_uses_the_new_count():
    """Backward ops on openreg are launched from the autograd engine's
    worker thread, whose own intra-op count would stay the one it started
    with; each backward pass takes the process's count
    (torch_backend/launch_settings.h), as CPU eager's backward on the
    calling thread does."""
    probe = run_python(_BACKWARD_AFTER_SET_NUM_THREADS, python_env())
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["2", "2", "True", "3", "3", "True"], (
        probe.stdout)


# Runs in a fresh interpreter: a busy 2-thread client's matrix products,
# the client polling (busy, not asleep) until each is done; prints how many
# launches ran with fewer threads, of how many.
_BUSY_PRODUCTS = """
import torch
torch.set_num_threads(2)
a = torch.randn(256, 64, device="openreg")
b = torch.randn(64, 192, device="openreg")
with torch.openreg.command_costs() as costs:
    for _ in range(6):
        a @ b
        done = torch.openreg.Event()
        done.record()
        while not done.query():
            pass
products = [op for op in costs.ops if op["op"] == "aten::mm"]
print(products[0]["fewer_threads"], products[0]["count"])
"""


def test_with_share_cores_off_every_launch_keeps_its_count():
    counts = {}
    for flags in ([], ["--share_cores=false"]):
        daemon = Daemon(devices=1, extra_args=flags).start()
        try:
            probe = run_python(_BUSY_PRODUCTS,
                               python_env(OPENREG_DAEMON_SOCKET=daemon.socket,
                                          OPENREG_AUTOSPAWN="0"))
        finally:
            daemon.stop()
        assert probe.returncode == 0, probe.stderr
        counts[" ".join(flags) or "default"] = tuple(
            map(int, probe.stdout.split()))
    # The premise: this client leaves a core by default.
    assert counts["default"][0] >= 3, counts
    assert counts["--share_cores=false"] == (0, 6), counts


# Runs in a fresh interpreter: prints the daemon's own threads (executors,
# their OpenMP workers and the main thread; gRPC's come and go with control
# calls) while idle, right after multi-threaded kernels, and once they have
# gone back to the idle count (or 5 s later).
_TEAMS_PROBE = """
import os, sys, time, torch
pid = int(sys.argv[1])
def threads():
    tasks = f"/proc/{pid}/task"
    names = []
    for task in os.listdir(tasks):
        try:  # a worker that exits after the listing is not counted
            with open(f"{tasks}/{task}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:
            pass
    # Executors name themselves or-exec-dN; their OpenMP workers inherit
    # the name (device_daemon/base/thread_cpu.h).
    return sum(name.startswith("or-exec-d") for name in names)
large = torch.randn(1 << 22, device="openreg")
torch.openreg.synchronize()
time.sleep(0.5)
idle = threads()
torch.set_num_threads(2)
streams = [torch.openreg.Stream() for _ in range(3)]
for _ in range(20):
    for stream in streams:
        with torch.openreg.stream(stream):
            large.sum()
torch.openreg.synchronize()
busy = threads()
deadline = time.monotonic() + 5
while threads() > idle and time.monotonic() < deadline:
    time.sleep(0.05)
print(idle, busy, threads())
"""


def test_idle_executors_hand_back_their_openmp_workers():
    """A multi-threaded kernel gives its executor a team of OpenMP workers;
    an executor idle for a while (its 100 ms sleep timed out) frees it, so
    a daemon does not keep one team per executor that ever ran such a
    kernel (base/openmp_team.h)."""
    probe = run_python(_TEAMS_PROBE.replace("int(sys.argv[1])",
                                            str(DAEMON.pid)),
                       python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                                  OPENREG_AUTOSPAWN="0"))
    assert probe.returncode == 0, probe.stderr
    idle, busy, after = map(int, probe.stdout.split())
    assert busy > idle, (idle, busy)  # the premise: teams were started
    assert after <= idle, (idle, busy, after)


# Runs in a fresh interpreter: the CPUs each of the daemon's threads may
# run on, right after 2-thread matrix products, and once the executor has
# handed its team back (or 5 s later).
_PLACEMENT_PROBE = """
import os, sys, time, torch
pid = int(sys.argv[1])
everywhere = os.sched_getaffinity(pid)
def masks():
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found.append(frozenset(os.sched_getaffinity(int(task))))
        except OSError:  # a gRPC thread that just ended
            pass
    return found
matrix = torch.randn(256, 512, device="openreg")
torch.set_num_threads(2)
for _ in range(5):
    matrix @ matrix.t()
torch.openreg.synchronize()
busy = masks()
deadline = time.monotonic() + 5
while any(m != everywhere for m in masks()) and time.monotonic() < deadline:
    time.sleep(0.05)
print(sorted(everywhere))
print([sorted(m) for m in busy if m != everywhere])
print([sorted(m) for m in masks() if m != everywhere])
"""


def _placement_after_products(daemon):
    """(the daemon's CPUs, the CPU sets of its threads that may not run
    everywhere right after 2-thread products, the same once idle)."""
    probe = run_python(_PLACEMENT_PROBE.replace("int(sys.argv[1])",
                                                str(daemon.pid)),
                       python_env(OPENREG_DAEMON_SOCKET=daemon.socket,
                                  OPENREG_AUTOSPAWN="0"))
    assert probe.returncode == 0, probe.stderr
    return [ast.literal_eval(line) for line in probe.stdout.splitlines()]


def test_with_openmp_hold_cpu_an_executor_keeps_its_cpu_its_workers_not():
    """--openmp_hold_cpu: while an executor holds OpenMP workers, it is
    held on one CPU and its workers may run on every other, as
    OMP_PROC_BIND=spread would place them (base/openmp_worker_placement.h:
    a first 2-thread product after 20 ms of idling took milliseconds
    otherwise); once it hands its team back, every thread of the daemon
    may run anywhere again."""
    everywhere = os.sched_getaffinity(DAEMON.pid)
    if len(everywhere) < 2:
        pytest.skip("needs a host with 2 CPUs or more")
    daemon = Daemon(devices=1, extra_args=["--openmp_hold_cpu"]).start()
    try:
        cpus, busy, after = _placement_after_products(daemon)
    finally:
        daemon.stop()
    assert set(cpus) == everywhere
    # The executor that ran the products, on one CPU, and its worker on
    # all the others (also one CPU, on a 2-CPU host).
    pairs = [(mask, sorted(everywhere - set(mask))) for mask in busy
             if len(mask) == 1 and sorted(everywhere - set(mask)) in busy]
    assert pairs, busy
    assert all(mask in pairs[0] for mask in busy), busy
    assert after == [], after


def test_by_default_every_daemon_thread_may_run_on_every_cpu():
    """Without --openmp_hold_cpu nothing is held: executors on several
    streams or devices at once ran 10-15% slower held."""
    cpus, busy, after = _placement_after_products(DAEMON)
    assert set(cpus) == os.sched_getaffinity(DAEMON.pid)
    assert busy == [] and after == [], (busy, after)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
