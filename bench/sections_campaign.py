"""Fault-injection campaign cost (docs/FAULT_INJECTION.md): the wall time
of one injection run of `openreg-fi` (fork from the zygote, private daemon,
fault log, classification) against the program's own fault-free time, on
examples/fi_inference.py with one job. The issue's bar: at most 0.3 s of
overhead per run.

A distributed campaign likewise: a 2-rank DDP job under torchrun
(examples/distributed/ddp_checkpointed.py) as one run, each run flipping a
bit of one rank's gradient contribution; runs per minute, and a run's wall
time against the job's golden time."""

import json
import os
import subprocess
import sys
import tempfile

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        os.pardir, "examples")
EXAMPLE = os.path.join(EXAMPLES, "fi_inference.py")
DDP_JOB = os.path.join(EXAMPLES, "distributed", "ddp_checkpointed.py")


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


def distributed_campaign_cost(torch, scale):
    del torch
    runs = max(6, int(20 * scale))
    with tempfile.TemporaryDirectory(prefix="openreg-bench-fi-") as folder:
        finished = subprocess.run(
            [sys.executable, "-m", "torch_openreg.fi", "run", "--dir", folder,
             "--runs", str(runs), "--jobs", "1", "--no-plots",
             "--seed", "1", "--compare=report", "--kind=collective",
             "--model=corrupt_input", "--op=all_reduce", "--phase=backward",
             "--", sys.executable, "-m", "torch.distributed.run",
             "--standalone", "--nproc_per_node=2", "--max-restarts=1",
             DDP_JOB, "--checkpoint-dir={run_dir}/checkpoints", "--report",
             "--steps=4", "--checkpoint-every=2", "--group-timeout=20"],
            check=True, capture_output=True, text=True)
        with open(os.path.join(folder, "golden.json")) as f:
            golden = min(json.load(f)["seconds"])
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
    rate = [line for line in finished.stdout.splitlines()
            if "runs/min" in line]
    per_run = summary["mean_seconds"] + summary["mean_overhead"]
    print(f"distributed campaign, 2-rank DDP job under torchrun ({runs} "
          f"runs, 1 job): golden job {golden:.2f} s, a run "
          f"{per_run:.2f} s (of which openreg-fi's own overhead "
          f"{summary['mean_overhead']:.3f} s), {60 / per_run:.1f} runs/min; "
          f"{rate[-1].strip() if rate else ''}")
    return [(f"distributed campaign run ({runs} runs, 2-rank DDP)",
             "golden job", golden, per_run)]


SECTIONS = [campaign_run_cost, distributed_campaign_cost]
