"""Device activity in torch.profiler (docs/OBSERVABILITY.md): the daemon's
timestamps of each kernel and copy on the device's timeline, correlated
with the CPU op that launched it, in export_chrome_trace and in
key_averages()'s device columns; their durations against the daemon's own
busy time; memory events; the legacy use_device="openreg" path without an
error line; a CPU-only profile that leaves the device alone."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch_openreg
from torch.profiler import ProfilerActivity, profile

from daemon_fixture import module_daemon, python_env

DAEMON, setup_module, teardown_module = module_daemon(
    devices=2, memory_per_device="1GiB")

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def busy_seconds(device=0):
    done = subprocess.run(
        [torch_openreg.ctl_binary(), f"--socket={DAEMON.socket}", "--json",
         "stats"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["devices"][device]["busy_seconds"]


def device_events(prof):
    return [e for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def step(a, host):
    """A matmul, a relu and a host-to-device copy, as a training step has."""
    b = (a @ a).relu()
    host_copy = host.to("openreg", non_blocking=False)
    return b, host_copy


def test_a_step_records_device_events_whose_durations_are_the_daemons_busy_time():
    a = torch.randn(512, 512, device="openreg")
    host = torch.randn(1 << 22)  # 16 MiB
    torch.openreg.synchronize()
    before = busy_seconds()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        for _ in range(4):
            step(a, host)
    after = busy_seconds()
    events = device_events(prof)
    names = [e.name for e in events]
    assert names.count("aten::mm") == 4, names
    # A pageable copy goes through staging in chunks: a command each.
    assert names.count("copy_host_to_device") >= 4, names
    recorded = sum(e.time_range.elapsed_us() for e in events) / 1e6
    daemon_busy = after - before
    # Each event lies inside one of the device's busy slices, so the events
    # cannot sum to more than the busy time (2% for their rounding to
    # whole microseconds). A slice also covers reading each command from
    # the ring and the stream's brief spin before it parks, and, on a
    # loaded host, the executor being preempted between two commands: CI
    # saw 86% with other tests running, a quiet host 98%. The matmuls are
    # two thirds of the busy time here: 70% still fails if their device
    # time went unrecorded.
    assert recorded <= daemon_busy * 1.02, (recorded, daemon_busy)
    assert recorded >= daemon_busy * 0.70, (recorded, daemon_busy)
    for event in events:
        assert event.device_index == 0
        assert event.time_range.elapsed_us() > 0


def test_each_device_event_is_linked_to_the_cpu_op_that_launched_it():
    a = torch.randn(256, 256, device="openreg:1")
    host = torch.randn(1024)
    torch.openreg.synchronize(1)
    with torch.openreg.device(1):
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            step(a, host)
    # The CPU op's row carries its kernel's device time (torch links them
    # by the correlation id the kernel's command carried); the kernel has a
    # row of its own.
    rows = [row for row in prof.key_averages() if row.key == "aten::mm"]
    cpu_rows = [row for row in rows if row.self_cpu_time_total > 0]
    assert len(cpu_rows) == 1 and cpu_rows[0].device_time_total > 0, rows
    kernels = [e for e in device_events(prof) if e.name == "aten::mm"]
    assert len(kernels) == 1 and kernels[0].device_index == 1
    cpu_mm = [e for e in prof.events() if e.name == "aten::mm"
              and e.device_type == torch.autograd.DeviceType.CPU]
    assert len(cpu_mm) == 1
    assert cpu_mm[0].device_time_total == pytest.approx(
        kernels[0].time_range.elapsed_us(), rel=0.01)
    # The kernel ran after the op launched it, on the same clock.
    assert kernels[0].time_range.start >= cpu_mm[0].time_range.start


def test_the_chrome_trace_holds_the_device_timeline_with_flows(tmp_path):
    a = torch.randn(128, 128, device="openreg")
    host = torch.randn(1024)
    torch.openreg.synchronize()
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        step(a, host)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in trace if e.get("cat") == "kernel"
               and e["name"] == "aten::mm"]
    copies = [e for e in trace if e.get("cat") == "gpu_memcpy"]
    assert len(kernels) == 1 and len(copies) == 1, [
        (e.get("cat"), e.get("name")) for e in trace]
    kernel = kernels[0]
    assert kernel["args"]["device"] == 0 and kernel["dur"] > 0
    assert copies[0]["args"]["bytes"] == 4096
    # Linked to the CPU op that launched it: the same External id.
    cpu_ops = [e for e in trace if e.get("cat") == "cpu_op"
               and e["name"] == "aten::mm"]
    assert len(cpu_ops) == 1
    assert kernel["args"]["External id"] == cpu_ops[0]["args"]["External id"]
    assert kernel["args"]["correlation"] == kernel["args"]["External id"]
    assert kernel["ts"] >= cpu_ops[0]["ts"]
    flows = [e for e in trace if e.get("cat") == "ac2g"
             and e.get("id") == kernel["args"]["correlation"]]
    assert [e["ph"] for e in flows] == ["f"]


def test_profile_memory_records_the_device_allocations(tmp_path):
    torch.openreg.synchronize()
    with profile(activities=DEVICE_ACTIVITIES, profile_memory=True) as prof:
        x = torch.empty(1 << 20, device="openreg")  # 4 MiB
        del x
    rows = {row.key: row for row in prof.key_averages()}
    assert rows["aten::empty"].device_memory_usage == 4 << 20
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    memory = [e["args"] for e in json.loads(path.read_text())["traceEvents"]
              if e.get("name") == "[memory]"]
    privateuse1 = int(torch._C._autograd.DeviceType.PrivateUse1)
    mine = [m for m in memory if abs(m["Bytes"]) == 4 << 20]
    assert [m["Bytes"] for m in mine] == [4 << 20, -(4 << 20)], memory
    assert all(m["Device Type"] == privateuse1 and m["Device Id"] == 0
               for m in mine)
    assert mine[0]["Total Allocated"] >= 4 << 20


def test_a_cpu_only_profile_records_no_device_event():
    a = torch.randn(64, 64, device="openreg")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (a @ a).relu()
    torch.openreg.synchronize()
    assert device_events(prof) == []
    assert any(e.name == "aten::mm" for e in prof.events())


LEGACY = textwrap.dedent("""
    import torch
    a = torch.randn(128, 128, device="openreg")
    torch.openreg.synchronize()
    with torch.autograd.profiler.profile(use_device={use_device!r}) as prof:
        for _ in range(3):
            (a @ a).relu()
        a.cpu()
    rows = {{r.key: r for r in prof.key_averages()}}
    print(rows["aten::mm"].device_time_total if {use_device!r} else 0,
          rows["aten::mm"].cpu_time_total)
    """)


def kineto_lines_only(stderr):
    # Kineto itself prints its start and stop on stderr for every profile
    # on this wheel (a CPU-only one too); openreg adds nothing.
    return [line for line in stderr.splitlines()
            if not line.startswith(("USDT:", "STAGE:"))]


def test_use_device_openreg_prints_nothing_and_times_the_device():
    done = subprocess.run(
        [sys.executable, "-c", LEGACY.format(use_device="openreg")],
        env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert kineto_lines_only(done.stderr) == [], done.stderr
    device_us, cpu_us = (float(v) for v in done.stdout.split())
    assert device_us > 0 and cpu_us > 0
    plain = subprocess.run(
        [sys.executable, "-c", LEGACY.format(use_device=None)],
        env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert len(done.stderr.splitlines()) == len(plain.stderr.splitlines())


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                       os.pardir, "examples", "profile_step.py")


def test_the_example_writes_a_trace_with_the_steps_kernels(tmp_path):
    path = tmp_path / "step.json"
    done = subprocess.run(
        [sys.executable, EXAMPLE, str(path)],
        env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Self OPENREG" in done.stdout and "ui.perfetto.dev" in done.stdout
    trace = json.loads(path.read_text())["traceEvents"]
    kernels = {e["name"] for e in trace if e.get("cat") == "kernel"}
    # The forward's matmuls and the backward's, on the device.
    assert "aten::addmm" in kernels and "aten::mm" in kernels, kernels
    assert any(e.get("cat") == "gpu_memcpy" for e in trace)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
