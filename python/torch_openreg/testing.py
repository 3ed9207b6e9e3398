"""A private openreg-daemon for tests, benchmarks and experiments.

    with torch_openreg.testing.Daemon(devices=2) as daemon:
        daemon.use()              # this process will attach to it
        x = torch.ones(3, device="openreg")

Each daemon gets its own socket in a fresh /tmp folder (unix socket paths
must stay under 108 bytes) and is stopped by its pid; its folder is removed
afterwards. Nothing is ever killed by name.
"""

import os

from torch_openreg._private_daemon import PrivateDaemon

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


class Daemon(PrivateDaemon):
    """One openreg-daemon process on a private socket."""

    def __init__(self, devices=2, memory_per_device="2GiB", extra_args=()):
        super().__init__([f"--devices={devices}",
                          f"--memory_per_device={memory_per_device}",
                          *extra_args],
                         folder_prefix="openreg-test-")

    def start(self, timeout=30):
        """Starts the daemon and waits until it serves; RuntimeError (with
        its log) if it exits or takes longer than `timeout` seconds."""
        self.launch()
        try:
            return self.wait_ready(timeout)
        except RuntimeError:
            self.stop()
            raise

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

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
