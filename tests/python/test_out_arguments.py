"""Property test over every OpInfo op with an `out=` variant: a
non-contiguous `out` is written exactly where CPU writes it.

For each op of PyTorch's `op_db` that supports `out=`, the first
SAMPLES_PER_OP sample inputs (float32, or the op's first supported dtype)
are run once on CPU to
learn the outputs' shapes and dtypes. Then, on CPU and on openreg alike,
every output is given as a view into a larger buffer filled with a
sentinel: every other element, dims in reversed memory order (transposed),
from storage offset 3. On openreg the call must behave as on CPU: the same
exception class if CPU refuses, otherwise the same values in the view and
the sentinel untouched everywhere else (the whole buffer is compared).

Random ops are compared by the sentinel only (their values differ by
design). KNOWN_FAILURES may only shrink: a listed op that passes fails the
test, so that the list stays true."""

import itertools
import sys

import pytest
import torch

from daemon_fixture import process_daemon

DAEMON = process_daemon(devices=1)

from torch.testing._internal.common_methods_invocations import (  # noqa: E402
    op_db)

SENTINEL = -7.25
OFFSET = 3

# op name[.variant] -> why it still differs from CPU. Shrink-only.
KNOWN_FAILURES = {
    "sparse.sampled_addmm": "sparse CSR tensors are not supported on openreg "
                            "(NotImplementedError at the call)",
}
SAMPLES_PER_OP = 3

RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial",
                "empty", "poisson", "cauchy", "exponential", "geometric",
                "uniform")


def _name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name
                      else "")


def _is_random(op):
    return any(word in op.name for word in RANDOM_WORDS)


def _dtype(op):
    supported = op.supported_dtypes("cpu")
    if torch.float32 in supported:
        return torch.float32
    for dtype in (torch.int64, torch.float64, torch.bool, torch.complex64):
        if dtype in supported:
            return dtype
    return None


# `equal` returns a bool: its `out=` is not a tensor.
OPS = [op for op in op_db
       if op.supports_out and _dtype(op) is not None and op.name != "equal"]


def _flatten(result):
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for t in result if isinstance(t, torch.Tensor)]


def _strided_view(like, device):
    """A view shaped like `like` into a sentinel-filled buffer: gaps of one
    element, dims in reversed memory order, storage offset OFFSET."""
    shape = like.shape
    strides = [0] * len(shape)
    step = 2
    for dim in range(len(shape)):  # dim 0 varies fastest: reversed order
        strides[dim] = step
        step *= max(shape[dim], 1)
    span = OFFSET + step + 1
    fill = SENTINEL if like.dtype.is_floating_point or like.dtype.is_complex \
        else (True if like.dtype == torch.bool else -7)
    base = torch.full((span,), fill, dtype=like.dtype, device=device)
    return base, base.as_strided(shape, strides, OFFSET)


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):  # factory ops name their device
        return {k: device if k == "device" else _to(v, device)
                for k, v in value.items()}
    return value


def _run(op, sample, device, outs):
    args = _to(sample.args, device)
    kwargs = _to(sample.kwargs, device)
    out = outs[0] if len(outs) == 1 else tuple(outs)
    return op(_to(sample.input, device), *args, out=out, **kwargs)


def _outcome(op, sample, device, like):
    """(error class or None, list of whole buffers after the call)."""
    views = [_strided_view(t, device) for t in like]
    try:
        _run(op, sample, device, [view for _, view in views])
        if device != "cpu":
            torch.openreg.synchronize()
    except Exception as error:  # noqa: BLE001 - compared with CPU's
        return error, None
    return None, [base.cpu() for base, _ in views]


def _compare(op, sample):
    torch.manual_seed(0)
    reference = op(sample.input, *sample.args, **sample.kwargs)
    like = _flatten(reference)
    assert like, f"{_name(op)} returns no tensor: {reference!r}"
    cpu_error, cpu_buffers = _outcome(op, sample, "cpu", like)
    error, buffers = _outcome(op, sample, "openreg", like)
    assert type(error) is type(cpu_error), \
        f"openreg: {error!r}, CPU: {cpu_error!r}"
    if cpu_buffers is None:
        return
    for cpu_buffer, buffer in zip(cpu_buffers, buffers):
        if _is_random(op):
            # Only the sentinel outside the view is comparable.
            outside = cpu_buffer == buffer
            assert outside.sum() >= cpu_buffer.numel() - like[0].numel(), \
                "bytes outside the view changed"
        else:
            torch.testing.assert_close(buffer, cpu_buffer, equal_nan=True,
                                       atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("op", OPS, ids=_name)
def test_a_non_contiguous_out_is_written_as_on_cpu(op):
    dtype = _dtype(op)
    samples = list(itertools.islice(
        op.sample_inputs("cpu", dtype, requires_grad=False), SAMPLES_PER_OP))
    if not samples:
        pytest.skip("the OpInfo gives no sample")  # not counted as passed
    try:
        for sample in samples:
            _compare(op, sample)
    except AssertionError:
        if _name(op) in KNOWN_FAILURES:
            return
        raise
    assert _name(op) not in KNOWN_FAILURES, \
        f"{_name(op)} passes now: remove it from KNOWN_FAILURES"


def test_the_property_covers_the_out_variants_of_op_db():
    assert len(OPS) >= 250, len(OPS)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
