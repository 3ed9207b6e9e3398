"""Starts the ranks of a distributed_ranks.py scenario as processes on the
test process's daemon (or given daemons), on a free port, and collects
their results (shared by the torch.distributed test modules)."""

import json
import os
import socket
import subprocess
import sys

from daemon_fixture import process_daemon, python_env

import distributed_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "distributed_ranks.py")
TIMEOUT = 240
DAEMON = process_daemon(devices=2, memory_per_device="1GiB")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def communicate_all(processes, timeout=TIMEOUT):
    """(stdout, stderr) of every process; those still running after
    `timeout` (or when one times out) are killed, none is left behind."""
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=timeout))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def start_ranks(scenario, world, sockets=None, **extra_env):
    """Starts `world` ranks of `scenario` on a free port; returns their
    processes. `sockets` (by rank) says which daemon each rank uses;
    default: this module's."""
    port = free_port()
    sockets = sockets or [DAEMON.socket] * world
    return [subprocess.Popen(
        [sys.executable, WORKER, scenario, str(rank), str(world), str(port)],
        env=python_env(OPENREG_DAEMON_SOCKET=sockets[rank],
                       OPENREG_AUTOSPAWN="0", **extra_env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in range(world)]


def result_of(rank, stdout, stderr):
    """The RESULT a rank printed last."""
    lines = [line for line in stdout.splitlines()
             if line.startswith("RESULT ")]
    assert lines, f"rank {rank} printed no result:\n{stdout}\n{stderr}"
    return json.loads(lines[-1][len("RESULT "):])


def run_ranks(scenario, world, timeout=TIMEOUT, silent_ranks=(),
              sockets=None, **extra_env):
    """Starts `world` ranks of `scenario`; returns (results by rank, the
    completed processes). Ranks in `silent_ranks` exit without a result."""
    processes = start_ranks(scenario, world, sockets, **extra_env)
    outputs = communicate_all(processes, timeout)
    results = []
    for rank, (stdout, stderr) in enumerate(outputs):
        if rank in silent_ranks:
            assert "RESULT " not in stdout, (
                f"rank {rank} should have exited: {stdout}")
            results.append(None)
            continue
        results.append(result_of(rank, stdout, stderr))
    return results, processes


def encoded(tensor):
    return distributed_ranks.encode(tensor)
