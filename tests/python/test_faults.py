"""Fault injection end to end (torch.openreg.faults, $OPENREG_FAULT_PLAN,
openreg-daemon --fault_plan, openreg-ctl): every model's effect as a
program sees it, triggers, determinism, scope, and malformed plans."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_openreg
from daemon_fixture import Daemon, process_daemon, run_python

DAEMON = process_daemon(devices=2)
faults = torch.openreg.faults


@pytest.fixture(autouse=True)
def _clean():
    yield
    faults.disarm()
    for stats in torch.openreg.daemon_stats()["devices"]:
        if stats["state"] != "ok":
            faults.reset_device(stats["device"])


def ctl(*args, daemon=DAEMON):
    return subprocess.run([torch_openreg.ctl_binary(),
                           f"--socket={daemon.socket}", *args],
                          capture_output=True, text=True, timeout=60)


def child(code, **env):
    result = run_python(textwrap.dedent(code), DAEMON.env(**env))
    return result


def flipped_site(seed):
    """Where a seeded single-bit flip lands in aten::mul's output."""
    x = torch.arange(64, dtype=torch.float32, device="openreg")
    (x * 2).cpu()  # the signature's checked first launch, fault-free
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(), op="aten::mul", seed=seed):
        y = (x * 2).cpu()
    record = faults.log(since)[0]
    return record, y


def test_output_corruption_flips_the_logged_bit_and_only_it():
    x = torch.arange(8, dtype=torch.float32, device="openreg")
    (x + 1).cpu()
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(bits=[30], element=5),
                       op="aten::add.Tensor", nth=1):
        y = (x + 1).cpu()
    expected = torch.arange(8, dtype=torch.float32) + 1
    [record] = faults.log(since)
    assert (record.model, record.element, record.bits) == ("corrupt_output", 5,
                                                           [30])
    assert record.command == "aten::add.Tensor" and record.dtype == "Float"
    assert record.value_before == "6"
    bits = expected[5:6].view(torch.int32) ^ (1 << 30)
    assert torch.equal(y[5:6], bits.view(torch.float32))
    assert torch.tensor(float(record.value_after)) == y[5]
    mask = torch.arange(8) != 5
    assert torch.equal(y[mask], expected[mask])


def test_the_same_seed_gives_the_same_site_and_another_seed_another():
    first, y1 = flipped_site(seed=7)
    again, y2 = flipped_site(seed=7)
    assert (first.element, first.bits) == (again.element, again.bits)
    assert torch.equal(y1.view(torch.int32), y2.view(torch.int32))
    sites = {(flipped_site(seed)[0].element, tuple(flipped_site(seed)[0].bits))
             for seed in (1, 2, 3)}
    assert len(sites) > 1


def test_integer_and_half_outputs_flip_their_storage_bits():
    for dtype in (torch.int64, torch.float16, torch.bfloat16, torch.uint8):
        x = torch.ones(4, dtype=dtype, device="openreg")
        (x * 1).cpu()
        since = len(faults.log())
        with faults.inject(faults.corrupt_output(bits=[2], element=0),
                           op="aten::mul"):
            y = (x * 1).cpu()
        [record] = faults.log(since)
        before = torch.ones(1, dtype=dtype)
        width = {1: torch.uint8, 2: torch.int16, 8: torch.int64}[
            before.element_size()]
        assert torch.equal(y[:1].view(width), before.view(width) ^ 4), dtype
        assert record.bits == [2]


def test_nth_every_and_times_pick_the_matching_commands():
    x = torch.ones(4, device="openreg")
    (x + 1).cpu()
    since = len(faults.log())
    faults.arm(faults.corrected_error(), op="aten::add", every=2, times=0)
    for _ in range(6):
        x + 1
    torch.openreg.synchronize()
    records = faults.log(since)
    assert [r.match for r in records] == [2, 4, 6]
    stats = torch.openreg.daemon_stats()["devices"][0]
    assert stats["corrected_errors"] >= 3


def test_a_kernel_failure_is_raised_at_the_next_synchronization_only():
    x = torch.ones(4, device="openreg")
    (x + 1).cpu()
    faults.arm(faults.kernel_failure("as planned"), op="aten::add", nth=1)
    y = x + 1  # asynchronous: no error yet
    with pytest.raises(RuntimeError, match="cudaErrorLaunchFailure.*as planned"):
        torch.openreg.synchronize()
    assert (x + 1).cpu().tolist() == [2.0] * 4  # not sticky
    del y


def test_an_injected_allocation_failure_is_an_out_of_memory_error():
    # Larger than any block the caching allocator holds: it must allocate.
    faults.arm(faults.allocation_failure(), kind="allocation", nth=1)
    with pytest.raises(torch.OutOfMemoryError, match="injected fault"):
        torch.empty(50_000_000, device="openreg")
    torch.empty(50_000_000, device="openreg")  # the next one succeeds


def test_a_sticky_error_fails_every_later_call_of_that_process_only():
    result = child("""
        import torch
        from torch.openreg import faults
        x = torch.ones(4, device="openreg")
        (x + 1).cpu()
        faults.arm(faults.sticky("ecc_uncorrectable"), op="aten::add", nth=1)
        for attempt in range(3):
            try:
                (x + 1).cpu()
                print("call succeeded")
            except RuntimeError as error:
                print("failed:", "uncorrectable ECC" in str(error))
        try:
            torch.empty(50_000_000, device="openreg")
        except RuntimeError as error:
            print("allocation failed:", "uncorrectable ECC" in str(error))
        """)
    assert result.stdout.split("\n")[:4] == ["failed: True"] * 3 + [
        "allocation failed: True"], result.stderr
    # This process (another session) is untouched.
    assert (torch.ones(2, device="openreg") + 1).cpu().tolist() == [2.0, 2.0]


def test_a_session_scoped_fault_never_touches_another_client():
    code = """
        import sys, time, torch
        x = torch.ones(4, device="openreg")
        good = True
        for _ in range(20):
            good = good and (x * 1).cpu().tolist() == [1.0] * 4
        print("clean" if good else "corrupted")
        """
    faults.arm(faults.corrupt_output(pattern="zero"), op="aten::mul", times=0)
    result = child(code)
    assert result.stdout.strip() == "clean", result.stderr
    x = torch.ones(4, device="openreg")
    assert (x * 1).cpu().tolist().count(0.0) == 1  # but this session is hit


# Device faults, losses and resets run in child processes of a private
# daemon: after a reset, memory any process held on the device (its caching
# allocator's blocks included) is lost, as on real hardware.
def in_private_daemon(code):
    with Daemon(devices=2) as daemon:
        return run_python(textwrap.dedent(code), daemon.env())


def test_a_device_fault_stops_that_device_for_everyone_until_reset():
    result = in_private_daemon("""
        import subprocess, sys, torch
        from torch.openreg import faults
        a = torch.ones(4, device="openreg:0")
        b = torch.ones(4, device="openreg:1")
        (a + 1).cpu()
        faults.arm(faults.device_fault(), op="aten::add", device=0, nth=1)
        try:
            (a + 1).cpu()
        except RuntimeError as error:
            print("fault:", "FAULT state" in str(error))
        other = subprocess.run([sys.executable, "-c",
            "import torch\\n"
            "try:\\n"
            "    torch.ones(4, device='openreg:0').cpu()\\n"
            "except RuntimeError as e:\\n"
            "    print('other device 0:', 'FAULT state' in str(e))\\n"
            "print('other device 1:', torch.ones(2, device='openreg:1').sum().item())"],
            capture_output=True, text=True)
        print(other.stdout.strip())
        print("device 1:", (b * 3).cpu().tolist())
        print("state:", torch.openreg.daemon_stats()["devices"][0]["state"])
        faults.reset_device(0)
        print("state:", torch.openreg.daemon_stats()["devices"][0]["state"])
        try:
            (a + 1).cpu()
        except RuntimeError as error:
            print("lost:", "lost when the device was reset" in str(error))
        # Tensors on the device are gone: drop them (and their cached
        # segment), then the device works again.
        del a
        torch.openreg.empty_cache()
        print("new:", (torch.ones(3, device="openreg:0") * 2).cpu().tolist())
        """)
    assert result.stdout.split("\n")[:8] == [
        "fault: True", "other device 0: True", "other device 1: 2.0",
        "device 1: [3.0, 3.0, 3.0, 3.0]", "state: fault", "state: ok",
        "lost: True", "new: [2.0, 2.0, 2.0]"], result.stderr


def test_a_lost_device_leaves_the_other_device_working():
    result = in_private_daemon("""
        import torch
        from torch.openreg import faults
        a = torch.ones(4, device="openreg:0")
        faults.arm(faults.device_lost(), kind="copy", device=0, nth=1)
        try:
            a.cpu()
        except RuntimeError as error:
            print("lost:", "was lost" in str(error))
        print("device 1:", torch.ones(2, device="openreg:1").sum().item())
        faults.reset_device(0)
        """)
    assert result.stdout.split("\n")[:2] == ["lost: True", "device 1: 2.0"], \
        result.stderr


def test_a_hang_becomes_an_error_with_the_sync_timeout():
    x = torch.ones(4, device="openreg")
    (x * 5).cpu()
    faults.arm(faults.hang(seconds=3), op="aten::mul", nth=1)
    torch.openreg.set_sync_timeout(0.5)
    try:
        y = x * 5
        with pytest.raises(RuntimeError, match="timed out|sync timeout"):
            torch.openreg.synchronize()
    finally:
        torch.openreg.set_sync_timeout(0)
    torch.openreg.synchronize()  # the hang ends after 3 s; all is well
    assert y.cpu().tolist() == [5.0] * 4


def test_faults_target_the_backward_phase_only():
    w = torch.ones(4, device="openreg", requires_grad=True)
    (w * 2).sum().backward()  # signatures checked, fault-free
    since = len(faults.log())
    faults.arm(faults.corrected_error(), kind="kernel", phase="backward",
               times=0)
    loss = (w * 2).sum()
    loss.backward()
    torch.openreg.synchronize()
    records = faults.log(since)
    assert records and all(r.phase == "backward" for r in records)
    optimizer = torch.optim.SGD([w], lr=0.1)
    faults.disarm()
    since = len(faults.log())
    faults.arm(faults.corrected_error(), kind="kernel", phase="optimizer",
               times=0)
    optimizer.step()
    torch.openreg.synchronize()
    assert {r.phase for r in faults.log(since)} == {"optimizer"}


def test_an_input_is_corrupted_before_the_kernel_reads_it():
    x = torch.zeros(8, device="openreg")
    y = torch.ones(8, device="openreg")
    (x + y).cpu()
    since = len(faults.log())
    with faults.inject(faults.corrupt_input(input=1, bits=[30], element=2),
                       op="aten::add.Tensor", nth=1):
        z = (x + y).cpu()
    [record] = faults.log(since)
    assert (record.input, record.output, record.element) == (1, -1, 2)
    assert record.value_before == "1"
    flipped = torch.tensor([1.0]).view(torch.int32) ^ (1 << 30)
    assert z[2] == flipped.view(torch.float32)[0]
    assert y.cpu()[2] == z[2]  # the operand itself was hit, in memory
    assert torch.equal(z[[0, 1, 3]], torch.ones(3))


def test_quantized_outputs_flip_bits_of_their_integer_representation():
    q = torch.quantize_per_tensor(torch.arange(4.0), 0.5, 10, torch.quint8)
    q = q.to("openreg")
    q.relu().int_repr().cpu()
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(bits=[7], element=1),
                       op="aten::relu"):
        r = q.relu()
    [record] = faults.log(since)
    assert record.dtype == "QUInt8"
    assert (record.value_before, record.value_after) == ("12", "140")
    assert r.int_repr().cpu().tolist() == [10, 140, 14, 16]


def test_a_copy_to_the_host_can_arrive_corrupted():
    x = torch.zeros(16, dtype=torch.int64, device="openreg")
    since = len(faults.log())
    with faults.inject(faults.corrupt_copy(bits=[5], element=8),
                       kind="copy", nth=1):
        y = x.cpu()
    [record] = faults.log(since)
    assert record.command == "copy_device_to_host"
    assert y.tolist() == [0, 1 << 5] + [0] * 14  # the 64-bit word at byte 8
    assert x.cpu().tolist() == [0] * 16  # the device copy is intact


def test_memory_at_rest_flips_a_word_of_a_live_allocation():
    # A fresh process: its only device memory is the segment holding x.
    result = child("""
        import torch
        from torch.openreg import faults
        x = torch.zeros(1024, dtype=torch.int32, device="openreg")
        torch.openreg.synchronize()
        faults.arm(faults.corrupt_memory(bit_count=1, element=0), kind="copy",
                   nth=1, seed=4)
        y = x.cpu()
        import os
        [record] = [r for r in faults.log() if r.pid == os.getpid()]
        print(record.model, record.element, len(record.bits))
        bits = sum(bin(v & 0xffffffff).count("1") for v in y.tolist())
        print("flipped bits in x:", bits, "in its first word:",
              bool(y[0] != 0 or y[1] != 0))
        """)
    assert result.stdout.split("\n")[:2] == [
        "corrupt_memory 0 1", "flipped bits in x: 1 in its first word: True"], \
        result.stderr


def test_a_stuck_memory_range_keeps_its_bit_after_every_command():
    x = torch.zeros(8, dtype=torch.int32, device="openreg")
    torch.openreg.synchronize()
    faults.arm(faults.stuck_at(3, 1, address=x.data_ptr(), bytes=16,
                               word_bytes=4), kind="kernel")
    x.zero_()
    assert x.cpu().tolist() == [8, 8, 8, 8, 0, 0, 0, 0]
    x.fill_(1)
    assert x.cpu().tolist() == [9, 9, 9, 9, 1, 1, 1, 1]


def test_a_failed_copy_is_raised_and_the_next_copy_works():
    x = torch.arange(4.0, device="openreg")
    faults.arm(faults.copy_failure("dma"), kind="copy", nth=1)
    with pytest.raises(RuntimeError, match="copy_device_to_host on openreg:0 stream 0 failed: dma"):
        x.cpu()
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_straggler_is_stretched_by_its_factor():
    x = torch.randn(768, 768, device="openreg")
    (x @ x).cpu()
    import time

    def timed():
        start = time.monotonic()
        (x @ x).sum().item()
        return time.monotonic() - start

    normal = min(timed() for _ in range(3))
    since = len(faults.log())
    faults.arm(faults.slow(factor=40), op="aten::mm", times=0)
    slowed = min(timed() for _ in range(3))
    # Each mm now sleeps 39 times its own run time after running. The
    # bound is relative, a quarter of the factor, so that a loaded machine
    # (CI runs tests side by side) that slows both phases does not fail it.
    assert slowed > 10 * normal
    assert len(faults.log(since)) == 3


def test_a_slowed_kernel_takes_longer_and_still_computes():
    x = torch.ones(4, device="openreg")
    (x + 1).cpu()
    faults.arm(faults.slow(delay_seconds=0.3), op="aten::add", nth=1)
    import time
    start = time.monotonic()
    y = (x + 1).cpu()
    assert time.monotonic() - start >= 0.3
    assert y.tolist() == [2.0] * 4


def test_a_disconnect_drops_only_the_session_that_met_it():
    result = child("""
        import torch
        from torch.openreg import faults
        x = torch.ones(4, device="openreg")
        (x + 1).cpu()
        faults.arm(faults.disconnect(), op="aten::add", nth=1)
        try:
            (x + 1).cpu()
            torch.openreg.synchronize()
            print("survived")
        except RuntimeError as error:
            print("dropped")
        """)
    assert result.stdout.strip() == "dropped", result.stderr
    assert torch.ones(2, device="openreg").sum().item() == 2.0


def test_a_daemon_abort_is_a_lost_device_for_its_clients():
    with Daemon(devices=1) as daemon:
        result = run_python(textwrap.dedent("""
            import torch
            from torch.openreg import faults
            x = torch.ones(4, device="openreg")
            (x + 1).cpu()
            faults.arm(faults.daemon_abort(), op="aten::add", nth=1)
            try:
                (x + 1).cpu()
            except RuntimeError as error:
                print("lost:", "lost" in str(error) or "died" in str(error))
            """), daemon.env())
        assert result.stdout.strip() == "lost: True", result.stderr
        daemon.process.wait(timeout=30)
        assert daemon.process.returncode == -6  # SIGABRT


def test_malformed_specs_are_refused_naming_the_field_and_arm_nothing():
    before = faults.list()
    with pytest.raises(ValueError, match=r"trigger.probability: 2 is not in"):
        faults.arm(faults.kernel_failure(), probability=2)
    with pytest.raises(ValueError, match="Cannot find field|bitz"):
        faults.arm_plan('{"faults": [{"corrupt_output": {"bitz": 1}}]}')
    with pytest.raises(ValueError, match=r"faults\[1\].*set at most one of"):
        faults.arm_plan({"faults": [{"corrected_error": {}},
                                    {"hang": {}, "trigger": {"nth": 1,
                                                             "every": 2}}]})
    assert faults.list() == before


def test_a_plan_in_the_environment_is_armed_at_attach(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"faults": [
        {"corrupt_output": {"pattern": "zero", "element": 0},
         "trigger": {"op": "aten::mul"}}]}))
    result = child("""
        import torch
        x = torch.ones(3, device="openreg")
        print((x * 1).cpu().tolist())
        """, OPENREG_FAULT_PLAN=str(plan))
    assert result.stdout.strip() == "[0.0, 1.0, 1.0]", result.stderr
    plan.write_text('{"faults": [{"hang": {"seconds": -1}}]}')
    result = child("""
        import torch
        torch.ones(3, device="openreg")
        """, OPENREG_FAULT_PLAN=str(plan))
    assert result.returncode != 0
    assert "OPENREG_FAULT_PLAN" in result.stderr
    assert "hang.seconds" in result.stderr and "nothing was armed" in \
        result.stderr


def test_openreg_ctl_adds_lists_logs_and_clears_daemon_wide_faults():
    refused = ctl("fault", "add", "--spec", '{"corrected_error": {}}')
    assert refused.returncode == 1 and "daemon_wide" in refused.stderr
    added = ctl("fault", "add", "--spec",
                '{"corrected_error": {}, "daemon_wide": true, '
                '"trigger": {"op": "aten::sub", "times": 0}}')
    assert added.returncode == 0, added.stderr
    listed = json.loads(ctl("--json", "fault", "list").stdout)
    assert [f["spec"]["trigger"]["op"] for f in listed["faults"]] == [
        "aten::sub"]
    x = torch.ones(2, device="openreg")
    (x - 1).cpu()
    log = json.loads(ctl("--json", "fault", "log").stdout)
    assert any(r["command"] == "aten::sub.Tensor" for r in log["records"])
    assert ctl("fault", "clear").returncode == 0
    assert json.loads(ctl("--json", "fault", "list").stdout)["faults"] == []
    refused = ctl("device", "reset", "9")
    assert refused.returncode == 1 and "invalid device" in refused.stderr


def test_the_daemon_refuses_a_bad_plan_and_profiles_commands(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{"faults": [{"kernel_failure": {}}]}')
    bad = Daemon(devices=1, extra_args=[f"--fault_plan={plan}"])
    with pytest.raises(RuntimeError, match="daemon_wide"):
        bad.start(timeout=30)
    with Daemon(devices=1, extra_args=["--profile_commands"]) as daemon:
        result = run_python(textwrap.dedent("""
            import torch
            x = torch.ones(4, device="openreg")
            for _ in range(3):
                x = x + 1
            x.cpu()
            """), daemon.env())
        assert result.returncode == 0, result.stderr
        profile = json.loads(ctl("--json", "profile", daemon=daemon).stdout)
        assert profile["enabled"]
        adds = [c for c in profile["counts"] if c["op"] == "aten::add.Tensor"]
        assert sum(int(c["count"]) for c in adds) == 3


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


def test_a_healthy_device_in_use_is_reset_only_when_forced():
    # Another process of the uid (openreg-ctl has no session) must not
    # destroy this session's memory on a healthy device by accident.
    held = torch.ones(1024, device="openreg:1")
    refused = ctl("device", "reset", "1")
    assert refused.returncode == 1
    assert "is healthy and in use" in refused.stderr
    assert "session" in refused.stderr and "--force" in refused.stderr
    assert (held * 2).cpu().sum().item() == 2048  # nothing was lost
    with pytest.raises(ValueError, match="is healthy and in use"):
        faults.reset_device(1)
    forced = ctl("device", "reset", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "lost" in forced.stdout and "bytes" in forced.stdout
    with pytest.raises(RuntimeError, match="lost when the device was reset"):
        (held + 1).cpu()
    del held
    torch.openreg.empty_cache()
    # A device nobody holds memory on resets without force.
    assert faults.reset_device(1) == []
    assert (torch.ones(2, device="openreg:1") * 3).cpu().tolist() == [3, 3]
