"""Helpers of the stream tests (test_streams.py, test_stream_priorities.py).

Concurrency and order are proven by what a serialized implementation could
never show (an event still pending while another stream's work is done;
results of non-commuting kernels), never by timing thresholds."""

import pytest
import torch

BUSY_SIZE = 2048


def busy(stream, matmuls, wait_until_started=False):
    """Enqueues long work on `stream` (its device is made current): chained
    matmuls of BUSY_SIZE x BUSY_SIZE. With `wait_until_started`, the input is
    made first so that the first queued kernel is already a long one.
    Returns the last result and an event recorded after it."""
    with torch.openreg.stream(stream):
        x = torch.full((BUSY_SIZE, BUSY_SIZE), 1.0 / BUSY_SIZE,
                       device=stream.device)
        if wait_until_started:
            stream.synchronize()
        for _ in range(matmuls):
            x = x @ x
        return x, stream.record_event()


def observed(attempt, attempts=3):
    """True when `attempt()` returns True at least once. For properties a
    serialized implementation could never show, one sighting is proof (a
    loaded machine may hide it in one attempt)."""
    return any(attempt() for _ in range(attempts))


@pytest.fixture(autouse=True)
def restore_device_and_streams():
    """After each test: every device idle, default streams current, device
    0 current."""
    yield
    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)
        torch.openreg.set_stream(torch.openreg.default_stream(index))
    torch.openreg.set_device(0)
