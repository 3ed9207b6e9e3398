"""torch.distributed on openreg when ranks fail or disagree: a rank that
dies, collectives and transfers the ranks disagree on, and the daemon's
view of a collective still waiting for a rank. Each test starts its ranks
as processes on the test process's daemon and waits for all of them."""

import re
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch_openreg

from distributed_launch import DAEMON, run_ranks


def test_a_rank_that_dies_fails_the_others_collective_naming_it():
    results, _ = run_ranks("dies", 2, silent_ranks=(1,))
    error = results[0]["error"]
    assert error is not None
    assert error.startswith("DistBackendError: "), error
    assert "rank 1 (pid" in error and "ended" in error, error
    assert "all_reduce" in error, error
    assert results[0]["seconds"] < 30


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
