"""torch.distributed on openreg when ranks fail or disagree: a rank that
dies, collectives and transfers the ranks disagree on, and the daemon's
view of a collective still waiting for a rank. Each test starts its ranks
as processes on the test process's daemon and waits for all of them."""

import glob
import os
import pickle
import re
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch_openreg

from daemon_fixture import python_env
from distributed_launch import (DAEMON, TIMEOUT, communicate_all,
                                free_port, result_of, run_ranks, start_ranks)


def test_a_rank_that_dies_fails_the_others_collective_naming_it():
    results, _ = run_ranks("dies", 2, silent_ranks=(1,))
    error = results[0]["error"]
    assert error is not None
    assert error.startswith("DistBackendError: "), error
    assert "rank 1 (pid" in error and "ended" in error, error
    assert "all_reduce" in error, error
    assert results[0]["seconds"] < 30


def test_a_rank_that_dies_on_another_host_fails_every_other_rank():
    """Ranks 0-1 on the test's daemon, 2-3 on another (two hosts); rank 3
    exits after the first all_reduce. Rank 2 (its host) is
    told by its daemon, naming it; ranks 0 and 1 learn it through the
    exchange between the daemons' first ranks (gloo's connection breaks):
    all within seconds, far below the group's 30 s timeout."""
    with torch_openreg.testing.Daemon(devices=2,
                                      memory_per_device="1GiB") as other:
        results, _ = run_ranks(
            "dies_on_another_host", 4, silent_ranks=(3,),
            sockets=[DAEMON.socket] * 2 + [other.socket] * 2,
            OPENREG_TEST_GROUP_TIMEOUT="30")
    for rank in range(3):
        error = results[rank]["error"]
        assert error is not None and error.startswith("DistBackendError: "), \
            (rank, error)
        assert results[rank]["seconds"] < 20, results[rank]
    # Rank 3 is rank 1 of its daemon's communicator.
    assert "rank 1 (pid" in results[2]["error"], results[2]["error"]
    assert "ended" in results[2]["error"], results[2]["error"]
    assert "across daemons" in results[0]["error"], results[0]["error"]


def test_a_stopped_rank_fails_the_others_collective_within_the_timeout():
    """A rank stopped with SIGSTOP never ends: the others' next collective
    fails at the group's timeout (3 s here), naming it and the collective's
    number; the test then kills the stopped rank by pid."""
    group_timeout = 3.0
    ranks = start_ranks("stopped", 2,
                        OPENREG_TEST_GROUP_TIMEOUT=str(group_timeout))
    try:
        stdout, stderr = ranks[0].communicate(timeout=TIMEOUT)
    finally:
        ranks[1].kill()  # SIGKILL ends a stopped process too
        communicate_all(ranks[1:])
    error = result_of(0, stdout, stderr)["error"]
    assert error is not None and error.startswith("DistBackendError: "), error
    assert "waited past its timeout for rank(s) 1" in error, error
    assert "collective 1" in error and "all_reduce" in error, error
    # Named at the timeout, not before and not long after.
    seconds = result_of(0, stdout, stderr)["seconds"]
    assert group_timeout - 0.5 <= seconds < group_timeout + 10, seconds


def test_a_group_destroyed_after_a_failure_can_be_initialized_again(tmp_path):
    """TORCH_NCCL_ASYNC_ERROR_HANDLING's contract without killing the
    process: the failed collective raises in the caller, the communicator
    is unusable, and destroy_process_group() then init_process_group()
    give a working group in the same processes."""
    results, _ = run_ranks("reinit", 2,
                           OPENREG_TEST_STORE_FILE=str(tmp_path / "store"))
    for result in results:
        assert result["first_error"].startswith("DistBackendError: "), result
        assert "ranks disagree" in result["first_error"], result
        assert result["value"] == [3.0] * 4


CHECKPOINTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "..", "examples", "distributed",
                            "ddp_checkpointed.py")


def torchrun_checkpointed(world, folder, *script_args):
    """examples/distributed/ddp_checkpointed.py under torchrun with one
    restart allowed, each rank's output in its own file under folder/logs;
    returns (the completed torchrun, rank 0's final weights)."""
    weights = os.path.join(folder, "weights.pt")
    checkpoints = os.path.join(folder, "checkpoints")
    os.makedirs(checkpoints)
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run",
         f"--nproc_per_node={world}", "--max-restarts=1",
         # Elastic rendezvous: each restart meets in a fresh round, so no
         # rank reads an address the dead attempt left in the store.
         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
         f"--log-dir={folder}/logs",
         "--redirects=3", CHECKPOINTED, f"--checkpoint-dir={checkpoints}",
         f"--weights-out={weights}", *script_args],
        env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=TIMEOUT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed, torch.load(weights)


def rank_logs(folder, attempt, stream):
    """{rank: text} of torchrun's per-rank files of one attempt."""
    logs = {}
    for path in glob.glob(f"{folder}/logs/*/attempt_{attempt}/*/{stream}.log"):
        logs[int(os.path.basename(os.path.dirname(path)))] = open(path).read()
    return logs


@pytest.mark.parametrize("world", [2, 4])
def test_a_job_with_a_killed_rank_restarts_from_its_checkpoint(
        world, tmp_path):
    """DDP under torchrun --max-restarts=1; the last rank is SIGKILLed at
    step 7 of 12 (checkpoints every 3 steps). Every survivor's error names
    it well within any group timeout (30 s here; the default is 10 min);
    the restarted job
    resumes at step 6 and ends with the weights of a run without the kill.
    (torchrun stops the other ranks once it sees the death: a survivor
    that had not reached its next synchronization by then is terminated
    with SIGTERM before it can report; every survivor does one or the
    other.)"""
    _, golden = torchrun_checkpointed(world, str(tmp_path / "golden"))
    killed = world - 1
    faulty, weights = torchrun_checkpointed(
        world, str(tmp_path / "faulty"), f"--kill-rank={killed}",
        "--kill-at-step=7")
    stdout, stderr = (rank_logs(str(tmp_path / "faulty"), 0, stream)
                      for stream in ("stdout", "stderr"))
    death = float(re.search(r"KILLED rank \d+ at (\d+\.\d+)",
                            stdout[killed]).group(1))
    # The ranks torchrun terminated ("Sending process PID closing signal
    # SIGTERM"), by the pids the ranks printed.
    pids = {int(pid) for pid in re.findall(
        r"Sending process (\d+) closing signal SIGTERM", faulty.stderr)}
    terminated = {rank for rank in range(world) if int(re.search(
        r"attempt 0 pid (\d+)", stdout[rank]).group(1)) in pids}
    for rank in range(world - 1):
        error = re.search(r"RANK_ERROR rank \d+ at (\d+\.\d+): (.*)",
                          stderr[rank])
        if error is None:
            assert rank in terminated, (rank, stderr[rank][-2000:],
                                        faulty.stderr[-3000:])
            continue
        assert f"rank {killed} (pid" in error.group(2), error.group(2)
        assert "ended" in error.group(2), error.group(2)
        assert float(error.group(1)) - death < 30, error.group(0)
    resumed = rank_logs(str(tmp_path / "faulty"), 1, "stdout")
    assert sorted(resumed) == list(range(world))
    for text in resumed.values():
        assert "attempt 1 resumes at step 6" in text, text
    assert golden.keys() == weights.keys()
    for name in golden:
        assert torch.equal(golden[name], weights[name]), name


def test_the_flight_recorder_keeps_each_ranks_last_collectives():
    """TORCH_FR_BUFFER_SIZE=3: each rank's last three collectives, in
    PyTorch's trace format, for every rank of the job."""
    results, _ = run_ranks("flight_recorder", 2, TORCH_FR_BUFFER_SIZE="3")
    for rank, result in enumerate(results):
        assert result["ranks"] == [0, 1]
        assert result["version"] == "2.10"
        assert result["pg_config"] == {"0": {"name": "0", "desc": "default_pg",
                                             "ranks": "[0, 1]"}}
        # record_id, seq, name, input/output sizes, dtypes, state, group,
        # occl_state, retired, is_p2p
        assert result["entries"] == [
            [2, 3, "nccl:all_gather", [[6]], [[12]], ["Float"], "completed",
             ["0", "default_pg"], "completed", True, False],
            [3, 4, "nccl:all_reduce", [[4]], [[4]], ["Long"], "completed",
             ["0", "default_pg"], "completed", True, False],
            [4, 5, "nccl:barrier", [], [], [], "completed",
             ["0", "default_pg"], "completed", True, False]], result


def analyze_traces(folder, *options):
    """PyTorch's flight recorder analyzer on `folder`: its output."""
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
         str(folder), *options], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout + completed.stderr


def test_a_hung_jobs_traces_dumped_at_the_timeout_name_the_missing_rank(
        tmp_path):
    """Rank 1 does not come to the second all_reduce; at the group's
    timeout (3 s) the daemon writes every rank's trace (rank 1's too: it
    holds them) to $TORCH_FR_DUMP_TEMP_FILE<rank>, and PyTorch's analyzer
    names rank 1 as missing from collective 2."""
    traces = tmp_path / "traces"
    traces.mkdir()
    go = tmp_path / "go"
    ranks = start_ranks("late_rank", 2, OPENREG_TEST_GO=str(go),
                        OPENREG_TEST_GROUP_TIMEOUT="3",
                        TORCH_FR_DUMP_TEMP_FILE=f"{traces}/rank_")
    try:
        stdout, stderr = ranks[0].communicate(timeout=TIMEOUT)
    finally:
        go.touch()
        communicate_all(ranks)
    assert "waited past its timeout" in stdout + stderr, stderr[-2000:]
    assert sorted(os.listdir(traces)) == ["rank_0", "rank_1"]
    report = analyze_traces(traces)
    assert "Not all ranks joining collective, sequence number: 2" in report, (
        report)
    assert "missing ranks: {1}" in report, report
    assert "collective: nccl:all_reduce" in report, report
    table = analyze_traces(traces, "-j")
    assert "all_reduce" in table, table
    with open(traces / "rank_0", "rb") as trace:
        last = pickle.load(trace)["entries"][-1]
    assert last["occl_state"] == "failed" and last["retired"], last
    assert "which did not arrive" in last["occl_error"], last
    assert last["state"] == "started", last


def test_a_hung_jobs_traces_on_demand_show_who_joined(tmp_path):
    """While rank 1 is late, `openreg-ctl flight-recorder PID` writes the
    job's traces; the pending collective lists the ranks the daemon saw
    join it, and the analyzer names rank 1 as missing."""
    go = tmp_path / "go"
    ranks = start_ranks("late_rank", 2, OPENREG_TEST_GO=str(go))
    try:
        pid = ranks[0].pid
        deadline = time.monotonic() + 120
        waiting = False
        while not waiting and time.monotonic() < deadline:
            waiting = any(pending["missing"] == [1]
                          for communicator in
                          torch.openreg.daemon_stats()["communicators"]
                          for pending in communicator["pending"])
            time.sleep(0.05)
        assert waiting, "rank 0 never waited for rank 1"
        ctl = subprocess.run(
            [torch_openreg.ctl_binary(), f"--socket={DAEMON.socket}",
             "flight-recorder", str(pid), f"--prefix={tmp_path}/trace_"],
            capture_output=True, text=True, timeout=60)
    finally:
        go.touch()
        communicate_all(ranks)
    assert ctl.returncode == 0, ctl.stderr
    assert ctl.stdout.split() == [f"{tmp_path}/trace_0",
                                  f"{tmp_path}/trace_1"], ctl.stdout
    with open(tmp_path / "trace_0", "rb") as trace:
        pending = pickle.load(trace)["entries"][-1]
    assert pending["state"] == "started" and not pending["retired"], pending
    assert pending["occl_joined_ranks"] == [0], pending
    os.remove(tmp_path / "go")
    report = analyze_traces(tmp_path)
    assert "missing ranks: {1}" in report, report


def test_ranks_that_disagree_fail_on_every_rank_naming_both_sides():
    results, _ = run_ranks("mismatch", 2)
    for rank in range(2):
        error = results[rank]["error"]
        assert error is not None
        assert error.startswith("DistBackendError: "), error
        assert "all_reduce(sum) of 4 x Float" in error, error
        assert "all_reduce(sum) of 3 x Float" in error, error


def test_a_send_and_a_recv_that_disagree_fail_on_both_ranks():
    results, _ = run_ranks("transfer_mismatch", 2)
    for rank in range(2):
        error = results[rank]["error"]
        assert error is not None
        assert error.startswith("DistBackendError: "), error
        assert "4 x Float from rank 0 to rank 1" in error, error
        assert "3 x Float from rank 0 to rank 1" in error, error


def test_the_daemon_shows_which_ranks_joined_a_pending_collective(tmp_path):
    """daemon_stats() (and `openreg-ctl stats`) list each communicator, its
    ranks, and for a collective still waiting which ranks joined it, since
    when, and which are missing."""
    go = tmp_path / "go"
    outcome = {}
    ranks = threading.Thread(target=lambda: outcome.update(
        results=run_ranks("late_rank", 2, OPENREG_TEST_GO=str(go))[0]))
    ranks.start()
    seen = None
    try:
        deadline = time.monotonic() + 120
        while seen is None and time.monotonic() < deadline:
            for communicator in torch.openreg.daemon_stats()["communicators"]:
                for pending in communicator["pending"]:
                    if pending["missing"] == [1] and pending["number"] == 1:
                        seen = (communicator, pending)
            time.sleep(0.05)
        time.sleep(0.3)
        later = torch.openreg.daemon_stats()["communicators"]
        ctl = subprocess.run(
            [torch_openreg.ctl_binary(), f"--socket={DAEMON.socket}",
             "stats"], capture_output=True, text=True, timeout=60)
    finally:
        go.touch()
        ranks.join()
    assert seen is not None, "the daemon never showed rank 1 missing"
    communicator, pending = seen
    assert communicator["size"] == 2 and communicator["aborted"] == ""
    assert [member["joined"] for member in communicator["members"]] == [
        True, True]
    assert pending["operation"] == "all_reduce(sum) of 4 x Float"
    assert list(pending["joined"]) == [0]
    assert pending["joined"][0] >= 0
    # Seconds since rank 0 joined grow while it waits.
    waiting = [p for c in later if c["id"] == communicator["id"]
               for p in c["pending"]]
    assert waiting and waiting[0]["joined"][0] > pending["joined"][0]
    for result in outcome["results"]:
        assert result["value"] == [4.0] * 4
    assert ctl.returncode == 0, ctl.stderr
    assert f"communicator {communicator['id']}  2 ranks" in ctl.stdout
    assert re.search(r"#1 all_reduce\(sum\) of 4 x Float  joined: rank 0 "
                     r"\(\d+\.\d s ago\)  missing: rank\(s\) 1",
                     ctl.stdout), ctl.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
