"""torch.openreg.memory._record_memory_history / _snapshot / _dump_snapshot
in torch.cuda's format, rendered by PyTorch's memory visualizer."""

import base64
import gc
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

import pytest
import torch
from torch.cuda import _memory_viz

from daemon_fixture import module_daemon, python_env

DAEMON, setup_module, teardown_module = module_daemon(devices=2)
memory = torch.openreg.memory


@pytest.fixture(autouse=True)
def history_off_after_each_test():
    yield
    memory._record_memory_history(None, clear_history=True)


def _training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs = torch.randn(32, 64, device="openreg")
    targets = torch.randint(0, 10, (32,), device="openreg")
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, loss.detach()


def _this_file(frames):
    return [f for f in frames if f["filename"].endswith("test_memory_snapshots.py")]


def _active_blocks(snapshot, device=0):
    return {block["address"]: block
            for segment in snapshot["segments"] if segment["device"] == device
            for block in segment["blocks"]
            if block["state"] == "active_allocated"}


def test_a_snapshot_lists_segments_with_their_blocks():
    x = torch.empty(1000, dtype=torch.uint8, device="openreg")
    snapshot = memory._snapshot()
    assert set(snapshot) >= {"segments", "device_traces"}
    assert len(snapshot["device_traces"]) == 2
    blocks = _active_blocks(snapshot)
    block = blocks[x.data_ptr()]
    assert block["requested_size"] == 1000
    assert block["size"] == 1024  # rounded to 512-byte blocks
    for segment in snapshot["segments"]:
        assert segment["total_size"] == sum(b["size"] for b in segment["blocks"])
        assert segment["segment_type"] in ("small", "large")
        assert segment["allocated_size"] <= segment["total_size"]
    reserved = sum(s["total_size"] for s in snapshot["segments"]
                   if s["device"] == 0)
    assert reserved == torch.openreg.memory_reserved(0)
    assert memory.memory_snapshot() == snapshot["segments"]
    del x


def test_history_of_a_training_step_has_allocs_and_frees_with_python_frames():
    gc.collect()
    torch.openreg.empty_cache()
    memory._record_memory_history("all", context="all", stacks="python",
                                  clear_history=True)
    model, loss = _training_step()
    kept = torch.ones(4096, device="openreg")  # this line is in the trace
    snapshot = memory._snapshot()
    trace = snapshot["device_traces"][0]
    actions = {entry["action"] for entry in trace}
    assert {"segment_alloc", "alloc", "free_requested",
            "free_completed"} <= actions
    for entry in trace:
        assert set(entry) >= {"action", "addr", "size", "stream", "time_us",
                              "frames"}
    allocs = [e for e in trace if e["action"] == "alloc"]
    # Forward and optimizer allocations run on this thread; backward ones
    # on autograd's device thread, which has no Python frames (as on CUDA).
    weight = model[0].weight.data_ptr()
    weight_alloc = [e for e in allocs if e["addr"] == weight][0]
    assert "_training_step" in {f["name"] for f in weight_alloc["frames"]}
    kept_alloc = [e for e in allocs if e["addr"] == kept.data_ptr()][-1]
    assert kept_alloc["size"] == 4096 * 4
    names = {f["name"] for f in _this_file(kept_alloc["frames"])}
    assert "test_history_of_a_training_step_has_allocs_and_frees_with_python_frames" in names
    # Frees carry the freeing stack (context="all").
    frees = [e for e in trace if e["action"] == "free_requested"]
    assert any(_this_file(e["frames"]) for e in frees)
    # Replaying the trace gives exactly the live blocks allocated while
    # recording (those have frames; earlier ones do not).
    alive = {}
    for entry in trace:
        if entry["action"] == "alloc":
            alive[entry["addr"]] = entry["size"]
        elif entry["action"] == "free_requested":
            alive.pop(entry["addr"])
    recorded = {address: block["requested_size"]
                for address, block in _active_blocks(snapshot).items()
                if block["frames"]}
    assert alive == recorded
    assert kept.data_ptr() in recorded
    assert model[0].weight.data_ptr() in recorded
    del model, loss, kept


def test_pytorch_memory_visualizer_renders_an_openreg_snapshot():
    gc.collect()
    torch.openreg.empty_cache()  # so that the trace has segment_alloc events
    memory._record_memory_history("all", stacks="python", clear_history=True)
    model, loss = _training_step()
    snapshot = memory._snapshot()
    for render in (_memory_viz.trace_plot, _memory_viz.segment_plot):
        html = render(snapshot)
        assert html.lstrip().startswith("<!DOCTYPE html>")
        embedded = json.loads(re.search(r"const local_files = (\[.*\])",
                                        html).group(1))
        data = base64.b64decode(embedded[0]["base64"])
        assert pickle.loads(data) == snapshot
    # The text views parse every segment, block and event, and check the
    # accounting (free + allocated == reserved for every segment).
    summary = _memory_viz.segsum(snapshot)
    assert f"segments: {len(snapshot['segments'])}" in summary
    text = _memory_viz.trace(snapshot)
    assert "Device 0" in text and "cudaMalloc(" in text
    flame = _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in flame and "test_memory_snapshots.py" in flame
    del model, loss


def test_dump_snapshot_is_read_by_the_memory_viz_command_line():
    memory._record_memory_history("all", stacks="python", clear_history=True)
    x = torch.randn(1000, device="openreg")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "snap.pickle")
        memory._dump_snapshot(path)
        with open(path, "rb") as f:
            loaded = pickle.load(f)
        assert x.data_ptr() in _active_blocks(loaded)
        html = os.path.join(folder, "snap.html")
        result = subprocess.run(
            [sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot",
             path, "-o", html], env=python_env(), capture_output=True,
            text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        with open(html) as f:
            assert "add_local_files" in f.read()
    del x


def test_max_entries_keeps_only_the_newest_events():
    memory._record_memory_history("all", context=None, max_entries=6,
                                  clear_history=True)
    tensors = [torch.empty(100 + i, device="openreg") for i in range(10)]
    trace = memory._snapshot()["device_traces"][0]
    assert len(trace) == 6
    assert [e["addr"] for e in trace if e["action"] == "alloc"] == \
        [t.data_ptr() for t in tensors[-len(
            [e for e in trace if e["action"] == "alloc"]):]]
    assert all(e["frames"] == [] for e in trace)  # context=None
    del tensors


def test_state_mode_keeps_frames_of_live_blocks_but_no_history():
    memory._record_memory_history("state", stacks="python",
                                  clear_history=True)
    x = torch.empty(3000, device="openreg")
    snapshot = memory._snapshot()
    assert snapshot["device_traces"] == [[], []]
    assert _this_file(_active_blocks(snapshot)[x.data_ptr()]["frames"])
    del x


def test_stopping_the_history_records_nothing_more():
    memory._record_memory_history("all", context=None, clear_history=True)
    torch.empty(10, device="openreg")
    before = len(memory._snapshot()["device_traces"][0])
    memory._record_memory_history(None)
    x = torch.empty(20, device="openreg")
    snapshot = memory._snapshot()
    assert len(snapshot["device_traces"][0]) == before
    assert _active_blocks(snapshot)[x.data_ptr()]["frames"] == []
    del x


def test_events_of_each_device_go_to_its_own_trace():
    memory._record_memory_history("all", context=None, clear_history=True)
    y = torch.empty(777, dtype=torch.uint8, device="openreg:1")
    traces = memory._snapshot()["device_traces"]
    assert [e["addr"] for e in traces[1] if e["action"] == "alloc"] == \
        [y.data_ptr()]
    assert all(e["addr"] != y.data_ptr() for e in traces[0])
    del y


def test_an_out_of_memory_error_is_recorded():
    gc.collect()
    torch.openreg.empty_cache()
    torch.openreg.synchronize(1)  # cached segments are back in the daemon
    memory._record_memory_history("all", context=None, clear_history=True)
    torch.openreg.set_per_process_memory_fraction(0.01, 1)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(512 * 1024 * 1024, dtype=torch.uint8,
                        device="openreg:1")
    finally:
        torch.openreg.set_per_process_memory_fraction(1.0, 1)
    ooms = [e for e in memory._snapshot()["device_traces"][1]
            if e["action"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["size"] == 512 * 1024 * 1024
    # What the daemon had free then (nothing else allocates meanwhile).
    free, _ = torch.openreg.mem_get_info(1)
    assert ooms[0]["device_free"] == free


def test_cpp_frames_are_added_with_stacks_all():
    memory._record_memory_history("all", context="alloc", stacks="all",
                                  clear_history=True)
    x = torch.empty(50, device="openreg")
    alloc = [e for e in memory._snapshot()["device_traces"][0]
             if e["action"] == "alloc" and e["addr"] == x.data_ptr()][0]
    assert _this_file(alloc["frames"])
    assert any(not f["filename"].endswith(".py") for f in alloc["frames"])
    del x


def test_bad_arguments_are_refused_naming_the_valid_values():
    with pytest.raises(ValueError, match="'state', 'all'"):
        memory._record_memory_history("everything")
    with pytest.raises(ValueError, match="'alloc'"):
        memory._record_memory_history("all", context="some")
    with pytest.raises(ValueError, match="free_requested"):
        memory._record_memory_history("all", skip_actions=["frees"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
