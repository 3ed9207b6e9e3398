"""Distributed fault-injection campaigns: openreg-fi runs a 2-rank DDP job
under torchrun (examples/distributed/ddp_checkpointed.py) as one run,
each run with one fault aimed at one rank's collective, and classifies
the job's outcome against its fault-free runs."""

import json
import os
import sys

import pytest

from daemon_fixture import assert_no_descendants, python_env
from torch_openreg.fi.__main__ import main
from torch_openreg.fi.classify import OUTCOMES
from torch_openreg.fi.store import CampaignDir

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, os.pardir, os.pardir, "examples", "distributed",
                   "ddp_checkpointed.py")

# Children (torchrun and its ranks) find the same torch_openreg.
os.environ["PYTHONPATH"] = python_env()["PYTHONPATH"]


def torchrun_job():
    """The job of one run: 2 ranks (one device each), one restart allowed,
    checkpoints in the run's folder, rank 0 reporting the final loss and
    weights; collectives wait 20 s for a missing rank."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node=2", "--max-restarts=1", JOB,
            "--checkpoint-dir={run_dir}/checkpoints", "--report",
            "--steps=4", "--checkpoint-every=2", "--group-timeout=20"]


@pytest.fixture
def no_leftovers():
    yield
    assert_no_descendants(grace_seconds=15)


def run_campaign(folder, *flags):
    code = main(["run", "--dir", str(folder), "--quiet", "--no-plots",
                 "--compare=report", "--kind=collective", *flags, "--",
                 *torchrun_job()])
    assert code == 0
    return CampaignDir(str(folder)).read_runs()


def test_a_30_run_campaign_flips_a_bit_in_one_ranks_gradient_contribution(
        tmp_path, capsys, no_leftovers):
    """Each run flips one bit (drawn from all 32) of one element of one
    rank's contribution to one of DDP's gradient all_reduces in backward:
    the summed gradient every rank applies is off, so the weights differ
    from the fault-free run's unless the flip is lost in rounding. Every
    run is classified; the report gives Wilson intervals."""
    runs = run_campaign(tmp_path / "flips", "--runs=30", "--jobs=2",
                        "--seed=3", "--model=corrupt_input",
                        "--op=all_reduce", "--phase=backward")
    assert sorted(run["run"] for run in runs) == list(range(30))
    for run in runs:
        assert run["outcome"] in OUTCOMES, run
        assert run["fired"] is True, run
        [fired] = run["records"]
        assert fired["command"] == "occl::all_reduce", fired
        assert fired["phase"] == "backward", fired
        # One rank per device: the fault hit the rank of the drawn device.
        assert fired.get("rank", 0) == fired.get("device", 0), fired
        assert fired["model"] == "corrupt_input", fired
    outcomes = [run["outcome"] for run in runs]
    assert outcomes.count("SDC") >= 1, outcomes
    assert {run["records"][0].get("rank", 0) for run in runs} == {0, 1}
    summary = json.loads((tmp_path / "flips" / "summary.json").read_text())
    assert sum(entry["count"] for entry in summary["outcomes"].values()) == 30
    for entry in summary["outcomes"].values():
        low, high = entry["ci95"]
        assert 0 <= low <= entry["rate"] <= high <= 1
    capsys.readouterr()
    # A run replays to the same outcome (the same bit of the same element).
    sdc = next(run for run in runs if run["outcome"] == "SDC")
    assert main(["replay", str(tmp_path / "flips"), str(sdc["run"])]) == 0
    assert "(same)" in capsys.readouterr().out


def test_a_rank_that_drops_out_is_recovered_by_the_restart(
        tmp_path, no_leftovers):
    """A rank dropped from a gradient all_reduce: the survivor's collective
    fails naming it, both exit, torchrun restarts the job from its last
    checkpoint, and it ends with the fault-free weights: Recovered. A
    straggler (1 s late) changes nothing: Masked."""
    runs = run_campaign(tmp_path / "drops", "--runs=2", "--jobs=2",
                        "--model=disconnect,slow",
                        '--model-args={"slow": {"delay_seconds": 1}}',
                        "--phase=backward")
    outcomes = {run["model"]: run["outcome"] for run in runs}
    assert outcomes == {"disconnect": "Recovered", "slow": "Masked"}, runs


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
