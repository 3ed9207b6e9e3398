"""Float tensors and a chain of arithmetic that test a loop's (the
daemon's pointwise_kernel.h), and a bit-for-bit comparison."""

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


def arithmetic_steps(x, y, s):
    """Every operand form of add, sub, mul, div, neg, reciprocal and zero_:
    17 launches on x and y (of one shape) and s (0-dim)."""
    a = x * 1.0001          # a Python float
    b = a + 0.001
    c = b - y               # two tensors
    d = c * y
    e = d * 3               # a Python int
    f = e.add(x)
    f.sub_(0.5)             # in place
    f.mul_(x)
    g = f / y
    h = g.div(7)
    i = h.neg()
    j = i.reciprocal()
    j.mul_(s)               # a 0-dim device tensor
    k = s / 3               # 0-dim throughout
    k.neg_()
    m = (x * 2).zero_()     # +0.0 over NaNs too
    return a, b, c, d, e, f, g, h, i, j, k, m
