"""Several client processes on one daemon; a daemon that dies; a client
that dies. Each test owns its daemon and stops it by pid."""

import signal
import subprocess
import sys
import time

import pytest

from daemon_fixture import Daemon, run_python

WORKER = """
import sys, torch
device = f"openreg:{sys.argv[1]}"
torch.manual_seed(int(sys.argv[1]))
a_cpu = torch.randn(128, 128)
a = a_cpu.to(device)
for _ in range(20):
    a = a @ a.t() / 128 + 1
    a_cpu = a_cpu @ a_cpu.t() / 128 + 1
torch.testing.assert_close(a.cpu(), a_cpu, rtol=1e-4, atol=1e-4)
print("ok", device)
"""

STATS = """
import json, torch
print(json.dumps(torch.openreg.daemon_stats()))
"""


def spawn(code, env, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_processes_share_one_daemon():
    with Daemon(devices=2) as daemon:
        workers = [spawn(WORKER, daemon.env(), index) for index in (0, 1)]
        outputs = [w.communicate(timeout=300) for w in workers]
        for worker, (out, err) in zip(workers, outputs):
            assert worker.returncode == 0, err
        assert "ok openreg:0" in outputs[0][0]
        assert "ok openreg:1" in outputs[1][0]
        result = run_python(STATS, daemon.env())
        import json
        stats = json.loads(result.stdout)
        assert stats["sessions_served"] >= 3


def test_daemon_killed_mid_work_gives_clear_error_quickly():
    code = """
import sys, time, torch
x = torch.ones(256, 256, device="openreg")
print("ready", flush=True)
start = time.monotonic()
try:
    while True:
        x = (x @ x) / 256
        x.sum().item()
except RuntimeError as error:
    print("ERROR after %.1fs: %s" % (time.monotonic() - start, error), flush=True)
"""
    with Daemon(devices=1) as daemon:
        client = spawn(code, daemon.env())
        assert client.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        daemon.kill()
        out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err
    assert "ERROR" in out, out + err
    message = out.lower()
    assert "device lost" in message or "daemon" in message


def test_client_killed_mid_work_frees_its_memory_and_daemon_serves_others():
    hog = """
import torch
blocks = [torch.ones(64, 1024, 1024, device="openreg") for _ in range(4)]  # 1 GiB
torch.openreg.synchronize()
print("holding", flush=True)
while True:
    blocks[0].add_(1)
"""
    import json
    with Daemon(devices=1, memory_per_device="4GiB") as daemon:
        client = spawn(hog, daemon.env())
        assert client.stdout.readline().strip() == "holding"
        stats = json.loads(run_python(STATS, daemon.env()).stdout)
        assert stats["devices"][0]["allocated_bytes"] >= 1024**3
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=30)
        deadline = time.monotonic() + 20
        while True:
            stats = json.loads(run_python(STATS, daemon.env()).stdout)
            if stats["devices"][0]["allocated_bytes"] < 1024**2:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.2)
        other = run_python(WORKER.replace("sys.argv[1]", "'0'"), daemon.env())
        assert other.returncode == 0, other.stderr
        assert daemon.alive()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
