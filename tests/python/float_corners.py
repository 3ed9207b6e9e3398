"""Float tensors that test a loop's arithmetic, and a bit-for-bit
comparison."""

import torch


def awkward_values(dtype, count=1000):
    """Random values, and every IEEE corner a loop could get wrong."""
    values = torch.randn(count, dtype=dtype, generator=torch.Generator()
                         .manual_seed(count)) * 1e3
    tiny = torch.finfo(dtype).tiny
    corners = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0,
                            0.0, tiny / 4, -tiny / 8, torch.finfo(dtype).max,
                            torch.finfo(dtype).min, 1.0], dtype=dtype)
    values[:corners.numel()] = corners
    return values


def same_bits(a, b):
    integer = torch.int32 if a.dtype == torch.float32 else torch.int64
    return a.dtype == b.dtype and torch.equal(a.view(integer),
                                              b.view(integer))
