"""The daemon's cost profile (device_daemon/execution/command_costs.h):
torch.openreg.command_costs() and `openreg-ctl costs` show where the
daemon's time went, per op, stream and executor, and the CPU of its
threads by role."""

import json
import subprocess

import pytest
import torch
import torch_openreg

from daemon_fixture import Daemon, module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def _ctl(*args, daemon=DAEMON):
    return subprocess.run(
        [torch_openreg.ctl_binary(), f"--socket={daemon.socket}", *args],
        capture_output=True, text=True, timeout=60)


def test_a_block_counts_each_op_with_its_stages():
    x = torch.randn(1024, device="openreg")
    torch.add(x, x)  # the checked first launch of the signature
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for _ in range(25):
            torch.add(x, x)
    adds = [op for op in costs.ops if op["op"] == "aten::add.Tensor"]
    assert len(adds) == 1 and adds[0]["count"] == 25
    assert adds[0]["device"] == 0
    # Every stage of a launch took time; the kernel ran on one intra-op
    # thread (pointwise: kernels/launch_threads.h).
    for stage in ("read", "decode", "kernel", "complete"):
        assert adds[0][f"{stage}_ns"] > 0, stage
    assert adds[0]["kernel_threads"] == 1
    assert not costs.enabled  # stopped at the end of the block
    stream = [s for s in costs.streams if s["commands"] >= 25]
    assert stream and stream[0]["slices"] >= 1
    busy = sum(e["busy_ns"] for e in costs.executors if e["device"] == 0)
    assert busy >= adds[0]["kernel_ns"]
    assert "aten::add.Tensor" in costs.table()


def test_nothing_is_counted_while_the_profile_is_off():
    x = torch.ones(8, device="openreg")
    torch.openreg.command_costs.stop()
    torch.openreg.command_costs.reset()
    for _ in range(5):
        x.mul_(1.0)
    torch.openreg.synchronize()
    assert torch.openreg.command_costs.read().commands() == 0


def test_copies_and_other_commands_count_as_their_kind():
    x = torch.arange(16.0)
    with torch.openreg.command_costs() as costs:
        y = x.to("openreg")
        y.cpu()
    names = {op["op"] for op in costs.ops}
    assert {"copy_host_to_device", "copy_device_to_host"} <= names


def test_a_graph_replay_counts_each_recorded_op_too():
    x = torch.randn(1000, device="openreg")
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        y = torch.relu(x * 2.0) @ torch.ones(1000, 10, device="openreg")
    graph.replay()
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for _ in range(3):
            graph.replay()
    counts = {op["op"]: op for op in costs.ops}
    assert counts["graph_replay"]["count"] == 3
    # (relu reaches the daemon as clamp_min; ones as fill_.)
    for recorded in ("aten::mul.Tensor", "aten::clamp_min",
                     "aten::fill_.Scalar", "aten::mm"):
        op = counts[f"graph_replay > {recorded}"]
        assert op["count"] == 3 and op["kernel_ns"] > 0, op
    # The recorded ops' stages are the replay's, not in addition to it.
    assert sum(op["kernel_ns"] for name, op in counts.items()
               if name.startswith("graph_replay > ")) <= \
        counts["graph_replay"]["kernel_ns"]
    assert y.shape == (10,)


def test_a_thread_count_set_by_the_client_reaches_the_kernels():
    # A reduction larger than ATen's grain runs with the client's count.
    x = torch.randn(1 << 17, device="openreg")
    previous = torch.get_num_threads()
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            x.sum()
            torch.openreg.synchronize()
            with torch.openreg.command_costs() as costs:
                x.sum()
            sums = [op for op in costs.ops if op["op"].startswith("aten::sum")]
            assert sums and sums[0]["kernel_threads"] == threads
    finally:
        torch.set_num_threads(previous)


def test_the_daemons_cpu_is_split_into_executors_workers_and_the_rest():
    # A sum larger than ATen's grain, at 2 threads: the executor opens a
    # parallel region, whose OpenMP worker is a thread the executor started.
    x = torch.randn(1 << 20, device="openreg")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        x.sum()
        torch.openreg.synchronize()
        with torch.openreg.command_costs() as costs:
            for _ in range(20):
                x.sum()
                torch.openreg.synchronize()  # asleep: the launch gets both
    finally:
        torch.set_num_threads(previous)
    groups = {(g["role"], g["device"]): g for g in costs.thread_groups}
    executors = groups[("executors", 0)]
    assert executors["threads"] >= 1 and executors["cpu_ns"] > 0
    ran = [e for e in costs.executors if e["device"] == 0 and e["slices"]]
    assert ran and all(e["cpu_ns"] > 0 for e in ran)
    # The control plane (gRPC, the listener) is neither.
    assert groups[("other", -1)]["threads"] >= 1
    sums = [op for op in costs.ops if op["op"].startswith("aten::sum")]
    assert sums and sums[0]["kernel_threads"] == 2
    if sums[0]["fewer_threads"] < sums[0]["count"]:
        workers = groups[("openmp_workers", 0)]
        assert workers["threads"] >= 1 and workers["cpu_ns"] > 0
    assert costs.thread_cpu_ns() == sum(g["cpu_ns"]
                                        for g in costs.thread_groups)
    assert "openmp_workers of openreg:0" in costs.table() or \
        sums[0]["fewer_threads"] == sums[0]["count"]


def test_openreg_ctl_starts_reads_and_stops_the_profile():
    started = _ctl("costs", "start")
    assert started.returncode == 0, started.stderr
    assert "cost profile on" in started.stdout
    x = torch.ones(4, device="openreg")
    (x + 1).cpu()
    read = _ctl("--json", "costs")
    assert read.returncode == 0, read.stderr
    reply = json.loads(read.stdout)
    assert reply["enabled"] is True
    assert any(op["op"] == "aten::add.Tensor" for op in reply["ops"])
    assert any(group["role"] == "executors"
               for group in reply["thread_groups"])
    text = _ctl("costs")
    assert "executors of openreg:0:" in text.stdout, text.stdout
    assert _ctl("costs", "stop").returncode == 0
    assert json.loads(_ctl("--json", "costs").stdout)["enabled"] is False
    bad = _ctl("costs", "sideways")
    assert bad.returncode == 2 and "unknown action" in bad.stderr


def test_a_daemon_started_with_profile_costs_counts_from_the_start():
    with Daemon(devices=1, extra_args=["--profile_costs"]) as daemon:
        reply = json.loads(_ctl("--json", "costs", daemon=daemon).stdout)
    assert reply["enabled"] is True and reply["ops"] == []


def test_a_changing_learning_rate_makes_no_launch_synchronous():
    # A learning rate scheduled within one binary exponent: the optimizer's
    # add_(alpha=-lr) needs no new check at each step (meta_cache.cc,
    # ScalarValuesUnchecked).
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(8, 16, device="openreg")

    def step(lr):
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    for _ in range(2):
        step(0.05)
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for t in range(5):
            step(0.05 - 0.001 * t)
    assert costs.commands() > 0
    assert costs.synchronous_launches() == 0, costs.table()


def test_a_scalar_kernels_check_still_raises_at_the_call():
    # Integer division by a zero scalar is checked by the kernel: a cached
    # division by 3 does not let a division by 0 through asynchronously.
    x = torch.arange(6, device="openreg")
    assert torch.div(x, 3, rounding_mode="floor").cpu().tolist() == \
        [0, 0, 0, 1, 1, 1]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(x, 0, rounding_mode="floor")
