"""Test helpers: private daemons (torch_openreg.testing.Daemon), child
process environments and socket folders. Every daemon has its own socket in
a fresh /tmp folder (never under $TEST_TMPDIR: unix socket paths must stay
under 108 bytes) and is stopped by its pid; nothing is killed by name."""

import atexit
import contextlib
import os
import subprocess
import sys
import tempfile
import time

import torch_openreg.testing


def python_env(**overrides):
    """Environment for child Python processes: same sys.path (so they find
    the same torch_openreg), plus overrides (None removes a variable)."""
    return torch_openreg.testing.child_env(
        **{"PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           **overrides})


@contextlib.contextmanager
def socket_folder():
    """A fresh /tmp folder for a daemon socket, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="openreg-test-", dir="/tmp") as folder:
        yield folder


def read_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Daemon(torch_openreg.testing.Daemon):
    """The package's private daemon, with child environments that also
    carry this process's sys.path (so children find the same package)."""

    def env(self, **overrides):
        return super().env(base=python_env(), **overrides)


def module_daemon(**daemon_args):
    """One private daemon for a whole test module:

        DAEMON, setup_module, teardown_module = module_daemon(devices=2)

    pytest calls the two functions around the module; the module's process
    uses the daemon from its first device use on."""
    daemon = Daemon(**daemon_args)
    return daemon, lambda: daemon.start().use(), daemon.stop


_process_daemon = None


def process_daemon(**daemon_args):
    """One private daemon for this whole test process, started now and used
    from here on; stopped (by pid) when the process exits. For modules that
    must have a daemon before import-time code touches the device (importing
    torch.testing._internal asks whether openreg is available, which
    connects). A py_test module that runs pytest.main() on itself is imported
    twice (as __main__ and by pytest): both get this one daemon."""
    global _process_daemon
    if _process_daemon is None:
        _process_daemon = Daemon(**daemon_args).start().use()
        atexit.register(_process_daemon.stop)
    return _process_daemon


def run_python(code, env, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=timeout)


def descendants():
    """Pids of the live processes descending from this one."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found, frontier = [], [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def assert_no_descendants(grace_seconds=5):
    """Every process this one started has ended (within the grace)."""
    deadline = time.monotonic() + grace_seconds
    while descendants() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert descendants() == []
