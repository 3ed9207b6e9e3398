"""Stream priorities and the daemon's executor pool, stream pools, device
capability.

The module's daemon has one executor per device (OPENREG_MULTIPROCESSORS=1,
the default of --executors_per_device), so a single long kernel saturates a
device and the order in which waiting streams get the executor is visible.
Order is shown by results, device timestamps and stream states, never by
timing thresholds: two kernels that do not commute (x + 1 and x * 2) on one
tensor leave a value that says which ran first.
"""

import os
import sys
import threading

import pytest
import torch

from daemon_fixture import Daemon
from stream_helpers import observed as _observed
from stream_helpers import BUSY_SIZE, busy
from stream_helpers import restore_device_and_streams  # noqa: F401 (autouse)

DAEMON = Daemon(devices=2)


def setup_module():
    # The daemon inherits the environment at start: one slot per device.
    previous = os.environ.get("OPENREG_MULTIPROCESSORS")
    os.environ["OPENREG_MULTIPROCESSORS"] = "1"
    try:
        DAEMON.start().use()
    finally:
        if previous is None:
            del os.environ["OPENREG_MULTIPROCESSORS"]
        else:
            os.environ["OPENREG_MULTIPROCESSORS"] = previous


def teardown_module():
    DAEMON.stop()


def _block(stream, matmuls=2):
    """Occupies the device's only executor with long kernels on
    `stream` (its first queued kernel is already a long one); returns an
    event recorded after them."""
    return busy(stream, matmuls, wait_until_started=True)[1]


# ---- Priorities -------------------------------------------------------------


def test_priority_range_and_clamping():
    assert torch.openreg.Stream.priority_range() == (0, -3)
    least, greatest = torch.openreg.Stream.priority_range()
    assert torch.openreg.Stream().priority == 0
    for requested, expected in [(-1, -1), (-2, -2), (greatest, greatest),
                                (-100, greatest), (5, least)]:
        assert torch.openreg.Stream(priority=requested).priority == expected
    assert torch.openreg.default_stream().priority == 0
    high = torch.openreg.Stream("openreg:1", priority=-2)
    torch.openreg.set_stream(high)
    # The priority is known for a stream obtained back from its id.
    assert torch.openreg.current_stream(1).priority == -2


def _stamp(stream):
    return stream.record_event(torch.openreg.Event(enable_timing=True))


def test_high_priority_kernel_overtakes_a_waiting_low_priority_kernel():
    blocker = torch.openreg.Stream(priority=0)
    low = torch.openreg.Stream(priority=0)
    high = torch.openreg.Stream(priority=-1)
    assert len({blocker, low, high}) == 3
    n = BUSY_SIZE
    b = torch.full((n, n), 1.0 / n, device="openreg")
    x = torch.empty((n, n), device="openreg")
    blocked = 1.0 / n  # every element of b @ b, exact in float32
    high_first, low_first = blocked * 2 + 1, (blocked + 1) * 2

    def attempt():
        """(conclusive, the high-priority kernel ran first)."""
        x.fill_(3.0)
        torch.openreg.synchronize()  # no cross-stream waits below
        with torch.openreg.stream(blocker):
            blocker_start = _stamp(blocker)
            torch.mm(b, b, out=x)  # takes the only executor; overwrites x
        # Once the executor has passed this stamp it goes straight on to
        # the kernel: the others most likely arrive while it runs.
        blocker_start.synchronize()
        with torch.openreg.stream(low):
            x[0, :4].add_(1)  # submitted first
        with torch.openreg.stream(high):
            x[0, :4].mul_(2)  # submitted second, at a higher priority
        # The kernel is the blocker's last command: while it has not
        # finished, both others were submitted before the executor could
        # pick its next stream, so the scheduler chose between them.
        both_waited = not blocker.query()
        torch.openreg.synchronize()
        value = x[0, 0].item()
        # Conclusive when the blocker ran first (a kernel before it would
        # be overwritten) and both others waited for it.
        conclusive = value in (high_first, low_first) and both_waited
        return conclusive, value == high_first

    # The first launch of each op signature is checked (the client waits
    # for it): run both once, so that in the attempts both are queued.
    x[0, :4].add_(1)
    x[0, :4].mul_(2)
    torch.mm(b, b, out=x)
    torch.openreg.synchronize()
    # Without priorities the earlier low-priority kernel would run first.
    # A loaded host can delay the blocker's kernel past the others' arrival;
    # such attempts are inconclusive and repeated.
    results = []
    for _ in range(40):
        conclusive, ran_first = attempt()
        if conclusive:
            results.append(ran_first)
        if len(results) == 3:
            break
    assert len(results) == 3, "the kernels never waited for the blocker"
    assert all(results), f"high-priority kernel first in {results}"


def test_high_priority_work_finishes_before_a_low_priority_queue_drains():
    low = torch.openreg.Stream(priority=0)
    high = torch.openreg.Stream(priority=-3)

    def finished_first():
        queue_done = _block(low, matmuls=6)  # the low-priority queue
        with torch.openreg.stream(high):
            y = torch.ones(1000, device="openreg") * 2
            high_done = high.record_event()
        high_done.synchronize()
        drained = queue_done.query()
        queue_done.synchronize()
        assert y.sum().item() == 2000
        return not drained

    assert _observed(finished_first)


def test_equal_priorities_take_turns_on_a_saturated_device():
    # One executor, and stream A has a long queue: B's kernel, submitted
    # later, runs at A's next command boundary instead of after A's queue.
    a = torch.openreg.Stream()
    b = torch.openreg.Stream()

    def b_finished_first():
        a_done = _block(a, matmuls=5)
        with torch.openreg.stream(b):
            small = torch.ones(1000, device="openreg") + 1
            b_done = b.record_event()
        b_done.synchronize()
        a_running = not a_done.query()
        a_done.synchronize()
        assert small.sum().item() == 2000
        return a_running

    assert _observed(b_finished_first)


def test_copies_and_waits_do_not_wait_for_a_busy_streams_queue():
    blocker = torch.openreg.Stream()
    other = torch.openreg.Stream()
    waiter = torch.openreg.Stream()

    def copy_finished_while_blocked():
        blocked = _block(blocker, matmuls=3)
        # A stream waiting for the blocker gives its executor back while it
        # waits (managed blocking), so the blocker's own later kernels are
        # not starved by it; the copies get the executor at the blocker's
        # next command boundary.
        waiter.wait_event(blocked)
        with torch.openreg.stream(waiter):
            after = torch.ones(10, device="openreg") * 5
        with torch.openreg.stream(other):
            # Host-to-device and device-to-host copies only: no kernel.
            host = torch.arange(6, dtype=torch.float32)
            round_trip = host.to("openreg").cpu()
        running = not blocked.query()
        assert torch.equal(round_trip, host)
        waiter.synchronize()
        assert blocked.query()
        assert after.sum().item() == 50
        return running

    assert _observed(copy_finished_while_blocked)


def test_devices_have_separate_executors():
    # Device 1's executor is free while device 0's is busy.
    s0 = torch.openreg.Stream(0)
    s1 = torch.openreg.Stream(1)

    def device_1_ran_while_0_busy():
        busy = _block(s0, matmuls=3)
        with torch.openreg.stream(s1):
            y = torch.ones(100, device="openreg:1") * 3
            done = s1.record_event()
        done.synchronize()
        running = not busy.query()
        busy.synchronize()
        assert y.sum().item() == 300
        return running

    assert _observed(device_1_ran_while_0_busy)


# ---- Stream pools -----------------------------------------------------------


def torch_openreg_pool_size():
    from torch_openreg import _C
    return _C._pool_streams_per_priority


def test_new_streams_come_from_a_pool_per_device_and_priority():
    size = torch_openreg_pool_size()
    for device in (0, 1):
        for priority in (0, -1):
            streams = [torch.openreg.Stream(device, priority=priority)
                       for _ in range(size + 1)]
            # Round robin: `size` distinct streams, then the first again.
            assert len(set(streams[:size])) == size
            assert streams[size] in streams[:size]
            assert all(s.device == torch.device("openreg", device)
                       for s in streams)
            assert all(s.priority == priority for s in streams)
            default = torch.openreg.default_stream(device)
            assert default not in streams
    low = {torch.openreg.Stream(priority=0) for _ in range(size)}
    high = {torch.openreg.Stream(priority=-1) for _ in range(size)}
    assert not low & high  # each priority has its own streams
    # The binding behind getStreamFromGlobalPool hands out the same streams.
    from torch_openreg import _C
    stream_id, device_index, device_type = _C._stream_from_pool(0, -1)
    pooled = torch.openreg.Stream(stream_id=stream_id,
                                  device_index=device_index,
                                  device_type=device_type)
    assert pooled in high and pooled.priority == -1


def test_generic_torch_streams_share_the_pool():
    size = torch_openreg_pool_size()
    generic = [torch.Stream(device="openreg") for _ in range(size)]
    assert len(set(generic)) == size
    # The next openreg Stream of that device and priority is one of them.
    assert torch.openreg.Stream() in generic
    # Many streams never exhaust the session's stream slots.
    for _ in range(10 * size):
        torch.Stream(device="openreg:1", priority=-2)
    s = torch.openreg.Stream(1, priority=-2)
    with torch.openreg.stream(s):
        assert (torch.ones(3, device="openreg:1") * 2).sum().item() == 6


# ---- Device capability ------------------------------------------------------


def test_multiprocessor_count_is_the_executor_count():
    # This module's daemon runs with OPENREG_MULTIPROCESSORS=1.
    for device in range(torch.openreg.device_count()):
        properties = torch.openreg.get_device_properties(device)
        assert properties.multi_processor_count == 1


def test_get_device_capability():
    properties = torch.openreg.get_device_properties()
    expected = (properties.major, properties.minor)
    assert torch.openreg.get_device_capability() == expected
    assert torch.openreg.get_device_capability(1) == expected
    assert torch.openreg.get_device_capability("openreg:1") == expected
    assert torch.openreg.get_device_capability(
        torch.device("openreg", 0)) == (1, 0)
    with pytest.raises(ValueError):
        torch.openreg.get_device_capability("cpu")


def test_is_bf16_supported():
    assert torch.openreg.is_bf16_supported()
    assert torch.openreg.is_bf16_supported(including_emulation=False)
    x = torch.ones(4, dtype=torch.bfloat16, device="openreg")
    assert (x * 2).sum().item() == 8


# ---- Current streams through torch_openreg._C -------------------------------


def test_stream_functions_do_not_use_torch_accelerator(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.accelerator was used")

    for name in ("_accelerator_getStream", "_accelerator_setStream"):
        if hasattr(torch._C, name):
            monkeypatch.setattr(torch._C, name, refuse)
    s = torch.openreg.Stream(1)
    torch.openreg.set_stream(s)
    assert torch.openreg.current_stream(1) == s
    assert torch.openreg.current_stream() == s
    assert torch.openreg.default_stream(1).stream_id == 1
    with torch.openreg.stream(torch.openreg.Stream(0)):
        assert torch.openreg.current_device() == 0


def test_current_streams_are_per_device_and_per_thread():
    s0 = torch.openreg.Stream(0)
    s1 = torch.openreg.Stream(1)
    torch.openreg.set_stream(s0)
    torch.openreg.set_stream(s1)  # another device: becomes current too
    assert torch.openreg.current_device() == 1
    assert torch.openreg.current_stream(0) == s0
    assert torch.openreg.current_stream(1) == s1
    seen = {}

    def worker():
        seen["before"] = (torch.openreg.current_stream(0),
                          torch.openreg.current_stream(1))
        mine = torch.openreg.Stream(1, priority=-1)
        torch.openreg.set_stream(mine)
        seen["after"] = (mine, torch.openreg.current_stream(1),
                         torch.openreg.current_device())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["before"] == (torch.openreg.default_stream(0),
                              torch.openreg.default_stream(1))
    mine, current, device = seen["after"]
    assert current == mine and device == 1
    # The thread's choices did not touch this thread's streams.
    assert torch.openreg.current_stream(0) == s0
    assert torch.openreg.current_stream(1) == s1
    # torch.accelerator reads the same per-thread state.
    assert torch.accelerator.current_stream(0) == s0



# Last: it fills the session's stream slots.
def test_pools_reuse_their_streams_when_the_session_runs_out_of_slots():
    size = torch_openreg_pool_size()
    least, greatest = torch.openreg.Stream.priority_range()
    # 2 devices x 4 priorities x `size` streams exceed the session's slots
    # (64 minus the default streams): the last pools stop growing.
    streams = set()
    for device in (0, 1):
        for priority in range(greatest, least + 1):
            for _ in range(size):
                streams.add(torch.openreg.Stream(device, priority=priority))
    assert len(streams) <= 64 - torch.openreg.device_count()
    assert len(streams) > 2 * size  # most pools did grow
    for s in streams:
        with torch.openreg.stream(s):
            y = torch.ones(4, device=s.device) + 1
        s.synchronize()
        assert y.sum().item() == 8


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
