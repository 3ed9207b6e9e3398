"""Starts and stops openreg-daemon instances for tests.

Every daemon gets its own socket in a fresh /tmp folder (unix socket paths
must stay under 108 bytes, so never under $TEST_TMPDIR) and is stopped by
its pid. Nothing is ever killed by name.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import torch_openreg


def python_env(**overrides):
    """Environment for child Python processes: same sys.path (so they find
    the same torch_openreg), plus overrides (None removes a variable)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


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


class Daemon:
    """One openreg-daemon process on a private socket."""

    def __init__(self, devices=2, memory_per_device="2GiB", extra_args=()):
        self.folder = tempfile.mkdtemp(prefix="openreg-test-", dir="/tmp")
        self.socket = os.path.join(self.folder, "daemon.sock")
        self.log_path = os.path.join(self.folder, "daemon.log")
        self.args = [torch_openreg.daemon_binary(), f"--socket={self.socket}",
                     f"--devices={devices}",
                     f"--memory_per_device={memory_per_device}",
                     *extra_args]
        self.process = None

    @property
    def pid(self):
        return self.process.pid

    def start(self, timeout=30):
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.args, stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        attach = self.socket + ".attach"
        while time.monotonic() < deadline:
            if os.path.exists(self.socket) and os.path.exists(attach):
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"openreg-daemon exited early:\n{self.log()}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"openreg-daemon did not start:\n{self.log()}")

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        """Simulates a daemon crash."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self):
        """Stops the daemon (if still running) and removes its folder."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)

    def env(self, **overrides):
        return python_env(OPENREG_DAEMON_SOCKET=self.socket,
                          OPENREG_AUTOSPAWN="0", **overrides)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def run_python(code, env, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=timeout)
