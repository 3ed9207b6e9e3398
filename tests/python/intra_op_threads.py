"""The client's intra-op thread count in tests of the daemon's thread
choice (device_daemon/kernels/launch_threads.h)."""

import contextlib

import torch

GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE


@contextlib.contextmanager
def num_threads(threads):
    """torch.set_num_threads(threads) for the block, then the count before."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
