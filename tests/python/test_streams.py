"""Streams, events, multiple devices and torch.accelerator on openreg.

Concurrency is proven by ordering, never by timing thresholds: a stream kept
busy by large matmuls is still running (its event's query() is False) when
an event of another stream has already completed. Observing that once
proves that the other stream was not queued behind the busy one; a loaded
machine may hide it in one attempt, so such checks get a few attempts
(`_observed`). One daemon (2 devices) serves the whole module."""

import sys
import threading

import pytest
import torch

from daemon_fixture import module_daemon
from stream_helpers import observed as _observed
from stream_helpers import busy
from stream_helpers import restore_device_and_streams  # noqa: F401 (autouse)

DAEMON, setup_module, teardown_module = module_daemon(devices=2)

_BUSY_MATMULS = 5  # about 2 s of daemon work on BUSY_SIZE matrices


def _busy(stream, matmuls=_BUSY_MATMULS):
    return busy(stream, matmuls)


def _kernels_by_device():
    return {d["device"]: d["kernels_executed"]
            for d in torch.openreg.daemon_stats()["devices"]}


# ---- Stream and Event objects ------------------------------------------------


def test_stream_objects():
    s = torch.openreg.Stream(priority=-1)
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("openreg", 0)
    assert s.priority == -1
    assert s.stream_id >= torch.openreg.device_count()  # not a default slot
    other = torch.openreg.Stream("openreg:1")
    assert other.device == torch.device("openreg", 1)
    assert s != other and len({s, other}) == 2
    # Equality and hashing follow (device, stream id).
    same = torch.openreg.Stream(stream_id=s.stream_id,
                                device_index=s.device_index,
                                device_type=s.device_type)
    assert same == s and hash(same) == hash(s) and len({s, same}) == 1
    assert s.query()  # nothing queued yet
    s.synchronize()
    assert s != "not a stream"


def test_default_and_current_streams():
    for index in (0, 1):
        default = torch.openreg.default_stream(index)
        assert default.stream_id == index  # runtime slot d is device d's
        assert default.device == torch.device("openreg", index)
        assert torch.openreg.current_stream(index) == default
        assert torch.accelerator.current_stream(index) == default
    assert torch.openreg.current_stream() == torch.openreg.default_stream(0)
    assert torch.openreg.default_stream("openreg:1").device.index == 1


def test_generic_torch_stream_and_event():
    s = torch.Stream(device="openreg")
    assert s.device == torch.device("openreg", 0)
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record(s)
    with s:  # torch.Stream's own context manager
        assert torch.openreg.current_stream() == s
        y = torch.ones(100, device="openreg") * 3
    end.record(s)
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0
    assert torch.openreg.current_stream() == torch.openreg.default_stream()
    # An openreg Stream accepts generic events, and vice versa.
    torch.openreg.Stream().wait_event(end)
    s.wait_stream(torch.openreg.Stream())
    s.synchronize()
    assert y.sum().item() == 300


def test_set_stream_is_per_device_and_sets_the_device():
    s1 = torch.openreg.Stream(1)
    torch.openreg.set_stream(s1)
    assert torch.openreg.current_device() == 1
    assert torch.openreg.current_stream(1) == s1
    assert torch.openreg.current_stream() == s1
    assert torch.openreg.current_stream(0) == torch.openreg.default_stream(0)
    torch.openreg.set_stream(None)  # no-op
    assert torch.openreg.current_stream(1) == s1


def test_current_stream_is_per_thread():
    s = torch.openreg.Stream()
    seen = {}

    def worker():
        seen["initial"] = torch.openreg.current_stream()
        other = torch.openreg.Stream()
        torch.openreg.set_stream(other)
        seen["set"] = (other, torch.openreg.current_stream())

    with torch.openreg.stream(s):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert torch.openreg.current_stream() == s  # untouched by the thread
    assert seen["initial"] == torch.openreg.default_stream(0)
    assert seen["set"][0] == seen["set"][1]


def test_stream_context_restores_streams_and_device():
    s0 = torch.openreg.Stream(0)
    s1 = torch.openreg.Stream(1)
    with torch.openreg.stream(s0):
        assert torch.openreg.current_stream() == s0
        with torch.openreg.stream(s1):  # another device: switches to it
            assert torch.openreg.current_device() == 1
            assert torch.openreg.current_stream() == s1
            assert torch.openreg.current_stream(0) == s0
        assert torch.openreg.current_device() == 0
        assert torch.openreg.current_stream() == s0
        assert torch.openreg.current_stream(1) == torch.openreg.default_stream(1)
    assert torch.openreg.current_stream() == torch.openreg.default_stream(0)
    with pytest.raises(KeyError):
        with torch.openreg.stream(s0):
            raise KeyError("restored on exceptions too")
    assert torch.openreg.current_stream() == torch.openreg.default_stream(0)
    with torch.openreg.stream(None):  # no-op
        assert torch.openreg.current_stream() == torch.openreg.default_stream(0)


def test_ops_and_allocations_use_the_current_stream():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        _, busy_event = _busy(s, matmuls=3)
        # An op queued behind the busy work on the same stream...
        y = torch.ones(10, device="openreg") + 1
        after = torch.openreg.current_stream().record_event()
    after.synchronize()
    assert busy_event.query()  # ...finished after it: same stream, in order
    assert y.sum().item() == 20


# ---- Concurrency and ordering --------------------------------------------------


def test_long_work_on_one_stream_does_not_delay_another():
    a = torch.openreg.Stream()
    b = torch.openreg.Stream()

    def b_finishes_while_a_runs():
        _, a_done = _busy(a)
        with torch.openreg.stream(b):
            small = torch.ones(1000, device="openreg") * 2
            b_done = b.record_event()
        b_done.synchronize()
        a_running = not a_done.query() and not a.query()
        a_done.synchronize()
        assert a.query() and a_done.query()
        assert small.sum().item() == 2000
        return a_running

    assert _observed(b_finishes_while_a_runs), \
        "stream B always waited for stream A's work"


def test_wait_event_orders_streams():
    a = torch.openreg.Stream()
    b = torch.openreg.Stream()
    target = torch.zeros(1000, device="openreg")
    a.wait_stream(torch.openreg.current_stream())
    b.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(a):
        _busy(a)
        target.fill_(7.0)  # written after the long work
        a_done = a.record_event()
    b.wait_event(a_done)  # returns at once; B's future work waits
    with torch.openreg.stream(b):
        result = target + 1
        b_done = b.record_event()
    b_pending = not b_done.query()
    if not a_done.query():  # A still running now, so B was held back then
        assert b_pending
    b_done.synchronize()
    assert a_done.query(), "B's event completed before A's"
    torch.openreg.current_stream().wait_stream(b)
    # B read the value A wrote after its long work.
    torch.testing.assert_close(result.cpu(), torch.full((1000,), 8.0))


def test_wait_stream_orders_streams():
    a = torch.openreg.Stream()
    b = torch.openreg.Stream()
    _, a_done = _busy(a, matmuls=3)
    b.wait_stream(a)
    b_done = b.record_event()
    b_done.synchronize()
    assert a_done.query()


def test_event_query_wait_and_synchronize():
    s = torch.openreg.Stream()
    event = torch.openreg.Event()
    assert event.query()  # never recorded: nothing to wait for
    event.synchronize()
    _busy(s, matmuls=3)
    event.record(s)
    assert event.device == torch.device("openreg", 0)
    waiter = torch.openreg.Stream()
    event.wait(waiter)
    after = waiter.record_event()
    after.synchronize()
    assert event.query()  # the waiter passed only after the event
    event.synchronize()
    # Recording on the current stream by default.
    with torch.openreg.stream(s):
        event.record()
    event.synchronize()
    # Events stay on the device they were first recorded on.
    with pytest.raises(RuntimeError, match="device"):
        event.record(torch.openreg.Stream(1))


def test_elapsed_time():
    s = torch.openreg.Stream()
    _busy(s, matmuls=1)  # warm up the stream and the kernel
    start = torch.openreg.Event(enable_timing=True)
    middle = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    with torch.openreg.stream(s):
        small = torch.ones(10, device="openreg")
        start.record()
        small.add_(1)
        middle.record()
        _busy(s, matmuls=3)
        end.record()
    end.synchronize()
    short = start.elapsed_time(middle)
    long = middle.elapsed_time(end)
    assert short >= 0 and long > 0
    assert long > short  # more work, more time
    assert start.elapsed_time(end) >= long


def test_elapsed_time_errors():
    untimed_a, untimed_b = torch.openreg.Event(), torch.openreg.Event()
    untimed_a.record()
    untimed_b.record()
    untimed_b.synchronize()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        untimed_a.elapsed_time(untimed_b)
    generic_a = torch.Event(device="openreg")
    generic_b = torch.Event(device="openreg")
    generic_a.record()
    generic_b.record()
    generic_b.synchronize()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        generic_a.elapsed_time(generic_b)
    timed = torch.openreg.Event(enable_timing=True)
    never = torch.openreg.Event(enable_timing=True)
    timed.record()
    with pytest.raises(RuntimeError, match="must be recorded"):
        timed.elapsed_time(never)
    on_device_1 = torch.openreg.Event(enable_timing=True)
    on_device_1.record(torch.openreg.default_stream(1))
    on_device_1.synchronize()
    with pytest.raises(RuntimeError, match="same device"):
        timed.elapsed_time(on_device_1)


def test_kernel_errors_are_reported_at_that_streams_synchronize():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        # The first launch of a signature is checked (waited for); the
        # next, with the same metadata, is launched asynchronously and its
        # value-dependent failure is found in the daemon.
        torch._assert_async(torch.ones((), device="openreg"))
        torch._assert_async(torch.zeros((), device="openreg"))
    with pytest.raises(RuntimeError, match="_assert_async"):
        s.synchronize()
    # The stream and the device stay usable.
    with torch.openreg.stream(s):
        y = torch.ones(4, device="openreg") * 2
    s.synchronize()
    assert y.sum().item() == 8


# ---- Multiple devices ------------------------------------------------------------


def test_streams_on_device_1_run_on_device_1():
    s1 = torch.openreg.Stream(1)
    before = _kernels_by_device()
    with torch.openreg.stream(s1):
        x = torch.ones(100, device="openreg")  # current device is 1 here
        assert x.device == torch.device("openreg", 1)
        for _ in range(5):
            x = x * 1.5
    s1.synchronize()
    after = _kernels_by_device()
    assert after[1] >= before[1] + 5
    assert after[0] == before[0]
    assert x.sum().item() == pytest.approx(100 * 1.5**5)


def test_two_devices_run_in_parallel():
    s0 = torch.openreg.Stream(0)
    s1 = torch.openreg.Stream(1)

    def device_1_finishes_while_device_0_runs():
        _, busy_0 = _busy(s0)
        with torch.openreg.stream(s1):
            y = torch.ones(1000, device="openreg") + 1
            done_1 = s1.record_event()
        done_1.synchronize()
        device_0_running = not busy_0.query()
        busy_0.synchronize()
        assert y.sum().item() == 2000
        return device_0_running

    assert _observed(device_1_finishes_while_device_0_runs), \
        "device 1 always waited for device 0"


def test_stream_of_another_device_waits_on_event():
    a0 = torch.openreg.Stream(0)
    _, busy_0 = _busy(a0, matmuls=3)
    s1 = torch.openreg.Stream(1)
    s1.wait_event(busy_0)  # cross-device wait
    done_1 = s1.record_event()
    done_1.synchronize()
    assert busy_0.query()


# ---- record_stream and the caching allocator -------------------------------------


def _free_then_reallocate(record):
    """Frees a block used on a busy side stream (recording that use when
    `record`) and allocates the same size on the default stream at once.
    Returns (old address, new address, side stream still busy)."""
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    side = torch.openreg.Stream()
    x = torch.ones(1 << 20, device="openreg")  # on the default stream
    address = x.data_ptr()
    side.wait_stream(torch.openreg.current_stream())
    _busy(side)
    with torch.openreg.stream(side):
        x.mul_(2)  # uses x on the side stream after the long work
    if record:
        x.record_stream(side)
    del x
    y = torch.empty(1 << 20, device="openreg")
    side_busy = not side.query()  # still running after the allocation
    side.synchronize()
    return address, y, side_busy


def test_record_stream_delays_reuse_until_the_stream_passes():
    def not_reused_while_side_stream_runs():
        address, y, side_busy = _free_then_reallocate(record=True)
        if side_busy:
            assert y.data_ptr() != address  # not reused while it ran
        # Once the side stream has passed the free point, it is reused.
        z = torch.empty(1 << 20, device="openreg")
        assert address in (y.data_ptr(), z.data_ptr())
        return side_busy

    assert _observed(not_reused_while_side_stream_runs), \
        "the side stream was never still running at the reallocation"


def test_without_record_stream_the_block_is_reused_at_once():
    address, y, _ = _free_then_reallocate(record=False)
    assert y.data_ptr() == address  # CUDA's semantics: per-stream reuse


def test_record_stream_accepts_generic_streams_only_of_the_same_device():
    x = torch.ones(10, device="openreg:0")
    x.record_stream(torch.Stream(device="openreg:0"))
    with pytest.raises(RuntimeError, match="device"):
        x.record_stream(torch.openreg.Stream(1))


# ---- torch.accelerator -----------------------------------------------------------


def test_accelerator_devices():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("openreg")
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.openreg.current_device() == 1
    assert torch.ones(1, device="openreg").device.index == 1
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_device_index() == 1
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index("openreg:0")
    assert torch.openreg.current_device() == 0


def test_accelerator_streams():
    assert torch.accelerator.current_stream() == torch.openreg.default_stream()
    s = torch.openreg.Stream(1)
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream() == s
    assert torch.openreg.current_stream(1) == s
    assert torch.accelerator.current_stream(0) == torch.openreg.default_stream(0)


def test_accelerator_synchronize_waits_for_every_stream_of_the_device():
    a = torch.openreg.Stream(0)
    _, busy = _busy(a, matmuls=3)
    torch.accelerator.synchronize()
    assert busy.query() and a.query()
    _, busy_1 = _busy(torch.openreg.Stream(1), matmuls=3)
    torch.accelerator.synchronize(1)
    assert busy_1.query()


def test_accelerator_memory_functions():
    torch.openreg.synchronize()
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats(0)
    base = torch.accelerator.memory_allocated(0)
    x = torch.empty(1 << 20, device="openreg")  # 4 MiB
    assert torch.accelerator.memory_allocated(0) == base + (4 << 20)
    assert torch.accelerator.memory_allocated(0) == \
        torch.openreg.memory_allocated(0)
    assert torch.accelerator.max_memory_allocated(0) >= base + (4 << 20)
    assert torch.accelerator.memory_reserved(0) >= base + (4 << 20)
    stats = torch.accelerator.memory_stats(0)
    assert stats["allocated_bytes.all.current"] == base + (4 << 20)
    del x
    assert torch.accelerator.memory_allocated(0) == base
    assert torch.accelerator.max_memory_allocated(0) >= base + (4 << 20)
    torch.accelerator.reset_peak_memory_stats(0)
    assert torch.accelerator.max_memory_allocated(0) == base
    reserved = torch.accelerator.memory_reserved(0)
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved(0) <= reserved
    torch.accelerator.reset_accumulated_memory_stats(0)
    assert torch.accelerator.memory_stats(0)["num_device_alloc"] == 0
    free, total = torch.accelerator.get_memory_info(0)
    assert total == 2 * 1024**3 and 0 < free <= total
    # Device 1 has its own accounting.
    y = torch.empty(1 << 20, device="openreg:1")
    assert torch.accelerator.memory_allocated(1) >= 4 << 20
    assert torch.accelerator.memory_allocated(0) == base
    del y


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
