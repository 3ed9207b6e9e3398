"""One execution of the program against one daemon: the files of a run,
its environment, the timeout, and how it ended. Shared by the golden runs,
the injection runs and replays."""

import os
import time

from torch_openreg.fi import RESULT_ENV, RUN_ENV
from torch_openreg.fi.classify import (RunResult, last_error_line,
                                       last_exception, read_output)
from torch_openreg.fi.daemons import RunDaemon
from torch_openreg.fi.launch import RUN_DIR

__all__ = ["campaign_env", "execute", "read_run_output", "run_result",
           "start_daemon"]


def campaign_env(config):
    """Variables every daemon and program of the campaign gets. The
    intra-op thread count is fixed (--threads): it decides the order of
    floating-point reductions, so golden and injected runs must share it;
    and runs executing side by side must not each spin a pool of threads
    per core (two jobs on two cores ran ten times slower)."""
    return {"OMP_NUM_THREADS": str(config["threads"])}


def start_daemon(config, flags, log_path, idle_exit_seconds):
    """A daemon for one run of the campaign (not waited for)."""
    return RunDaemon([f"--devices={config['devices']}",
                      f"--memory_per_device={config['memory_per_device']}",
                      *flags], log_path, idle_exit_seconds,
                     campaign_env(config))


def _paths(run_dir):
    return {name: os.path.join(run_dir, name)
            for name in ("stdout.txt", "stderr.txt", "result.jsonl")}


def read_run_output(config, compare, run_dir):
    """The Output a run left in `run_dir` (compare: the resolved mode)."""
    paths = _paths(run_dir)
    output_file = None
    if config["output_file"]:
        output_file = os.path.join(
            config["cwd"], config["output_file"].replace(RUN_DIR, run_dir))
    return read_output(compare, paths["result.jsonl"], paths["stdout.txt"],
                       output_file)


def execute(launcher, daemon, run_dir, label, timeout, stop=None,
            on_started=None):
    """Runs the program once with `daemon` (waited for here), in
    `run_dir` (a fresh folder), killing its process group after `timeout` seconds (None: no
    limit) or when the `stop` event is set. Calls `on_started()` once the
    program runs. Returns (returncode, timed_out, seconds), or None if
    stopped."""
    paths = _paths(run_dir)
    daemon.wait_ready()
    env = {"OPENREG_DAEMON_SOCKET": daemon.socket, "OPENREG_AUTOSPAWN": "0",
           RESULT_ENV: paths["result.jsonl"], RUN_ENV: label}
    started = time.monotonic()
    run = launcher.spawn(run_dir, env, paths["stdout.txt"],
                         paths["stderr.txt"])
    try:
        if on_started is not None:
            on_started()
        timed_out = False
        while not run.wait(0.1 if stop is not None else timeout):
            if stop is not None and stop.is_set():
                return None
            if timeout is not None and time.monotonic() - started > timeout:
                timed_out = True
                break
        if stop is not None and stop.is_set():
            # An interruption's teardown (the zygote kills its runs) may
            # have ended this run: it did not finish, it is run again on
            # resume.
            return None
        seconds = time.monotonic() - started
    finally:
        # Ends the run if it still goes, and whatever it left in its group.
        run.kill()
        run.wait()
    return run.returncode, timed_out, seconds


def run_result(config, compare, run_dir, returncode, timed_out, seconds):
    """The RunResult of an execution."""
    stderr = os.path.join(run_dir, "stderr.txt")
    return RunResult(returncode, timed_out, seconds,
                     read_run_output(config, compare, run_dir),
                     last_error_line(stderr), last_exception(stderr))
