"""Fault-injection campaign cost (docs/FAULT_INJECTION.md): the wall time
of one injection run of `openreg-fi` (fork from the zygote, private daemon,
fault log, classification) against the program's own fault-free time, on
examples/fi_inference.py with one job. The issue's bar: at most 0.3 s of
overhead per run."""

import json
import os
import subprocess
import sys
import tempfile

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                       "examples", "fi_inference.py")


def campaign_run_cost(torch, scale):
    del torch  # the campaign runs its own daemons and programs
    runs = max(6, int(40 * scale))
    with tempfile.TemporaryDirectory(prefix="openreg-bench-fi-") as folder:
        subprocess.run(
            [sys.executable, "-m", "torch_openreg.fi", "run", "--dir", folder,
             "--runs", str(runs), "--jobs", "1", "--quiet", "--no-plots",
             "--seed", "1", "--", EXAMPLE],
            check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(folder, "golden.json")) as f:
            golden = min(json.load(f)["seconds"])
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
    per_run = summary["mean_seconds"] + summary["mean_overhead"]
    return [(f"fault campaign run ({runs} runs, 1 job)", "golden program",
             golden, per_run)]


SECTIONS = [campaign_run_cost]
