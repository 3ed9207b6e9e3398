"""Faults in collectives, end to end: each fault model a plan can aim at
one rank's part of an all_reduce (a straggler, a rank that drops out, a
hung collective, a corrupted contribution, a corrupted delivery), in two
rank processes on the test process's daemon. Every rank arms the same
fault in its own session; the trigger's rank says which one it hits."""

import json
import os
import subprocess
import sys

import pytest
import torch

from daemon_fixture import python_env
from distributed_launch import DAEMON, TIMEOUT, run_ranks

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        os.pardir, os.pardir, "examples", "distributed")

# The all_reduce each step runs: rank r contributes 4 x (r + 1).
FAULT_FREE = [3.0] * 4


def run_fault(spec, **extra_env):
    results, _ = run_ranks("collective_fault", 2,
                           OPENREG_TEST_FAULT=json.dumps(spec), **extra_env)
    return [result["steps"] for result in results], results


def on_rank(rank, model, number=1, **trigger):
    return {"name": "test fault", **model,
            "trigger": {"kind": "collective", "op": "all_reduce",
                        "rank": rank, "collective_number": number,
                        **trigger}}


def fired(results, model):
    """The fault log's records of `model` (every rank reads the same)."""
    log = results[0]["log"]
    assert isinstance(log, list), log
    return [record for record in log if record["model"] == model]


def test_a_straggler_delays_every_rank_and_changes_no_value():
    steps, results = run_fault(on_rank(1, {"slow": {"delay_seconds": 1.5}}))
    for rank_steps in steps:
        assert [step["value"] for step in rank_steps] == [FAULT_FREE] * 3
    # Rank 0 waited for the late rank at #1 only.
    assert steps[0][1]["seconds"] >= 1.4, steps[0]
    assert steps[0][2]["seconds"] < 1.0, steps[0]
    [record] = fired(results, "slow")
    assert record["command"] == "occl::all_reduce"
    assert record["rank"] == 1 and record["group"] == "0", record
    assert record["phase"] == "forward", record


def test_a_rank_that_drops_out_fails_the_others_naming_it():
    steps, results = run_fault(on_rank(1, {"disconnect": {}}))
    for rank_steps in steps:
        assert rank_steps[0]["value"] == FAULT_FREE
        assert len(rank_steps) == 2, rank_steps
    survivor = steps[0][1]["error"]
    assert survivor.startswith("DistBackendError: "), survivor
    assert "rank 1 (pid" in survivor and "ended" in survivor, survivor
    assert steps[0][1]["seconds"] < 30, steps[0]
    # The dropped rank learns it from its collective's error (never reading
    # its unreduced tensor back) or from its session's hang-up, whichever
    # it meets first.
    dropped = steps[1][1]["error"]
    assert "session" in dropped and ("ended" in dropped or "dropped" in
                                     dropped), dropped


def test_a_hung_collective_fails_the_others_at_the_timeout_naming_it():
    """Rank 1's #1 hangs 8 s; the group's timeout is 3 s. Rank 0's fails at
    the timeout naming rank 1; rank 1's, once the hang ends, fails too:
    the communicator was aborted meanwhile."""
    steps, _ = run_fault(on_rank(1, {"hang": {"seconds": 8}}),
                         OPENREG_TEST_GROUP_TIMEOUT="3")
    survivor = steps[0][1]
    assert "waited past its timeout for rank(s) 1" in survivor["error"], \
        survivor
    assert 2.5 <= survivor["seconds"] < 8, survivor
    hung = steps[1][1]
    assert hung["error"].startswith("DistBackendError: "), hung
    assert hung["seconds"] >= 7.5, hung


def test_a_flipped_contribution_reaches_every_rank():
    """Bit 30 of rank 1's element 0 (2.0 = 0x40000000) reads as 0.0: every
    rank's sum there is 1.0 at #1, and right before and after."""
    steps, results = run_fault(on_rank(
        1, {"corrupt_input": {"bits": [30], "element": 0}}))
    for rank_steps in steps:
        values = [step["value"] for step in rank_steps]
        assert values == [FAULT_FREE, [1.0, 3.0, 3.0, 3.0], FAULT_FREE], \
            values
    [record] = fired(results, "corrupt_input")
    assert record["rank"] == 1 and record["element"] == 0, record


def test_a_flipped_delivery_reaches_one_rank_only():
    steps, results = run_fault(on_rank(
        0, {"corrupt_output": {"bits": [31], "element": 3}}))
    assert steps[0][1]["value"] == [3.0, 3.0, 3.0, -3.0]
    assert steps[1][1]["value"] == FAULT_FREE
    for rank_steps in steps:
        assert rank_steps[0]["value"] == rank_steps[2]["value"] == FAULT_FREE
    [record] = fired(results, "corrupt_output")
    assert record["rank"] == 0, record


def test_a_fault_for_another_group_or_collective_never_fires():
    steps, results = run_fault(on_rank(
        1, {"corrupt_input": {"bits": [30]}}, number=1, group="other"))
    for rank_steps in steps:
        assert [step["value"] for step in rank_steps] == [FAULT_FREE] * 3
    assert fired(results, "corrupt_input") == []
    steps, results = run_fault(on_rank(
        1, {"corrupt_input": {"bits": [30]}}, op="broadcast"))
    for rank_steps in steps:
        assert [step["value"] for step in rank_steps] == [FAULT_FREE] * 3



def test_the_ddp_example_under_the_gradient_flip_plan_ends_elsewhere(
        tmp_path):
    """examples/distributed/gradient_flip.json, armed by every rank
    ($OPENREG_FAULT_PLAN), flips a bit of rank 1's contribution to its 4th
    gradient all_reduce (in backward): the job ends without an error, with
    weights that differ from its fault-free run's; the fault log says where
    it fired."""
    def train(name, **env):
        folder = tmp_path / name
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node=2",
             os.path.join(EXAMPLES, "ddp_checkpointed.py"),
             f"--checkpoint-dir={folder}/checkpoints",
             f"--weights-out={folder}/weights.pt", "--steps=4",
             "--checkpoint-every=2"],
            env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                           OPENREG_AUTOSPAWN="0", **env),
            capture_output=True, text=True, timeout=TIMEOUT, check=True)
        return torch.load(folder / "weights.pt")

    golden = train("golden")
    since = max((record.index + 1 for record in torch.openreg.faults.log()),
                default=0)
    flipped = train("flipped", OPENREG_FAULT_PLAN=os.path.join(
        EXAMPLES, "gradient_flip.json"))
    [record] = torch.openreg.faults.log(since)
    assert record.fault_name == "flip a bit of rank 1's gradients"
    assert (record.command, record.phase, record.rank, record.group) == (
        "occl::all_reduce", "backward", 1, "0")
    assert record.bits == [27]
    assert any(not torch.equal(golden[name], flipped[name])
               for name in golden)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
