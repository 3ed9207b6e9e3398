"""Automatic mixed precision on openreg: torch.autocast("openreg") casts as
CUDA does, and torch.amp.GradScaler("openreg") trains."""

import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def test_device_module_amp_api():
    assert torch.openreg.get_amp_supported_dtype() == [
        torch.float16, torch.bfloat16, torch.float32]
    assert torch.amp.is_autocast_available("openreg")
    assert not torch.is_autocast_enabled("openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("openreg")
        assert torch.get_autocast_dtype("openreg") == torch.bfloat16
    with torch.openreg.amp.autocast():
        assert torch.get_autocast_dtype("openreg") == torch.float16
    assert not torch.is_autocast_enabled("openreg")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lower_precision_ops_run_in_the_autocast_dtype(dtype):
    a = torch.randn(8, 16, device="openreg")
    b = torch.randn(16, 4, device="openreg")
    linear = torch.nn.Linear(16, 4).to("openreg")
    batch = torch.randn(3, 8, 16, device="openreg")
    with torch.autocast("openreg", dtype=dtype):
        products = {
            "mm": torch.mm(a, b),
            "matmul": a @ b,
            "addmm": torch.addmm(torch.zeros(8, 4, device="openreg"), a, b),
            "bmm": torch.bmm(batch, b.expand(3, 16, 4)),
            "linear": linear(a),
            "baddbmm": torch.baddbmm(torch.zeros(3, 8, 4, device="openreg"),
                                     batch, b.expand(3, 16, 4)),
        }
    for name, result in products.items():
        assert result.dtype == dtype, name
        assert result.device.type == "openreg", name
    # Values: the same computation done in `dtype` on the CPU.
    expected = torch.mm(a.cpu().to(dtype), b.cpu().to(dtype))
    torch.testing.assert_close(products["mm"].cpu(), expected)
    # Outside the region everything is float32 again.
    assert torch.mm(a, b).dtype == torch.float32


def test_float32_as_the_target_runs_the_lower_precision_ops_in_float32():
    half = torch.randn(8, device="openreg", dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not "disabling autocast"
        with torch.autocast("openreg", dtype=torch.float32):
            assert torch.is_autocast_enabled("openreg")
            dot = torch.dot(half, half)
            product = torch.mm(half.view(2, 4), half.view(4, 2))
    assert dot.dtype == torch.float32 and product.dtype == torch.float32
    torch.testing.assert_close(dot.cpu(), torch.dot(half.cpu().float(),
                                                    half.cpu().float()))


def test_fp32_ops_run_in_float32():
    half = torch.randn(4, 10, device="openreg").half()
    with torch.autocast("openreg", dtype=torch.float16):
        results = {
            "softmax": torch.softmax(half, dim=1),
            "log_softmax": F.log_softmax(half, dim=1),
            "exp": torch.exp(half),
            "log": torch.log(half.abs() + 1),
            "pow": torch.pow(half, 2),
            "sum": half.sum(),
            "layer_norm": F.layer_norm(half, (10,)),
            "l1_loss": F.l1_loss(half, torch.zeros_like(half)),
            "cross_entropy": F.cross_entropy(
                half, torch.zeros(4, dtype=torch.long, device="openreg")),
        }
    for name, result in results.items():
        assert result.dtype == torch.float32, name
    torch.testing.assert_close(results["softmax"].cpu(),
                               torch.softmax(half.cpu().float(), dim=1))


def test_promote_ops_use_the_widest_input_type():
    x = torch.randn(5, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        assert torch.addcmul(x, x.half(), x.half()).dtype == torch.float32
        assert torch.mm(x.view(5, 1), x.view(1, 5)).dtype == torch.float16


def test_nested_disable_restores_float32():
    a = torch.randn(4, 4, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        with torch.autocast("openreg", enabled=False):
            assert torch.mm(a, a).dtype == torch.float32
        assert torch.mm(a, a).dtype == torch.float16


def test_binary_cross_entropy_is_banned_as_on_cuda():
    probabilities = torch.rand(6, device="openreg")
    target = torch.rand(6, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(probabilities, target)
        # The safe form is allowed, and runs in float32.
        logits_loss = F.binary_cross_entropy_with_logits(probabilities, target)
        assert logits_loss.dtype == torch.float32
    # Outside autocast the plain loss works.
    F.binary_cross_entropy(probabilities, target)


def test_autocast_backward_gives_float32_grads():
    model = torch.nn.Linear(8, 2).to("openreg")
    x = torch.randn(4, 8, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    assert model.weight.grad.dtype == torch.float32
    assert model.weight.grad.device.type == "openreg"


def train(device, steps, autocast_dtype, scaler_enabled=True):
    """A toy regression; returns the losses and the final scale."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 8, generator=generator)
    targets = inputs @ torch.randn(8, 1, generator=generator)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)  # same initial weights on both devices
    model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=1024.0,
                                  enabled=scaler_enabled)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device, dtype=autocast_dtype):
            loss = (model(inputs) - targets).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses, scaler.get_scale()


def test_grad_scaler_training_loop_reduces_the_loss():
    losses, scale = train("openreg", 40, torch.float16)
    assert losses[-1] < 0.05 * losses[0]
    assert scale == 1024.0  # no overflow: the scale was kept


def test_grad_scaler_matches_cpu_autocast():
    # bfloat16 is the dtype CPU autocast supports for these ops; the daemon
    # runs the same CPU kernels, so the trajectories agree closely.
    openreg_losses, openreg_scale = train("openreg", 15, torch.bfloat16)
    cpu_losses, cpu_scale = train("cpu", 15, torch.bfloat16)
    torch.testing.assert_close(openreg_losses, cpu_losses, rtol=2e-2,
                               atol=1e-3)
    assert openreg_scale == cpu_scale


def test_grad_scaler_skips_steps_with_non_finite_grads():
    model = torch.nn.Linear(4, 1).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("openreg", init_scale=256.0)
    weight_before = model.weight.detach().cpu().clone()
    x = torch.randn(3, 4, device="openreg")
    with torch.autocast("openreg", dtype=torch.float16):
        loss = model(x).sum() * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # found_inf: the step is skipped
    scaler.update()
    assert torch.equal(model.weight.detach().cpu(), weight_before)
    assert scaler.get_scale() == 128.0  # backed off by 0.5


def test_unscale_runs_on_the_device():
    grads = [torch.full((3,), 8.0, device="openreg"),
             torch.full((2,), 4.0, device="openreg")]
    found_inf = torch.zeros((), device="openreg")
    inv_scale = torch.full((), 0.25, device="openreg")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                     inv_scale)
    assert grads[0].cpu().tolist() == [2.0, 2.0, 2.0]
    assert grads[1].cpu().tolist() == [1.0, 1.0]
    assert found_inf.item() == 0.0
    grads[1].fill_(float("nan"))
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                     inv_scale)
    assert found_inf.item() == 1.0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
