"""Pinned host memory on openreg: pin_memory(), pin_memory=True, is_pinned,
direct copies with pinned host sides, truly asynchronous non_blocking
copies, the caching host allocator's reuse rules and DataLoader pinning.

Asynchrony is proven by ordering, never by timing thresholds: a stream kept
busy by large matmuls is still running (its event's query() is False) when
a non_blocking copy queued behind it has already returned, or when a copy
on another stream has already completed. A loaded machine may hide that in
one attempt, so such checks get a few attempts (`_observed`)."""

import sys

import pytest
import torch

from daemon_fixture import module_daemon
from stream_helpers import busy
from stream_helpers import observed as _observed

DAEMON, setup_module, teardown_module = module_daemon(devices=1)


def _busy(stream):
    """Enqueues long work on `stream`; returns an event after it."""
    return busy(stream, matmuls=5)[1]


def test_pin_memory_and_is_pinned():
    x = torch.arange(100, dtype=torch.float32)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    assert torch.equal(pinned, x)
    assert pinned.pin_memory().is_pinned()
    # A view of pinned memory is pinned too.
    assert pinned[10:20].is_pinned()


def test_pin_memory_factory():
    empty = torch.empty(3, 5, pin_memory=True)
    assert empty.is_pinned() and empty.shape == (3, 5)
    zeros = torch.zeros(7, dtype=torch.int64, pin_memory=True)
    assert zeros.is_pinned() and int(zeros.sum()) == 0
    with pytest.raises(RuntimeError, match="Only CPU tensors can be pinned"):
        torch.empty(3, device="openreg", pin_memory=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64,
                                   torch.int8, torch.bool, torch.complex64,
                                   torch.bfloat16])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_pinned_copies_round_trip(dtype, non_blocking):
    source = (torch.arange(3 * 257) % 5).to(dtype).reshape(3, 257)
    pinned = source.pin_memory()
    device = pinned.to("openreg", non_blocking=non_blocking)
    back = torch.empty(3, 257, dtype=dtype, pin_memory=True)
    back.copy_(device, non_blocking=non_blocking)
    torch.openreg.synchronize()
    assert torch.equal(back, source)


def test_pinned_copies_non_contiguous_and_converting():
    source = torch.randn(64, 48).pin_memory()
    # Non-contiguous pinned source, contiguous device destination.
    device = torch.empty(48, 64, device="openreg")
    device.copy_(source.t(), non_blocking=True)
    # Contiguous pinned source into a strided device view.
    strided = torch.zeros(64, 96, device="openreg")
    strided[:, ::2].copy_(source, non_blocking=True)
    # Converting copies (float32 -> float64) in both directions.
    doubles = torch.empty(64, 48, dtype=torch.float64, device="openreg")
    doubles.copy_(source, non_blocking=True)
    back_t = torch.empty(48, 64, pin_memory=True)
    back_t.copy_(device, non_blocking=True)
    back_strided = torch.empty(64, 96, pin_memory=True)
    back_strided.copy_(strided, non_blocking=True)
    into_view = torch.zeros(48, 64, pin_memory=True).t()
    into_view.copy_(source.to("openreg"), non_blocking=True)
    back_doubles = torch.empty(64, 48, pin_memory=True)
    back_doubles.copy_(doubles, non_blocking=True)
    torch.openreg.synchronize()
    assert torch.equal(back_t, source.t())
    assert torch.equal(back_strided[:, ::2], source)
    assert torch.equal(back_strided[:, 1::2], torch.zeros(64, 48))
    assert torch.equal(into_view, source)
    assert torch.equal(back_doubles, source)


def test_non_blocking_d2h_returns_before_queued_work_finishes():
    stream = torch.openreg.Stream()
    values = torch.arange(1 << 16, dtype=torch.float32)
    device = values.to("openreg")
    torch.openreg.synchronize()

    def attempt():
        destination = torch.zeros(1 << 16, pin_memory=True)
        busy = _busy(stream)
        with torch.openreg.stream(stream):
            destination.copy_(device, non_blocking=True)
            done = stream.record_event()
        returned_early = not busy.query()
        stream.synchronize()
        assert done.query()
        assert torch.equal(destination, values)
        return returned_early

    assert _observed(attempt)


def test_non_blocking_pinned_copy_overlaps_compute_on_another_stream():
    compute = torch.openreg.Stream()
    copies = torch.openreg.Stream()
    values = torch.randn(1 << 18)
    pinned = values.pin_memory()
    device = torch.empty(1 << 18, device="openreg")
    torch.openreg.synchronize()

    def attempt():
        busy = _busy(compute)
        destination = torch.empty(1 << 18, pin_memory=True)
        with torch.openreg.stream(copies):
            device.copy_(pinned, non_blocking=True)
            destination.copy_(device, non_blocking=True)
            copied = copies.record_event()
        copied.synchronize()
        overlapped = not busy.query()
        assert torch.equal(destination, values)
        compute.synchronize()
        return overlapped

    assert _observed(attempt)


def test_pinned_block_not_reused_while_a_copy_is_pending():
    stream = torch.openreg.Stream()
    count = 1 << 16
    device = torch.empty(count, device="openreg")
    torch.openreg.synchronize()

    def attempt():
        first = torch.full((count,), 1.0, pin_memory=True)
        first_ptr = first.data_ptr()
        busy = _busy(stream)
        with torch.openreg.stream(stream):
            device.copy_(first, non_blocking=True)
        del first  # freed while the copy is still queued behind `busy`
        second = torch.full((count,), 2.0, pin_memory=True)
        pending = not busy.query()
        if pending:
            assert second.data_ptr() != first_ptr
        stream.synchronize()
        # The device got the first block's values, not the second's.
        assert torch.equal(device.cpu(), torch.full((count,), 1.0))
        return pending

    assert _observed(attempt)


def test_pinned_block_reused_after_its_copies_finish():
    count = 12345
    block = torch.empty(count, pin_memory=True)
    ptr = block.data_ptr()
    block.to("openreg", non_blocking=True)
    del block
    torch.openreg.synchronize()
    again = torch.empty(count, pin_memory=True)
    assert again.data_ptr() == ptr


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.full((4,), float(index * index)), index


@pytest.mark.parametrize("num_workers", [0, 1])
def test_dataloader_pins_batches(num_workers):
    loader = torch.utils.data.DataLoader(
        _Squares(), batch_size=5, pin_memory=True, num_workers=num_workers)
    seen = []
    for values, indices in loader:
        assert values.is_pinned() and indices.is_pinned()
        device = values.to("openreg", non_blocking=True)
        seen.append((device.cpu(), indices))
    assert len(seen) == 2
    for values, indices in seen:
        assert torch.equal(values[:, 0], (indices * indices).float())


def test_dataloader_with_pin_memory_device():
    with pytest.warns(UserWarning, match="pin_memory_device"):
        loader = torch.utils.data.DataLoader(
            _Squares(), batch_size=10, pin_memory=True,
            pin_memory_device="openreg")
        values, _ = next(iter(loader))
    assert values.is_pinned()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
