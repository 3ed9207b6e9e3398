"""Collectives through the occl backend, reported like nccl-tests: the time
of one all_reduce, its algorithm bandwidth (bytes / time) and bus bandwidth
(busbw = algbw x 2(n-1)/n), at 2 and 4 local ranks (processes; ranks on
devices rank % 2 of the bench's daemon). Baselines in the same run:

- n single-thread memcpys of the same size: the memory-traffic floor of a
  one-pass all_reduce (every rank's buffer read once and written once); the
  issue's bar is <= 1.25x that time;
- gloo's all_reduce of the same size on CPU tensors over loopback, the
  same processes' count (bar: occl's busbw >= 3x gloo's, a time ratio
  <= 0.33x);
- small all_reduce (4 KiB): occl's median against gloo's;
- a DDP training step of an MLP on 2 ranks against the single-process step
  on openreg with the same global batch (bar: <= 1.5x);
- 4 ranks on two daemons standing for two hosts: the hierarchical
  all_reduce against gloo alone on the same 4 ranks;
- a rank's death: the time from SIGKILL of a rank to the other rank's
  error, p50 and max over 10 kills, against the group's timeout;
- all_reduce with a fault plan armed in every rank that never matches
  (the fault hook then sees every command) against the same run without
  one (bar: busbw >= 0.99x, a time ratio <= 1.01x).

The daemon does the work: its CPU per all_reduce is printed beside the
ranks' own."""

import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LARGE = 64 << 20
SMALL = 4 << 10


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _process_cpu(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _daemon_pid():
    with open(os.environ.get("OPENREG_DAEMON_SOCKET", "") + ".lock") as lock:
        return int(lock.read().split()[0])


def _run(backend, world, size, iterations, sockets=None, **extra_env):
    """(median seconds, rank 0's CPU per all_reduce, daemon CPU per
    all_reduce). `sockets` (by rank): the daemon of each rank, default the
    bench's; `extra_env` is added to the ranks' environment."""
    port = _free_port()
    daemon = _daemon_pid()
    daemon_before = _process_cpu(daemon)
    sockets = sockets or [os.environ.get("OPENREG_DAEMON_SOCKET", "")] * world
    processes = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "collective_ranks.py"), backend,
         str(rank), str(world), str(port), str(size), str(iterations)],
        env={**os.environ, "OPENREG_DAEMON_SOCKET": sockets[rank],
             **extra_env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in range(world)]
    outputs = [process.communicate(timeout=600) for process in processes]
    daemon_cpu = (_process_cpu(daemon) - daemon_before) / iterations
    for process, (_, stderr) in zip(processes, outputs):
        if process.returncode != 0:
            raise RuntimeError(f"{backend} rank failed: {stderr[-2000:]}")
    line = [l for l in outputs[0][0].splitlines() if l.startswith("RESULT ")]
    result = json.loads(line[-1][len("RESULT "):])
    # The daemon's CPU includes the ranks' attach and setup: an upper bound.
    return statistics.median(result["samples"]), result["cpu"], daemon_cpu


def _memcpy_seconds(torch, size):
    torch.set_num_threads(1)
    source = torch.ones(size // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return best


def collectives(torch, scale):
    rows = []
    iterations = max(3, int(10 * scale))
    threads = torch.get_num_threads()
    memcpy = _memcpy_seconds(torch, LARGE)
    torch.set_num_threads(threads)
    for world in (2, 4):
        occl, occl_cpu, daemon_cpu = _run("occl", world, LARGE, iterations)
        gloo, gloo_cpu, _ = _run("gloo", world, LARGE, iterations)
        bus = 2 * (world - 1) / world
        print(f"all_reduce 64 MiB float32, {world} ranks: occl "
              f"{occl * 1e3:.1f} ms (algbw {LARGE / occl / 1e9:.2f} GB/s, "
              f"busbw {LARGE / occl * bus / 1e9:.2f} GB/s; rank 0 CPU "
              f"{occl_cpu * 1e3:.1f} ms, daemon CPU <= "
              f"{daemon_cpu * 1e3:.1f} ms per call), gloo "
              f"{gloo * 1e3:.1f} ms (busbw {LARGE / gloo * bus / 1e9:.2f} "
              f"GB/s; rank 0 CPU {gloo_cpu * 1e3:.1f} ms), {world} memcpys "
              f"{world * memcpy * 1e3:.1f} ms")
        rows.append((f"all_reduce 64 MiB, {world} ranks",
                     f"{world} memcpys", world * memcpy, occl))
        rows.append((f"all_reduce 64 MiB, {world} ranks", "gloo (CPU)", gloo,
                     occl))
        small_occl, _, _ = _run("occl", world, SMALL,
                                max(50, int(300 * scale)))
        small_gloo, _, _ = _run("gloo", world, SMALL,
                                max(50, int(300 * scale)))
        rows.append((f"all_reduce 4 KiB p50, {world} ranks", "gloo (CPU)",
                     small_gloo, small_occl))
    rows.append(_ddp_row(torch, max(5, int(20 * scale))))
    rows.append(_two_hosts_row(iterations))
    rows.append(_death_row(kills=10))
    rows.append(_armed_plan_row(iterations))
    return rows


def _armed_plan_row(iterations):
    """Alternating runs without and with the plan (5 of each: one run's
    median varies by 10% between runs on 2 cores); the medians of each."""
    import tempfile

    plan = {"faults": [{"name": "never matches", "corrupt_input": {},
                        "trigger": {"kind": "collective", "op": "broadcast",
                                    "rank": 1}}]}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as path:
        json.dump(plan, path)
        path.flush()
        bare, armed = [], []
        for _ in range(5):
            armed.append(_run("occl", 2, LARGE, iterations,
                              OPENREG_FAULT_PLAN=path.name)[0])
            bare.append(_run("occl", 2, LARGE, iterations)[0])
    bare, armed = statistics.median(bare), statistics.median(armed)
    print(f"all_reduce 64 MiB, 2 ranks, a fault plan armed that never "
          f"matches: {armed * 1e3:.2f} ms (busbw "
          f"{LARGE / armed / 1e9:.2f} GB/s) against {bare * 1e3:.2f} ms "
          f"without (busbw {LARGE / bare / 1e9:.2f} GB/s): busbw ratio "
          f"{bare / armed:.3f}")
    return ("all_reduce 64 MiB, 2 ranks, plan armed (no match)", "no plan",
            bare, armed)


def _death_row(kills):
    """Kills rank 1 of 2 (SIGKILL, by pid) while rank 0 waits for it in an
    all_reduce, `kills` times; the time until rank 0's DistBackendError."""
    import signal

    delays = []
    timeout = None
    for _ in range(kills):
        port = _free_port()
        ranks = [subprocess.Popen(
            [sys.executable, os.path.join(HERE, "collective_ranks.py"),
             "death", str(rank), "2", str(port), "0", "0"],
            env=dict(os.environ), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True) for rank in range(2)]
        try:
            for rank in ranks:
                line = rank.stdout.readline()
                if line.strip() != "READY":
                    raise RuntimeError(f"a rank did not start: {line!r} "
                                       f"{rank.stderr.read()[-2000:]}")
            time.sleep(0.3)  # rank 0 is waiting in the daemon by now
            killed_at = time.time()
            os.kill(ranks[1].pid, signal.SIGKILL)
            stdout, stderr = ranks[0].communicate(timeout=600)
        finally:
            for rank in ranks:
                if rank.poll() is None:
                    rank.kill()
                rank.communicate()
        line = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            raise RuntimeError(f"rank 0 printed no result: {stderr[-2000:]}")
        result = json.loads(line[-1][len("RESULT "):])
        if result["error"] is None or "rank 1 (pid" not in result["error"]:
            raise RuntimeError(f"rank 0's error does not name rank 1: "
                               f"{result['error']}")
        delays.append(result["error_at"] - killed_at)
        timeout = result["timeout"]
    p50 = statistics.median(delays)
    print(f"a rank's death to the survivor's error over {kills} kills: p50 "
          f"{p50 * 1e3:.1f} ms, max {max(delays) * 1e3:.1f} ms (group "
          f"timeout {timeout:.0f} s)")
    return ("rank death to error p50, 2 ranks", "group timeout", timeout, p50)


def _two_hosts_row(iterations):
    """4 ranks on two daemons standing for two hosts (2 ranks each):
    hierarchical all_reduce of 64 MiB against gloo alone on the same 4
    ranks."""
    import torch_openreg.testing

    with torch_openreg.testing.Daemon(devices=2) as other:
        sockets = [os.environ.get("OPENREG_DAEMON_SOCKET", "")] * 2 + [
            other.socket] * 2
        occl, _, _ = _run("occl", 4, LARGE, iterations, sockets)
    gloo, _, _ = _run("gloo", 4, LARGE, iterations)
    bus = 2 * 3 / 4
    print(f"all_reduce 64 MiB, 4 ranks on two daemons: occl {occl * 1e3:.1f}"
          f" ms (busbw {LARGE / occl * bus / 1e9:.2f} GB/s), gloo "
          f"{gloo * 1e3:.1f} ms (busbw {LARGE / gloo * bus / 1e9:.2f} GB/s)")
    return ("all_reduce 64 MiB, 4 ranks, 2 daemons", "gloo (CPU)", gloo,
            occl)


def _ddp_row(torch, iterations):
    sys.path.insert(0, HERE)
    import collective_ranks

    model = collective_ranks.mlp().to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(collective_ranks.GLOBAL_BATCH, 256).to("openreg")
    y = torch.randint(0, 10, (collective_ranks.GLOBAL_BATCH,)).to("openreg")
    samples = []
    for i in range(iterations + 3):
        start = time.perf_counter()
        collective_ranks.mlp_step(model, optimizer, x, y)
        torch.openreg.synchronize()
        if i >= 3:
            samples.append(time.perf_counter() - start)
    single = statistics.median(samples)
    # As torchrun runs them (OMP_NUM_THREADS=1 per rank when it starts
    # several): the ranks' kernels then share the cores instead of
    # oversubscribing them; the single process keeps every core.
    ddp, rank_cpu, daemon_cpu = _run("ddp", 2, 0, iterations,
                                     OMP_NUM_THREADS="1")
    print(f"DDP step, MLP, global batch {collective_ranks.GLOBAL_BATCH}, 2 "
          f"ranks of 1 thread (torchrun's default): {ddp * 1e3:.2f} ms "
          f"(rank 0 CPU {rank_cpu * 1e3:.2f} ms, "
          f"daemon CPU <= {daemon_cpu * 1e3:.2f} ms per step); one process "
          f"on openreg: {single * 1e3:.2f} ms")
    return ("DDP step MLP, 2 ranks", "1 process", single, ddp)


SECTIONS = [collectives]
