"""Starting the program under test: forked from the zygote when it is a
Python script (the default), else as a plain subprocess. Either way the run
leads its own process group, so killing the group ends the run and
everything it started.
"""

import os
import select
import signal
import subprocess
import sys

from torch_openreg.fi.zygote import Zygote

__all__ = ["Launcher", "Program", "RUN_DIR"]

# Replaced in the program's arguments (and --output-file) by the run's own
# folder, for programs that write their results to a file.
RUN_DIR = "{run_dir}"
# How long a run that overran its timeout gets to end after SIGTERM.
TERMINATE_SECONDS = 10


def _is_this_python(name):
    import shutil

    path = shutil.which(name)
    return path is not None and \
        os.path.realpath(path) == os.path.realpath(sys.executable)


class Program:
    """The command under test, run in `cwd`. `script` is set when the
    command is a Python script (`train.py ...`, or `python3 train.py ...`
    with this interpreter)."""

    def __init__(self, command, cwd):
        self.command = list(command)
        self.cwd = cwd
        self.script = None
        if command[0].endswith(".py"):
            self.script, self.args = command[0], command[1:]
        elif (len(command) > 1 and command[1].endswith(".py")
              and os.path.basename(command[0]).startswith("python")
              and _is_this_python(command[0])):
            self.script, self.args = command[1], command[2:]

    def argv(self, run_dir):
        """The command line with {run_dir} replaced (scripts: their argv,
        starting with the script's name)."""
        command = ([self.script] + self.args) if self.script else self.command
        return [arg.replace(RUN_DIR, run_dir) for arg in command]


class SubprocessRun:
    """A run started with subprocess (non-Python commands, --no-zygote)."""

    def __init__(self, argv, env, cwd, stdout, stderr):
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            self._process = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True)
        self.pid = self._process.pid
        # Popen.wait(timeout) polls with sleeps of up to 50 ms; a pidfd
        # wakes us when the process ends.
        self._pidfd = os.pidfd_open(self.pid)

    @property
    def returncode(self):
        return self._process.returncode

    def wait(self, timeout=None):
        if self._process.returncode is None:
            readable, _, _ = select.select([self._pidfd], [], [], timeout)
            if not readable:
                return False
            self._process.wait()
            os.close(self._pidfd)
        return True

    def kill(self):
        if self._process.returncode is None:
            # A launcher such as torchrun starts its workers in sessions of
            # their own, out of reach of killpg: SIGTERM lets it stop them
            # (within its own grace period) before it goes.
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            self.wait(TERMINATE_SECONDS)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Launcher:
    """Starts runs of one Program (with a zygote when `use_zygote` and the
    program is a Python script), with the variables `env` added to this
    process's environment. Close it to stop the zygote."""

    def __init__(self, program, use_zygote, zygote_log, env=None):
        self.program = program
        self.env = dict(env or {})
        self.zygote = Zygote(zygote_log, self.env) \
            if use_zygote and program.script else None

    def wait_ready(self):
        if self.zygote is not None:
            self.zygote.wait_ready()

    def spawn(self, run_dir, env, stdout, stderr):
        """Starts the program for the run whose folder is `run_dir`, with
        the variables `env` added to the launcher's environment. The handle
        has pid, returncode, wait(timeout) -> ended, and kill() (of the
        whole process group; harmless once it ended)."""
        argv = self.program.argv(run_dir)
        if self.zygote is not None:
            return self.zygote.spawn(self.program.script, argv, env,
                                     self.program.cwd, stdout, stderr)
        if self.program.script:
            argv = [sys.executable] + argv
        return SubprocessRun(argv, {**os.environ, **self.env, **env},
                             self.program.cwd, stdout, stderr)

    def close(self):
        if self.zygote is not None:
            self.zygote.close()
