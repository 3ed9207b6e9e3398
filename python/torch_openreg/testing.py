"""A private openreg-daemon for tests, benchmarks and experiments.

    with torch_openreg.testing.Daemon(devices=2) as daemon:
        daemon.use()              # this process will attach to it
        x = torch.ones(3, device="openreg")

Each daemon gets its own socket in a fresh /tmp folder (unix socket paths
must stay under 108 bytes) and is stopped by its pid; its folder is removed
afterwards. Nothing is ever killed by name.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

from torch_openreg import daemon_binary

__all__ = ["Daemon", "child_env"]


def child_env(base=None, **overrides):
    """A copy of `base` (default: os.environ) with overrides applied; a value
    of None removes the variable."""
    env = dict(os.environ if base is None else base)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


class Daemon:
    """One openreg-daemon process on a private socket."""

    def __init__(self, devices=2, memory_per_device="2GiB", extra_args=()):
        self.flags = [f"--devices={devices}",
                      f"--memory_per_device={memory_per_device}", *extra_args]
        # Created by start(): an unstarted Daemon leaves nothing behind.
        self.folder = None
        self.process = None

    @property
    def socket(self):
        return os.path.join(self.folder, "daemon.sock")

    @property
    def log_path(self):
        return os.path.join(self.folder, "daemon.log")

    @property
    def args(self):
        return [daemon_binary(), f"--socket={self.socket}", *self.flags]

    @property
    def pid(self):
        return self.process.pid

    def start(self, timeout=30):
        self.folder = tempfile.mkdtemp(prefix="openreg-test-", dir="/tmp")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Both the control (gRPC) and the attach socket must exist.
            if all(os.path.exists(self.socket + suffix)
                   for suffix in ("", ".attach")):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        exited = self.process.poll() is not None
        log = self.log()
        self.stop()
        if exited:
            raise RuntimeError(f"openreg-daemon exited early:\n{log}")
        raise RuntimeError(
            f"openreg-daemon did not start within {timeout} s:\n{log}")

    def use(self):
        """Points this process at the daemon (before its first device use)
        and forbids autospawn."""
        os.environ["OPENREG_DAEMON_SOCKET"] = self.socket
        os.environ["OPENREG_AUTOSPAWN"] = "0"
        return self

    def env(self, base=None, **overrides):
        """An environment for child processes that use this daemon."""
        return child_env(base, **{"OPENREG_DAEMON_SOCKET": self.socket,
                                   "OPENREG_AUTOSPAWN": "0", **overrides})

    def log(self):
        if self.folder is None:
            return ""
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        """Simulates a daemon crash (SIGKILL)."""
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
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
