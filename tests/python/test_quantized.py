"""Per-tensor affine quantized tensors on openreg (torch_backend/kernels/
quantized_ops.cc), compared with CPU: quantize_per_tensor, dequantize,
q_scale, q_zero_point, int_repr, copies to and from the CPU keeping the
quantizer, printing, the QuantizedCPU kernels the daemon runs, and
refusals at the call."""

import sys

import pytest
import torch

from daemon_fixture import process_daemon

DAEMON = process_daemon(devices=1)

# torch 2.13 warns that quantized dtypes are deprecated at every creation.
pytestmark = pytest.mark.filterwarnings("ignore:.*quantiz.*:UserWarning")

QUANTIZERS = [(torch.qint8, 0.1, 3), (torch.quint8, 0.05, 128),
              (torch.qint32, 0.001, -17)]


def _values():
    torch.manual_seed(0)
    return torch.randn(4, 6) * 3


@pytest.mark.parametrize("dtype,scale,zero_point", QUANTIZERS)
def test_quantize_and_dequantize_equal_cpu(dtype, scale, zero_point):
    x = _values()
    expected = torch.quantize_per_tensor(x, scale, zero_point, dtype)
    q = torch.quantize_per_tensor(x.to("openreg"), scale, zero_point, dtype)
    assert q.dtype == dtype and q.is_quantized
    assert q.device.type == "openreg"
    assert q.qscheme() == torch.per_tensor_affine
    assert q.q_scale() == pytest.approx(scale) and \
        q.q_zero_point() == zero_point
    assert torch.equal(q.int_repr().cpu(), expected.int_repr())
    assert torch.equal(q.dequantize().cpu(), expected.dequantize())


@pytest.mark.parametrize("dtype,scale,zero_point", QUANTIZERS)
def test_copies_to_and_from_the_cpu_keep_the_quantizer(dtype, scale,
                                                       zero_point):
    cpu = torch.quantize_per_tensor(_values(), scale, zero_point, dtype)
    on_device = cpu.to("openreg")
    back = on_device.cpu()
    for tensor in (on_device, back):
        assert tensor.dtype == dtype
        assert tensor.q_scale() == cpu.q_scale()
        assert tensor.q_zero_point() == cpu.q_zero_point()
    assert back.device.type == "cpu"
    assert torch.equal(back.int_repr(), cpu.int_repr())
    assert torch.equal(on_device.int_repr().cpu(), cpu.int_repr())


def test_printing_shows_values_and_quantizer():
    q = torch.quantize_per_tensor(torch.tensor([0.5, -1.0]).to("openreg"),
                                  0.5, 0, torch.qint8)
    text = repr(q)
    assert "device='openreg:0'" in text and "qint8" in text
    assert "scale=0.5" in text and "zero_point=0" in text
    assert "-1." in text and "0.5" in text


def test_the_daemon_runs_cpus_quantized_kernels():
    x = _values()
    cpu = torch.quantize_per_tensor(x, 0.1, 3, torch.qint8)
    dev = torch.quantize_per_tensor(x.to("openreg"), 0.1, 3, torch.qint8)
    for name, op in {"relu": torch.relu, "cat": lambda t: torch.cat([t, t]),
                     "clone": torch.clone, "max": torch.max,
                     "transposed contiguous": lambda t: t.t().contiguous(),
                     "slice": lambda t: t[1:, ::2],
                     "eq": lambda t: t == t}.items():
        result, expected = op(dev), op(cpu)
        assert result.dtype == expected.dtype, name
        if expected.is_quantized:
            assert result.q_scale() == expected.q_scale(), name
            result, expected = result.int_repr(), expected.int_repr()
        assert torch.equal(result.cpu(), expected), name


def test_an_unsupported_quantized_op_fails_at_its_call_and_the_next_is_clean():
    q = torch.quantize_per_tensor(_values().to("openreg"), 0.1, 3,
                                  torch.qint8)
    for op in (lambda: q * q, lambda: q.sum(), lambda: q + 1):
        with pytest.raises((NotImplementedError, RuntimeError)) as raised:
            op()
        # Never a tensor of another dtype, and never later.
        assert "quantized" in str(raised.value)
    with pytest.raises(NotImplementedError, match="per-tensor affine"):
        torch.quantize_per_channel(
            _values().to("openreg"), torch.full((4,), 0.1, device="openreg"),
            torch.zeros(4, dtype=torch.long, device="openreg"), 0,
            torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors"):
        q.set_(torch.empty(0, device="openreg").untyped_storage(), 0, (0,))
    assert (torch.ones(3, device="openreg") * 2).sum().item() == 6.0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
