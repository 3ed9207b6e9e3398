"""The inject step: runs of the program, each with one fault in its own
daemon (--fault_plan), `jobs` at a time, classified and appended to
runs.jsonl as they finish.

Each worker thread runs one run at a time. As soon as its program has
started, it picks its next run and starts that run's daemon, so daemon
start-up overlaps the current run instead of adding to it.
"""

import json
import os
import threading
import time

from torch_openreg.fi.classify import classify
from torch_openreg.fi.daemons import DaemonError
from torch_openreg.fi.execution import (campaign_env, execute, run_result,
                                        start_daemon)
from torch_openreg.fi.faults import fault_for_run, populations
from torch_openreg.fi.golden import golden_output, profile_golden
from torch_openreg.fi.launch import Launcher, Program
from torch_openreg.fi.progress import Progress

__all__ = ["Campaign", "fault_log", "make_record", "run_campaign",
           "start_fault_daemon"]


def idle_exit_seconds(timeout):
    """A daemon waiting for its run ends by itself after this long (should
    the campaign die): at most one run of another job comes first."""
    return int(2 * timeout + 60)


def start_fault_daemon(config, spec, run_dir, timeout):
    """Writes run_dir/plan.json and starts its daemon (not waited for)."""
    plan = f"{run_dir}/plan.json"
    with open(plan, "w") as f:
        json.dump({"faults": [spec]}, f, indent=1)
    return start_daemon(config, [f"--fault_plan={plan}"],
                        f"{run_dir}/daemon.log", idle_exit_seconds(timeout))


def fault_log(daemon):
    """(fired, records, note) from the daemon's fault log: fired is None
    when the log cannot be read (the daemon died, e.g. by daemon_abort)."""
    if not daemon.alive():
        return None, [], f"the daemon exited ({daemon.returncode})"
    try:
        records = daemon.ctl("fault", "log").get("records", [])
    except DaemonError as error:
        return None, [], str(error)
    return bool(records), records, ""


def make_record(config, golden, reference, index, spec, daemon, run_dir,
                execution, wall_started=None):
    """The record of a run that ended (discards its daemon)."""
    returncode, timed_out, seconds = execution
    fired, records, note = fault_log(daemon)
    daemon.discard()
    result = run_result(config, golden["compare"], run_dir, returncode,
                        timed_out, seconds)
    outcome, detail = classify(result, reference, config["rtol"],
                               config["atol"])
    model = next(key for key in spec if key not in
                 ("name", "seed", "daemon_wide", "trigger"))
    record = {"run": index, "model": model, "fault": spec,
              "outcome": outcome, "detail": detail, "fired": fired,
              "records": records, "returncode": returncode,
              "seconds": round(seconds, 4), "error": result.error,
              "time": time.time()}
    if note:
        record["fault_log_note"] = note
    if wall_started is not None:
        record["overhead"] = round(
            time.monotonic() - wall_started - seconds, 4)
    return record


class Campaign:
    """Runs given indices of a campaign (store: CampaignDir)."""

    def __init__(self, store, config, golden, launcher, jobs, progress):
        self.store = store
        self.config = config
        self.golden = golden
        self.launcher = launcher
        self.jobs = jobs
        self.progress = progress
        self.pools = populations(config, golden["profile"])
        self.reference = golden_output(store, config, golden)
        self.timeout = golden["timeout"]
        self._lock = threading.Lock()
        self._queue = []
        self._stop = threading.Event()
        self._errors = []

    def fault(self, index):
        return fault_for_run(self.config, self.pools, index)

    def _next_job(self, owned):
        with self._lock:
            if not self._queue or self._stop.is_set():
                return None
            index = self._queue.pop(0)
        spec = self.fault(index)
        run_dir = self.store.run_dir(index, fresh=True)
        daemon = start_fault_daemon(self.config, spec, run_dir, self.timeout)
        owned.append(daemon)
        return index, spec, daemon, run_dir

    def _worker(self):
        owned = []  # daemons this worker started: all stopped at the end
        retired = []  # discarded, reaped after the next run (no waiting)
        try:
            job = self._next_job(owned)
            while job is not None and not self._stop.is_set():
                index, spec, daemon, run_dir = job
                wall_started = time.monotonic()
                following = []
                execution = execute(
                    self.launcher, daemon, run_dir, str(index), self.timeout,
                    self._stop,
                    lambda: following.append(self._next_job(owned)))
                if execution is None:
                    break
                record = make_record(self.config, self.golden,
                                     self.reference, index, spec, daemon,
                                     run_dir, execution, wall_started)
                with self._lock:
                    self.store.append_run(record)
                    self.progress.update(record["outcome"])
                for previous in retired:
                    previous.stop()
                retired = [daemon]
                owned.remove(daemon)
                job = following[0] if following else self._next_job(owned)
        except BaseException as error:  # noqa: BLE001 - ends the campaign
            self._errors.append(error)
            self._stop.set()
        finally:
            for daemon in owned + retired:
                daemon.stop()

    def run(self, indices):
        """Runs `indices`; Ctrl-C stops every run (recorded runs stay)."""
        self._queue = list(indices)
        workers = [threading.Thread(target=self._worker)
                   for _ in range(min(self.jobs, len(indices)))]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                while worker.is_alive():
                    worker.join(0.2)
        except KeyboardInterrupt:
            self._stop.set()
            for worker in workers:
                worker.join()
            raise
        finally:
            self.progress.finish()
        if self._errors:
            raise self._errors[0]


def run_campaign(store, config, runs, jobs, use_zygote, quiet=False):
    """Runs (or resumes) the campaign in `store` up to `runs` runs: the
    golden runs first if the folder has none, then the missing runs.
    Returns (runs done in this call, their runs per minute)."""
    os.makedirs(store.path, exist_ok=True)
    launcher = Launcher(Program(config["command"], config["cwd"]),
                        use_zygote, store.file("zygote.log"),
                        campaign_env(config))
    try:
        launcher.wait_ready()
        golden = store.load_golden()
        if golden is None:
            golden = profile_golden(store, config, launcher)
            populations(config, golden["profile"])  # no empty population
            store.save_config(config)
            store.save_golden(golden)
        done = store.read_runs()
        finished = {record["run"] for record in done}
        todo = [index for index in range(runs) if index not in finished]
        counts = {}
        for record in done:
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
        progress = Progress(max(runs, len(finished)), len(finished), counts,
                            enabled=not quiet)
        if todo:
            Campaign(store, config, golden, launcher, jobs,
                     progress).run(todo)
        return len(todo), progress.rate()
    finally:
        launcher.close()
