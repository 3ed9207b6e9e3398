"""The profile step: fault-free (golden) runs of the program, each in a
private daemon started with --profile_commands. They give the reference
output, the dynamic command profile faults are drawn from, the program's
time (and so the default timeout), and a determinism check: every golden
run must produce the first one's output, or outcomes would mean nothing.
"""

import sys

from torch_openreg.fi.classify import classify
from torch_openreg.fi.execution import (execute, read_run_output,
                                        run_result, start_daemon)
from torch_openreg.fi.config import model_kind
from torch_openreg.fi.faults import Population, read_profile

__all__ = ["CampaignError", "golden_output", "profile_golden"]

# Idle limit of a golden run's daemon (it ends should the campaign die).
GOLDEN_IDLE_EXIT_SECONDS = 3600


class CampaignError(RuntimeError):
    """The campaign cannot go on (its message says why)."""


def golden_output(store, config, golden):
    """The reference Output (golden run 0's)."""
    return read_run_output(config, golden["compare"], store.golden_dir(0))


def _resolve_compare(config, run_dir):
    if config["compare"] != "auto":
        return config["compare"]
    reported = read_run_output(config, "report", run_dir)
    return "report" if reported.values else "stdout"


def _check_reference(compare, output, config):
    if compare == "report" and not output.values:
        raise CampaignError("--compare report: the program reported no value "
                            "(torch_openreg.fi.report)")
    if compare == "file" and output.text is None:
        raise CampaignError(f"--output-file: the fault-free run wrote no "
                            f"{config['output_file']}")


def _targets(config, profile):
    """The instances each of the campaign's models may hit in `profile`."""
    return [Population(profile, model_kind(model, config["kind"]),
                       config["ops"], config["device"], config["phase"]).groups
            for model in config["models"]]


def profile_golden(store, config, launcher):
    """Runs the golden runs; returns the golden record (saved as
    golden.json): compare (the resolved output mode), profile, seconds
    (per run), daemon_start_seconds, timeout."""
    seconds, starts, profiles, compare, reference = [], [], [], None, None
    for index in range(config["golden_runs"]):
        run_dir = store.golden_dir(index, fresh=True)
        daemon = start_daemon(config, ["--profile_commands"],
                              f"{run_dir}/daemon.log",
                              GOLDEN_IDLE_EXIT_SECONDS)
        try:
            returncode, timed_out, elapsed = execute(
                launcher, daemon, run_dir, f"golden-{index}",
                config["timeout"])
            profile = read_profile(daemon.ctl("profile"))
        finally:
            daemon.stop()
        starts.append(daemon.ready_after)
        compare = compare or _resolve_compare(config, run_dir)
        result = run_result(config, compare, run_dir, returncode, timed_out,
                            elapsed)
        if reference is None:
            _check_reference(compare, result.output, config)
            reference = result.output
        outcome, detail = classify(result, reference, config["rtol"],
                                   config["atol"])
        if outcome in ("Hang", "Crash", "DUE"):
            raise CampaignError(
                f"the fault-free run {index} failed ({outcome}: {detail}); "
                f"see {run_dir}/stderr.txt")
        if outcome == "SDC":
            raise CampaignError(
                f"the fault-free runs 0 and {index} differ ({detail}): make "
                "the program deterministic (fixed seeds, same inputs) or "
                "compare with a tolerance (--rtol, --atol)")
        seconds.append(elapsed)
        profiles.append(profile)
    # Only the commands faults are drawn from matter: the client skips
    # waits for work it knows finished, so their count varies from run to
    # run.
    if any(_targets(config, profile) != _targets(config, profiles[0])
           for profile in profiles):
        print("openreg-fi: warning: the commands faults are drawn from "
              "differ between fault-free runs; a run's nth command may not "
              "exist in every run (such faults never fire)", file=sys.stderr)
    if not profiles[0]:
        raise CampaignError("the fault-free run executed no device command: "
                            "does the program use the openreg device?")
    timeout = config["timeout"] or round(10 * max(seconds) + 5, 1)
    return {"compare": compare, "profile": profiles[0], "seconds": seconds,
            "daemon_start_seconds": starts, "timeout": timeout}
