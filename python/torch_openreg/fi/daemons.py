"""The private openreg-daemon of one run: started without waiting (so the
next run's daemon boots while the current run executes), on its own socket
in a fresh /tmp folder, queried with openreg-ctl, stopped by its pid.
"""

import json
import subprocess

import torch_openreg
from torch_openreg._private_daemon import DaemonError, PrivateDaemon

__all__ = ["DaemonError", "RunDaemon", "ctl"]


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


class RunDaemon(PrivateDaemon):
    """One daemon process, started at once. `flags` are added to --socket
    and --idle_exit_seconds (which ends it should the campaign die); `env`
    holds variables added to this process's environment."""

    def __init__(self, flags, log_path, idle_exit_seconds, env=None):
        super().__init__(
            [f"--idle_exit_seconds={idle_exit_seconds}", *flags],
            folder_prefix="openreg-fi-", log_path=log_path, env=env,
            new_session=True, stop_timeout=10)
        self.launch()

    def ctl(self, *args):
        return ctl(self.socket, *args)

    def discard(self):
        """SIGKILL by pid, without waiting (stop() reaps it later): once a
        run's fault log is read nothing of its daemon is needed, and a
        clean shutdown would cost ~0.1 s of CPU that the next runs need.
        The daemon keeps no state outside its process but the socket
        folder, which stop() removes."""
        self.kill(wait=False)
