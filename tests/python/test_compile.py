"""torch.compile on openreg (docs/COMPILE.md): Inductor's fused C++ kernels
built by the client as modules and run by the daemon on device memory,
extern kernels (matmul, convolution) as openreg ops; the Dynamo backend
name "openreg" with the reference backend's behaviours; dynamic shapes,
recompilation, other devices and dtypes; the compile cache shared with a
second process; what openreg refuses (cpp_wrapper, the FX wrapper); errors
and faults in compiled kernels."""

import copy
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time

# A cache of this test's own: its compiles are its own, and the second
# process below reuses exactly them.
CACHE = tempfile.mkdtemp(prefix="openreg-inductor-cache-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

from daemon_fixture import Daemon, process_daemon, run_python  # noqa: E402
from intra_op_threads import GRAIN_SIZE, num_threads  # noqa: E402

DAEMON = process_daemon(devices=2)
faults = torch.openreg.faults


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    faults.disarm()


def pointwise_and_reduction(x, y):
    return (x.sin() + y).relu() * 2, (x * y).sum(1)


def assert_close_to_cpu(outputs, expected, tolerance=1e-5):
    for output, reference in zip(outputs, expected):
        assert output.device.type == "openreg"
        assert output.dtype == reference.dtype
        torch.testing.assert_close(output.cpu(), reference, atol=tolerance,
                                   rtol=tolerance)


def kernel_names(code):
    return re.findall(r"^(cpp_fused_\w+) = openreg_kernels\.define\(", code,
                      re.MULTILINE)


def test_fused_kernels_are_modules_the_daemon_runs_on_device_memory():
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        outputs, [code] = run_and_get_code(
            torch.compile(pointwise_and_reduction), x.to("openreg"),
            y.to("openreg"))
        torch.openreg.synchronize()
    assert_close_to_cpu(outputs, pointwise_and_reduction(x, y))
    [kernel] = kernel_names(code)
    assert "cpp_pybinding" not in code
    # The kernel ran in the daemon, as one command of the stream.
    launched = {op["op"]: op["count"] for op in costs.ops}
    assert launched.get(kernel) == 1, launched


def test_the_dynamo_backend_openreg_counts_frames_as_the_reference():
    assert "openreg" in torch._dynamo.list_backends(exclude_tags=())
    counter = CompileCounterWithBackend("openreg")
    compiled = torch.compile(lambda x: (x.cos() * 3).sum(-1), backend=counter)
    first = torch.randn(4, device="openreg")
    assert_close_to_cpu([compiled(first)], [(first.cpu().cos() * 3).sum(-1)])
    compiled(first)
    assert counter.frame_count == 1
    second = torch.randn(8, device="openreg")
    assert_close_to_cpu([compiled(second)],
                        [(second.cpu().cos() * 3).sum(-1)])
    assert counter.frame_count == 2


def test_dynamic_shapes_compile_once_and_pass_sizes_to_the_kernels():
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(pointwise_and_reduction, backend=counter,
                             dynamic=True)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    outputs, [code] = run_and_get_code(compiled, x.to("openreg"),
                                       y.to("openreg"))
    assert_close_to_cpu(outputs, pointwise_and_reduction(x, y))
    assert "'const int64_t'" in code
    for shape in [(5, 33), (3, 7)]:
        x, y = torch.randn(*shape), torch.randn(*shape)
        assert_close_to_cpu(compiled(x.to("openreg"), y.to("openreg")),
                            pointwise_and_reduction(x, y))
    assert counter.frame_count == 1


def test_tensors_on_openreg_1_are_computed_and_allocated_there():
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    outputs = torch.compile(pointwise_and_reduction)(x.to("openreg:1"),
                                                     y.to("openreg:1"))
    assert all(output.device == torch.device("openreg:1")
               for output in outputs)
    assert_close_to_cpu(outputs, pointwise_and_reduction(x, y))


def test_half_bfloat16_views_in_place_and_host_scalars():
    def update(a, b, scale):
        a.add_(b[:, 1:] * scale)
        return a.sum(0)

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a, b = torch.randn(6, 5, dtype=dtype), torch.randn(6, 6, dtype=dtype)
        scale = torch.tensor(0.5, dtype=dtype)  # a 0-dim CPU tensor
        device_a = a.to("openreg")
        result = torch.compile(update)(device_a, b.to("openreg"), scale)
        expected = update(a, b, scale)
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        assert_close_to_cpu([result, device_a], [expected, a], tolerance)


def test_extern_kernels_run_as_openreg_ops():
    def layers(a, b, bias, image, weight):
        return (torch.addmm(bias, a, b),
                torch.nn.functional.conv2d(image, weight, padding=1).relu())

    arguments = [torch.randn(8, 16), torch.randn(16, 4), torch.randn(4),
                 torch.randn(2, 3, 8, 8), torch.randn(5, 3, 3, 3)]
    outputs, [code] = run_and_get_code(
        torch.compile(layers), *[a.to("openreg") for a in arguments])
    assert_close_to_cpu(outputs, layers(*arguments), tolerance=1e-4)
    assert "extern_kernels.addmm(" in code
    assert "extern_kernels.convolution(" in code


def test_control_flow_subgraphs_and_random_ops_compile():
    def branch(p, a):
        return torch.cond(p.sum() > 0, lambda a: a.sin() * 2,
                          lambda a: a.cos() + 1, (a,))

    a = torch.randn(4, 4)
    for p in (torch.ones(2), -torch.ones(2)):
        assert_close_to_cpu([torch.compile(branch)(p.to("openreg"),
                                                   a.to("openreg"))],
                            [branch(p, a)])
    noise = torch.compile(lambda t: torch.rand_like(t) + t * 0)
    t = torch.zeros(64, 64, device="openreg")
    first, second = noise(t).cpu(), noise(t).cpu()
    assert 0 <= first.min() and first.max() < 1
    assert 0.4 < first.mean() < 0.6 and not torch.equal(first, second)


def test_a_compiled_kernel_runs_with_the_clients_flush_denormal():
    """A compiled kernel runs with the client's flush-denormal, whatever its
    executor thread last ran: each step first runs an eager op with the
    other setting, which leaves that setting on the daemon's thread."""
    denormal = torch.full((64,), 1e-39)  # below float32's smallest normal
    device = denormal.to("openreg")
    triple = torch.compile(lambda x: x * 3)
    try:
        for flush in (True, False, True):
            torch.set_flush_denormal(not flush)
            device + 0
            torch.set_flush_denormal(flush)
            result = triple(device)
            expected = denormal * 3  # CPU eager, this thread's setting
            # (Read back without flushing: the copy would flush it here.)
            torch.set_flush_denormal(False)
            assert torch.equal(result.cpu(), expected), (flush, result[:2])
            assert (expected == 0).all() == flush  # the setting mattered
    finally:
        torch.set_flush_denormal(False)  # ATen's default


def _pointwise(x):
    return (x.sin() * 2).relu()


def _column_sums(x):
    return x.sum(0)


def _total(x):
    return x.sum()


@pytest.mark.parametrize("function, shape, threads", [
    (_pointwise, (64, 512), 1),  # small
    (_pointwise, (512, 512), 2),  # large: the client's count
    (_column_sums, (64, 512), 1),  # each column summed by one thread
    (_total, (GRAIN_SIZE,), 2),  # split between threads: the client's
])
def test_a_small_compiled_kernel_runs_on_one_thread_where_its_bits_allow(
        function, shape, threads):
    """(docs/COMPILE.md, "Threads".) A fused kernel that never reads its
    OpenMP thread id or count gives the same bits at any count, and runs on
    one thread when its tensors are small, as eager launches do; a
    reduction Inductor splits between threads keeps the client's count.
    Each gives CPU's compiled kernel's bits at the client's count."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    device = x.to("openreg")
    with num_threads(2):
        compiled = torch.compile(function)
        compiled(device)
        torch.openreg.synchronize()
        with torch.openreg.command_costs() as costs:
            result = compiled(device)
            torch.openreg.synchronize()
        torch._dynamo.reset()
        expected = torch.compile(function)(x)
    launched = [op["kernel_threads"] for op in costs.ops
                if op["op"].startswith("cpp_fused")]
    assert launched == [threads], costs.table()
    assert torch.equal(result.cpu(), expected)


def test_an_error_in_a_compiled_kernel_fails_at_the_next_synchronization():
    a = torch.tensor([6, 7, 8], device="openreg")
    b = torch.tensor([2, 0, 3], device="openreg")
    with pytest.raises(RuntimeError, match=r"compiled kernel cpp_fused_\w+ "
                       r"\(module .*\) failed: .*ZeroDivisionError"):
        torch.compile(lambda a, b: a // b)(a, b)
        torch.openreg.synchronize()


def test_cpp_wrapper_and_the_fx_wrapper_are_refused_with_a_clear_error():
    for option in ("cpp_wrapper", "fx_wrapper"):
        torch._dynamo.reset()
        with inductor_config.patch({option: True}):
            with pytest.raises(Exception, match=f"openreg: .*{option}.* "
                               "(is )?not supported"):
                torch.compile(lambda a: a.sin() + 1)(
                    torch.randn(4, device="openreg"))


def _replays(costs):
    return sum(op["count"] for op in costs.ops if op["op"] == "graph_replay")


def test_reduce_overhead_replays_each_compiled_graph_as_an_openreg_graph():
    compiled = torch.compile(pointwise_and_reduction, mode="reduce-overhead")
    inputs = [(torch.randn(8, 16), torch.randn(8, 16)) for _ in range(5)]
    results = []
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for x, y in inputs:
            results.append(compiled(x.to("openreg"), y.to("openreg")))
        torch.openreg.synchronize()
    # Call 1 runs as compiled, call 2 captures and replays, 3-5 replay.
    assert _replays(costs) == 4
    # Every result is its own: a later replay does not overwrite it.
    for outputs, (x, y) in zip(results, inputs):
        assert_close_to_cpu(outputs, pointwise_and_reduction(x, y))


def test_reduce_overhead_captures_again_for_a_new_shape():
    compiled = torch.compile(lambda t: (t.sin() * 2).sum(0),
                             mode="reduce-overhead", dynamic=True)
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for rows in (4, 4, 4, 6, 6, 6):
            t = torch.randn(rows, 3)
            assert_close_to_cpu([compiled(t.to("openreg"))],
                                [(t.sin() * 2).sum(0)])
        torch.openreg.synchronize()
    assert _replays(costs) == 4  # two shapes: warm-up, capture, replay


def test_reduce_overhead_trains_as_cpu_eager():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
    model = copy.deepcopy(reference).to("openreg")
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1)
                  for m in (reference, model)]
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for step in range(4):
            x, y = torch.randn(6, 8), torch.randn(6, 4)
            runs = ((reference, optimizers[0], x, y),
                    (compiled, optimizers[1], x.to("openreg"),
                     y.to("openreg")))
            for run, optimizer, inputs, targets in runs:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(run(inputs), targets)
                loss.backward()
                optimizer.step()
        torch.openreg.synchronize()
    # Forward and backward: each warmed up, captured and replayed 3 times.
    assert _replays(costs) == 6
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(),
                                   atol=1e-5, rtol=1e-5)


def test_reduce_overhead_leaves_a_graph_that_mutates_its_input_uncaptured():
    def accumulate(total, t):
        total.add_(t * 2)
        return total.sum()

    compiled = torch.compile(accumulate, mode="reduce-overhead")
    total = torch.zeros(4, device="openreg")
    expected = torch.zeros(4)
    for _ in range(4):
        t = torch.randn(4)
        compiled(total, t.to("openreg"))
        accumulate(expected, t)
    assert_close_to_cpu([total], [expected])


def test_a_compiled_function_captured_in_an_openreg_graph_replays():
    """The compiled kernels are recorded as module launches; a replay runs
    them again on the new contents of the static input."""
    compiled = torch.compile(lambda a: (a.sin() * 2).sum(0))
    static_input = torch.randn(8, 4, device="openreg")
    compiled(static_input)  # compiled (and its modules loaded) first
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):  # on a side stream
        static_output = compiled(static_input)
    for _ in range(2):
        fresh = torch.randn(8, 4)
        static_input.copy_(fresh)
        graph.replay()
        torch.testing.assert_close(static_output.cpu(),
                                   (fresh.sin() * 2).sum(0))


def test_a_fault_injected_into_a_compiled_kernels_output():
    x = torch.arange(16, dtype=torch.float32)
    compiled = torch.compile(lambda t: t * 2 + 1)
    _, [code] = run_and_get_code(compiled, x.to("openreg"))
    [kernel] = kernel_names(code)
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(bits=[30], element=3),
                       op=kernel, nth=1):
        result = compiled(x.to("openreg")).cpu()
    [record] = faults.log(since)
    assert record.command == kernel and record.element == 3
    expected = x * 2 + 1
    flipped = (expected[3:4].view(torch.int32) ^ (1 << 30)).view(
        torch.float32)
    assert torch.equal(result[3:4], flipped)
    mask = torch.arange(16) != 3
    assert torch.equal(result[mask], expected[mask])


def test_a_compiled_kernel_on_a_lost_device_fails_cleanly():
    code = textwrap.dedent("""
        import torch
        from torch.openreg import faults
        compiled = torch.compile(lambda t: t.sin() * 2)
        x = torch.ones(8, device="openreg:0")
        compiled(x).cpu()  # compiled and run once
        faults.arm(faults.device_lost(), kind="kernel", device=0, nth=1)
        try:
            compiled(x).cpu()
        except RuntimeError as error:
            print("lost:", "was lost" in str(error))
        print("device 1:", compiled(torch.ones(2, device="openreg:1"))
              .cpu().tolist())
        faults.reset_device(0)
        """)
    # A daemon of its own: a device reset takes every session's memory on
    # that device, this process's cached blocks included.
    with Daemon(devices=2) as private:
        result = run_python(code, private.env(TORCHINDUCTOR_CACHE_DIR=CACHE),
                            timeout=600)
    expected_one = (torch.ones(2).sin() * 2).tolist()
    assert result.stdout.split("\n")[:2] == [
        "lost: True", f"device 1: {expected_one}"], result.stderr[-3000:]


def test_a_second_process_reuses_the_compiled_kernels_without_compiling():
    torch.compile(pointwise_and_reduction)(torch.randn(8, 16,
                                                       device="openreg"),
                                           torch.randn(8, 16,
                                                       device="openreg"))
    code = textwrap.dedent("""
        import torch
        import torch._inductor.config as config
        import torch._inductor.cpp_builder as cpp_builder
        builds = []
        original = cpp_builder.CppBuilder.build
        def counting_build(self):
            if not self.get_target_file_path().endswith(".i"):
                builds.append(self.get_target_file_path())
            return original(self)
        cpp_builder.CppBuilder.build = counting_build
        config.fx_graph_cache = FX_GRAPH_CACHE
        def f(x, y):
            return (x.sin() + y).relu() * 2, (x * y).sum(1)
        x, y = torch.randn(8, 16), torch.randn(8, 16)
        out = torch.compile(f)(x.to("openreg"), y.to("openreg"))
        ok = all(torch.allclose(o.cpu(), r, atol=1e-5)
                 for o, r in zip(out, f(x, y)))
        print(ok, len(builds))
        """)
    for fx_graph_cache in ("True", "False"):
        result = run_python(
            code.replace("FX_GRAPH_CACHE", fx_graph_cache),
            DAEMON.env(TORCHINDUCTOR_CACHE_DIR=CACHE), timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["True", "0"], (fx_graph_cache,
                                                        result.stdout)


def test_kernels_unload_with_their_process_and_the_next_runs_its_own():
    # Two processes in turn, each with one fused kernel of the same
    # signature (one input, one output) but its own arithmetic.
    code = textwrap.dedent("""
        import os, torch
        from torch_openreg.inductor import kernels
        x = torch.randn(64)
        out = torch.compile(lambda x: (x * SCALE).relu() + 1)(x.to("openreg"))
        ok = torch.allclose(out.cpu(), (x * SCALE).relu() + 1)
        print(ok, os.getpid(), *kernels._loaded._ids)
        """)
    for scale in ("2", "3"):
        result = run_python(code.replace("SCALE", scale),
                            DAEMON.env(TORCHINDUCTOR_CACHE_DIR=CACHE),
                            timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        ok, pid, *libraries = result.stdout.split()
        assert ok == "True" and len(libraries) == 1, result.stdout
        # Built without GNU-unique symbols (glibc never unmaps a library
        # that defines one), the kernel is unmapped when the daemon ends
        # the session (loaded_module.h).
        symbols = subprocess.run(["readelf", "--symbols", "--wide",
                                  libraries[0]], capture_output=True,
                                 text=True, check=True).stdout
        assert " UNIQUE " not in symbols
        deadline = time.monotonic() + 30
        while any(session["pid"] == int(pid)
                  for session in torch.openreg.daemon_stats()["sessions"]):
            assert time.monotonic() < deadline, "the session did not end"
            time.sleep(0.05)
        while True:
            with open(f"/proc/{DAEMON.pid}/maps") as maps:
                if libraries[0] not in maps.read():
                    break
            assert time.monotonic() < deadline, "the kernel stayed mapped"
            time.sleep(0.05)


def test_registration_waits_for_inductor_and_import_torch_stays_light():
    code = textwrap.dedent("""
        import sys, torch
        assert "torch._inductor" not in sys.modules, "autoload loaded Inductor"
        from torch._inductor.codegen.common import (
            get_scheduling_for_device, get_wrapper_codegen_for_device,
            init_backend_registration)
        init_backend_registration()
        print(get_scheduling_for_device("openreg").__name__,
              get_wrapper_codegen_for_device("openreg").__name__,
              torch.openreg.Scheduling is get_scheduling_for_device("openreg"))
        """)
    result = run_python(code, DAEMON.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [
        "OpenRegScheduling", "OpenRegPythonWrapperCodegen", "True"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
