"""A private openreg-daemon process: the one launcher behind
torch_openreg.testing.Daemon (tests, benchmarks, examples) and
torch_openreg.fi.daemons.RunDaemon (openreg-fi's runs).

Each daemon gets its own socket in a fresh /tmp folder (unix socket paths
must stay under 108 bytes), is signalled only through its pid, and its
folder is removed when it is stopped. Nothing is ever killed by name.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from torch_openreg import daemon_binary

__all__ = ["DaemonError", "PrivateDaemon"]

# How often wait_ready() looks for the sockets: a daemon is ready within
# tens of milliseconds, and openreg-fi measures that time.
_READY_POLL_SECONDS = 0.002
# The end of the daemon's log that a start failure quotes: the reason (a
# bad flag, a library that does not load) is in its last lines.
_LOG_TAIL_CHARS = 4000


class DaemonError(RuntimeError):
    """A private daemon did not start (or, in openreg-fi, openreg-ctl
    failed)."""


class PrivateDaemon:
    """One openreg-daemon on `<folder>/daemon.sock`, started by launch()
    (which does not wait) and stopped by stop().

    flags: added after --socket. folder_prefix: of the fresh /tmp folder.
    log_path: where its stdout and stderr go (default: daemon.log in the
    folder). env: variables added to this process's environment.
    new_session: run it in a session of its own, out of reach of a Ctrl-C
    meant for this process. stop_timeout: seconds stop() waits after
    SIGTERM before it sends SIGKILL.
    """

    def __init__(self, flags, *, folder_prefix, log_path=None, env=None,
                 new_session=False, stop_timeout=30):
        self.flags = list(flags)
        self.folder_prefix = folder_prefix
        self.extra_env = dict(env or {})
        self.new_session = new_session
        self.stop_timeout = stop_timeout
        self._log_path = log_path
        # Set by launch(): an unlaunched daemon leaves nothing behind.
        self.folder = None
        self.process = None
        self._killed = False  # by kill(): a crash made on purpose
        self.started = None
        self.ready_after = None  # seconds from launch to ready

    @property
    def socket(self):
        return os.path.join(self.folder, "daemon.sock")

    @property
    def log_path(self):
        if self._log_path is not None:
            return self._log_path
        return os.path.join(self.folder, "daemon.log")

    @property
    def args(self):
        return [daemon_binary(), f"--socket={self.socket}", *self.flags]

    @property
    def pid(self):
        return self.process.pid

    @property
    def returncode(self):
        return self.process.poll()

    def launch(self):
        """Starts the process in a fresh folder, without waiting for it."""
        self.folder = tempfile.mkdtemp(prefix=self.folder_prefix, dir="/tmp")
        self.started = time.monotonic()
        env = {**os.environ, **self.extra_env} if self.extra_env else None
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.args, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, start_new_session=self.new_session)
        return self

    def wait_ready(self, timeout=60):
        """Waits until both sockets (control and attach) exist, at most
        `timeout` seconds from launch. DaemonError, quoting the daemon's
        log (a bad flag names itself there), when it exits first or takes
        longer."""
        deadline = self.started + timeout
        while not all(os.path.exists(self.socket + suffix)
                      for suffix in ("", ".attach")):
            if self.process.poll() is not None:
                raise DaemonError(
                    f"openreg-daemon exited with status "
                    f"{self.process.returncode} at start:\n"
                    f"{self.log()[-_LOG_TAIL_CHARS:]}")
            if time.monotonic() > deadline:
                raise DaemonError(
                    f"openreg-daemon did not start within {timeout} s:\n"
                    f"{self.log()[-_LOG_TAIL_CHARS:]}")
            time.sleep(_READY_POLL_SECONDS)
        if self.ready_after is None:
            self.ready_after = time.monotonic() - self.started
        return self

    def log(self):
        """What the daemon wrote so far ("" before launch)."""
        if self.folder is None:
            return ""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill(self, wait=True):
        """SIGKILL by pid (a daemon crash); waits for the exit unless
        `wait` is false (stop() reaps it then)."""
        if self.alive():
            self._killed = True
            self.process.send_signal(signal.SIGKILL)
            if wait:
                self.process.wait(timeout=self.stop_timeout)

    def stop(self):
        """SIGTERM by pid (SIGKILL after stop_timeout seconds), waits for
        the exit and removes the folder. Idempotent."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=self.stop_timeout)
        elif (self.process is not None and self.process.returncode != 0 and
              not self._killed):
            # It ended on its own before being stopped: say how, with its
            # log, before the folder (and the log) go.
            sys.stderr.write(
                f"openreg-daemon (pid {self.process.pid}) had already ended "
                f"with status {self.process.returncode}; its log:\n"
                f"{self.log()[-_LOG_TAIL_CHARS:]}\n")
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
