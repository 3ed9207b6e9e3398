"""The sync-timeout watchdog (torch.openreg.set_sync_timeout,
OPENREG_SYNC_TIMEOUT): a synchronizing call, or a launch into a full
command ring, on a hung device raises a clear error instead of waiting
forever. The hang is a daemon stopped with
SIGSTOP (alive, but running nothing), resumed with SIGCONT."""

import os
import signal
import sys
import time

import pytest
import torch

from daemon_fixture import process_daemon, run_python

DAEMON = process_daemon(devices=1)


def _stop_daemon():
    """SIGSTOP, then waits until every thread of the daemon is stopped:
    delivery is asynchronous, and a worker still running could execute the
    work queued next."""
    os.kill(DAEMON.pid, signal.SIGSTOP)
    tasks = f"/proc/{DAEMON.pid}/task"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as stat:
                    states.append(stat.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue
        if states and all(state == "T" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError("the daemon did not stop")


def test_the_timeout_is_off_by_default_and_validated():
    assert torch.openreg.get_sync_timeout() == 0
    with pytest.raises(ValueError, match="seconds >= 0"):
        torch.openreg.set_sync_timeout(-1)
    torch.openreg.set_sync_timeout(2.5)
    assert torch.openreg.get_sync_timeout() == 2.5
    torch.openreg.set_sync_timeout(0)


def test_a_hung_device_turns_synchronize_into_an_error():
    x = torch.ones(16, device="openreg")
    # Before the stop: the op's signature is checked once (a synchronous
    # first launch), and a freed block of the size stays in the cache, so
    # that the launch below needs neither the daemon nor an allocation.
    (x * 2).sum()
    torch.openreg.synchronize()
    try:
        _stop_daemon()
        torch.openreg.set_sync_timeout(0.5)
        y = x * 2  # queued; the stopped daemon never runs it
        start = time.monotonic()
        with pytest.raises(
                RuntimeError,
                match=r"synchronization timed out after 500ms: stream \d+ on "
                      r"openreg:0 has completed command \d+ and was waited "
                      r"on for command \d+"):
            torch.openreg.synchronize()
        waited = time.monotonic() - start
        assert 0.4 < waited < 5, waited
        # A copy to the host is a synchronizing call too.
        with pytest.raises(RuntimeError, match="timed out"):
            y.cpu()
    finally:
        os.kill(DAEMON.pid, signal.SIGCONT)
        torch.openreg.set_sync_timeout(0)
    # Resumed: the queued work completes and nothing was lost.
    torch.openreg.synchronize()
    assert torch.equal(y.cpu(), torch.full((16,), 2.0))


def test_a_launch_into_a_full_ring_of_a_hung_device_times_out():
    x = torch.ones(4, device="openreg")
    x.add_(1)  # the signature's checked first launch, before the stop
    torch.openreg.synchronize()
    launched = 0
    try:
        _stop_daemon()
        torch.openreg.set_sync_timeout(0.5)
        with pytest.raises(RuntimeError,
                           match=r"timed out after 500ms: .* waited for room "
                                 r"in its command ring for command \d+"):
            for launched in range(1, 1_000_000):
                x.add_(1)  # fills the stopped daemon's ring
    finally:
        os.kill(DAEMON.pid, signal.SIGCONT)
        torch.openreg.set_sync_timeout(0)
    assert launched > 1
    # Every launch that returned is run, and the refused one is not.
    torch.openreg.synchronize()
    assert torch.equal(x.cpu(), torch.full((4,), 2.0 + launched - 1))


def test_the_environment_variable_sets_the_timeout():
    code = """
import torch
print(torch.openreg.get_sync_timeout())
"""
    result = run_python(code, DAEMON.env(OPENREG_SYNC_TIMEOUT="1.5"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "1.5"
    result = run_python(code, DAEMON.env(OPENREG_SYNC_TIMEOUT="soon"))
    assert result.stdout.strip() == "0.0"
    assert "ignoring OPENREG_SYNC_TIMEOUT=soon" in result.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
