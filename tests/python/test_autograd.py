"""Autograd on openreg: backward runs on the device and matches CPU."""

import sys

import pytest
import torch

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def pair(*shape, device="openreg", requires_grad=True):
    cpu = torch.randn(*shape, dtype=torch.float64, requires_grad=requires_grad)
    dev = cpu.detach().to(device).requires_grad_(requires_grad)
    return cpu, dev


def test_backward_matches_cpu_and_grads_live_on_the_device():
    a_cpu, a = pair(5, 7)
    b_cpu, b = pair(7, 3)
    for x, y in ((a_cpu, b_cpu), (a, b)):
        ((x @ y).tanh().sum() * 2).backward()
    assert a.grad.device == a.device and b.grad.device == b.device
    torch.testing.assert_close(a.grad.cpu(), a_cpu.grad)
    torch.testing.assert_close(b.grad.cpu(), b_cpu.grad)


def test_retain_grad_no_grad_and_detach():
    x_cpu, x = pair(4)
    y = x * 3
    y.retain_grad()
    (y ** 2).sum().backward()
    torch.testing.assert_close(y.grad.cpu(), (2 * 3 * x_cpu).detach())
    with torch.no_grad():
        z = x * 2
    assert not z.requires_grad
    assert not x.detach().requires_grad
    assert x.detach().data_ptr() == x.data_ptr()


def test_higher_order_gradients():
    x_cpu, x = pair(6)
    results = []
    for t in (x_cpu, x):
        (first,) = torch.autograd.grad((t ** 3).sum(), t, create_graph=True)
        (second,) = torch.autograd.grad(first.sum(), t)
        results.append(second)
    torch.testing.assert_close(results[1].cpu(), results[0])
    torch.testing.assert_close(results[0], 6 * x_cpu.detach())


def test_tensor_hooks_see_device_gradients():
    _, x = pair(3)
    seen = []
    x.register_hook(lambda grad: seen.append(grad.device) or grad * 10)
    (x * 2).sum().backward()
    assert seen == [x.device]
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 20.0, dtype=torch.float64))


def test_cross_device_graph():
    x_cpu, x0 = pair(4, 4, device="openreg:0")
    x1 = (x0 * 2).to("openreg:1")
    loss = (x1.exp() * 3).sum().to("openreg:0") + x0.sum()
    loss.backward()
    expected = 2 * 3 * (2 * x_cpu.detach()).exp() + 1
    assert x0.grad.device.index == 0
    torch.testing.assert_close(x0.grad.cpu(), expected)


def test_autograd_function_and_inplace_ops():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, grad):
            (t,) = ctx.saved_tensors
            return 2 * t * grad

    x_cpu, x = pair(5)
    Square.apply(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * x_cpu.detach())
    leaf_cpu, leaf = pair(5)
    for t in (leaf_cpu, leaf):
        y = t * 1.0
        y.mul_(3).add_(1)
        y.sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), leaf_cpu.grad)


def test_gradcheck_on_device():
    x = torch.randn(3, 4, dtype=torch.float64, device="openreg", requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, device="openreg", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: (a @ b).sigmoid(), (x, w))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
