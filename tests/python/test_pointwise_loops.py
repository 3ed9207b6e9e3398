"""Eager launches of small arithmetic run as plain loops in the daemon
(kernels/pointwise_kernel.h, the loops graph replays use): add, sub, mul,
div, neg, reciprocal and zero_ on small contiguous float tensors, with CPU
eager's bits; what the loops cannot match bit for bit (two NaNs in one
element) or what ATen refuses (partly overlapping operands) runs through
ATen as before."""

import pytest
import torch

from daemon_fixture import module_daemon
from float_corners import arithmetic_steps, awkward_values, same_bits

DAEMON, setup_module, teardown_module = module_daemon(
    devices=1, memory_per_device="1GiB")


def loop_launches():
    """Eager launches the daemon ran as a plain loop instead of ATen."""
    stats = torch.openreg.daemon_stats()["devices"][0]
    return int(stats.get("launches_pointwise", 0))


def quiet_nan(dtype, payload, negative):
    """A 1-element quiet NaN of `dtype` with `payload` and sign."""
    width = torch.finfo(dtype).bits
    integer = torch.int32 if width == 32 else torch.int64
    bits = (0x7FC00000 if width == 32 else 0x7FF8000000000000) | payload
    if negative:  # the sign bit set, read as a signed integer
        bits -= 1 << (width - 1)
    return torch.tensor([bits], dtype=integer).view(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("flush_denormal", [False, True])
def test_small_arithmetic_runs_as_loops_with_the_bits_of_cpu_eager(
        dtype, flush_denormal):
    """Every result, NaNs, infinities, signed zeros and denormals included,
    has CPU eager's bits, under the client's flush-denormal setting as
    well; 13 of the 17 launches run as loops, the 4 whose operands both
    hold a NaN in one element (d and g at element 999, f's add and mul_ at
    element 0) run through ATen."""
    host_x = awkward_values(dtype)
    host_y = awkward_values(dtype).flip(0)
    host_s = torch.tensor(-1.5, dtype=dtype)
    previous = torch.set_flush_denormal(flush_denormal)
    try:
        x, y, s = (host.to("openreg") for host in (host_x, host_y, host_s))
        arithmetic_steps(x, y, s)  # each signature's first launch is checked
        torch.openreg.synchronize()
        before = loop_launches()
        outs = arithmetic_steps(x, y, s)
        torch.openreg.synchronize()
        loops = loop_launches() - before
        expected = arithmetic_steps(host_x, host_y, host_s)
    finally:
        torch.set_flush_denormal(previous)
    assert loops == 13
    for out, cpu in zip(outs, expected):
        assert same_bits(out.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_out_and_in_place_forms_run_as_loops_with_cpus_bits(dtype):
    """out= into a third tensor, out= into an operand, in place with a
    tensor and with a number: loops (but for the division, whose operands
    both hold a NaN in element 0 by then), with CPU's bits."""
    host = [awkward_values(dtype, count=777),
            awkward_values(dtype).flip(0)[:777]]
    host[1][0] = 2.0
    device = [t.to("openreg") for t in host]

    def forms(x, y):
        out = torch.empty_like(x)
        torch.mul(x, y, out=out)
        torch.sub(x, y, out=y)
        x.div_(y)
        x.add_(3.5)
        return out, x, y

    forms(*[t.clone() for t in device])  # checked first launches
    torch.openreg.synchronize()
    before = loop_launches()
    results = forms(*device)
    torch.openreg.synchronize()
    assert loop_launches() - before == 3
    for out, cpu in zip(results, forms(*host)):
        assert same_bits(out.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_two_nans_in_one_element_run_through_aten_with_cpus_bits(dtype):
    """Of two NaN operands ATen returns one in its vector lanes and the
    other in its scalar tail: such a launch is ATen's, NaN payloads and
    signs as on CPU; the same op on other values is a loop."""
    host_x = torch.arange(1, 20, dtype=dtype)
    host_y = torch.arange(1, 20, dtype=dtype)
    # Two different NaNs in the first element (in ATen's vector lanes) and
    # the last (in its scalar tail).
    for index in (0, 18):
        host_x[index] = quiet_nan(dtype, payload=1, negative=False)
        host_y[index] = quiet_nan(dtype, payload=2, negative=True)
    x, y = host_x.to("openreg"), host_y.to("openreg")
    x + y
    torch.openreg.synchronize()
    before = loop_launches()
    total = x + y
    torch.openreg.synchronize()
    assert loop_launches() == before
    assert same_bits(total.cpu(), host_x + host_y)
    host_y[0] = host_y[18] = 1.0
    y = host_y.to("openreg")
    torch.openreg.synchronize()
    before = loop_launches()
    total = x + y
    torch.openreg.synchronize()
    assert loop_launches() == before + 1
    assert same_bits(total.cpu(), host_x + host_y)


def test_partly_overlapping_operands_are_refused_as_on_cpu():
    """ATen refuses an out= or in-place op whose operand partly overlaps
    the output; a loop would read elements it already wrote. The launch
    runs through ATen, which refuses it, as on CPU."""
    host = torch.arange(16, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="single memory location"):
        host[0:8].add_(host[1:9])
    device = host.to("openreg")
    torch.openreg.synchronize()
    before = loop_launches()
    with pytest.raises(RuntimeError, match="single memory location"):
        device[0:8].add_(device[1:9])
        torch.openreg.synchronize()
    assert loop_launches() == before
    assert torch.equal(device.cpu(), host)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index", [0, 7, 8, 15, 16, 18])
def test_a_nan_pair_in_any_one_element_is_found(dtype, index):
    """Wherever the pair is (the loop's 8-float or 4-double AVX vectors,
    its 4- or 2-lane SSE2 vectors, its padded tail), the launch is ATen's,
    with CPU's bits."""
    host_x = torch.arange(1, 20, dtype=dtype)
    host_y = torch.arange(1, 20, dtype=dtype)
    host_x[index] = quiet_nan(dtype, payload=1, negative=False)
    host_y[index] = quiet_nan(dtype, payload=2, negative=True)
    x, y = host_x.to("openreg"), host_y.to("openreg")
    x * y
    torch.openreg.synchronize()
    before = loop_launches()
    product = x * y
    torch.openreg.synchronize()
    assert loop_launches() == before
    assert same_bits(product.cpu(), host_x * host_y)
