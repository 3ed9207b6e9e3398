"""The private openreg-daemon of one run: started without waiting (so the
next run's daemon boots while the current run executes), on its own socket
in a fresh /tmp folder, queried with openreg-ctl, stopped by its pid.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import torch_openreg

__all__ = ["DaemonError", "RunDaemon", "ctl"]


class DaemonError(RuntimeError):
    """A run's daemon did not start, or openreg-ctl failed."""


def ctl(socket, *args):
    """The JSON printed by `openreg-ctl --socket=SOCKET --json ARGS...`."""
    command = [torch_openreg.ctl_binary(), f"--socket={socket}", "--json",
               *args]
    try:
        # Its own session: a Ctrl-C meant for the campaign must not cut a
        # query short.
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=60, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise DaemonError(f"{' '.join(command)}: no answer in 60 s") from None
    if done.returncode != 0:
        raise DaemonError(f"{' '.join(command)} failed ({done.returncode}): "
                          f"{done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


class RunDaemon:
    """One daemon process. `flags` are added to --socket and
    --idle_exit_seconds (which ends it should the campaign die); `env`
    holds variables added to this process's environment."""

    def __init__(self, flags, log_path, idle_exit_seconds, env=None):
        self.folder = tempfile.mkdtemp(prefix="openreg-fi-", dir="/tmp")
        self.socket = os.path.join(self.folder, "daemon.sock")
        self.log_path = log_path
        self.started = time.monotonic()
        self.ready_after = None  # seconds from start to ready
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [torch_openreg.daemon_binary(), f"--socket={self.socket}",
                 f"--idle_exit_seconds={idle_exit_seconds}", *flags],
                env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as log:
                return log.read()[-4000:]
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout=60):
        """Waits until both sockets exist; DaemonError (with the daemon's
        log: a bad --fault_plan names its field) if it exits or times
        out."""
        deadline = self.started + timeout
        while not all(os.path.exists(self.socket + suffix)
                      for suffix in ("", ".attach")):
            if self.process.poll() is not None:
                raise DaemonError(
                    f"openreg-daemon exited with status "
                    f"{self.process.returncode} at start:\n{self.log()}")
            if time.monotonic() > deadline:
                raise DaemonError(f"openreg-daemon did not start within "
                                  f"{timeout} s:\n{self.log()}")
            time.sleep(0.002)
        if self.ready_after is None:
            self.ready_after = time.monotonic() - self.started
        return self

    def alive(self):
        return self.process.poll() is None

    @property
    def returncode(self):
        return self.process.poll()

    def ctl(self, *args):
        return ctl(self.socket, *args)

    def discard(self):
        """SIGKILL by pid, without waiting (stop() reaps it later): once a
        run's fault log is read nothing of its daemon is needed, and a
        clean shutdown would cost ~0.1 s of CPU that the next runs need.
        The daemon keeps no state outside its process but the socket
        folder, which stop() removes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)

    def stop(self):
        """SIGTERM (SIGKILL after 10 s) by pid, waits for the exit, removes
        the socket folder."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
