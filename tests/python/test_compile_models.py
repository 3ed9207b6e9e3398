"""torch.compile(model) on openreg trains as eager does (docs/COMPILE.md):
an MLP, a CNN with batch norm and a small transformer (embedding, SDPA
attention, layer norm, MLP), forward and backward compiled with the
default backend, against CPU eager: losses and parameters after a few
optimizer steps within the usual tolerance. Also the reference backend's
compile behaviours (autograd, graph breaks, autocast, a default-device
block, .cpu() inside a full graph)."""

import copy
import os
import sys
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      tempfile.mkdtemp(prefix="openreg-inductor-cache-"))

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

from daemon_fixture import process_daemon  # noqa: E402

DAEMON = process_daemon(devices=2)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embedding = nn.Embedding(vocab, width)
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embedding(tokens)
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = [t.view(batch, length, self.heads, -1).transpose(1, 2)
                   for t in (q, k, v)]
        attended = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(x.shape))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def _mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, 10))


def _cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


CASES = {
    "mlp": (_mlp, lambda: torch.randn(16, 32), lambda: torch.randint(0, 10,
                                                                     (16,))),
    "cnn": (_cnn, lambda: torch.randn(4, 3, 16, 16),
            lambda: torch.randint(0, 10, (4,))),
    "transformer": (TinyTransformer, lambda: torch.randint(0, 50, (2, 12)),
                    lambda: torch.randint(0, 50, (2, 12))),
}


def _train(model, step_fn, inputs, targets, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = step_fn(model, inputs, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses


def _loss(model, inputs, targets):
    logits = model(inputs)
    return nn.functional.cross_entropy(logits.flatten(0, -2)
                                       if logits.dim() > 2 else logits,
                                       targets.flatten())


@pytest.mark.parametrize("name", list(CASES))
def test_a_compiled_model_trains_as_cpu_eager(name):
    build, make_inputs, make_targets = CASES[name]
    torch.manual_seed(0)
    reference = build()
    model = copy.deepcopy(reference).to("openreg")
    inputs, targets = make_inputs(), make_targets()
    expected = _train(reference, _loss, inputs, targets, steps=3)
    compiled_loss = torch.compile(_loss)
    got = _train(model, compiled_loss, inputs.to("openreg"),
                 targets.to("openreg"), steps=3)
    for step, (loss, want) in enumerate(zip(got, expected)):
        torch.testing.assert_close(loss, want, atol=1e-4, rtol=1e-4,
                                   msg=f"{name} loss at step {step}")
    for (parameter_name, parameter), want in zip(
            model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(parameter.detach().cpu(), want.detach(),
                                   atol=1e-4, rtol=1e-4,
                                   msg=f"{name}.{parameter_name}")


def test_compiled_inference_of_a_module_under_no_grad():
    torch.manual_seed(0)
    reference = TinyTransformer().eval()
    model = copy.deepcopy(reference).to("openreg")
    tokens = torch.randint(0, 50, (3, 9))
    with torch.no_grad():
        got = torch.compile(model)(tokens.to("openreg"))
        torch.testing.assert_close(got.cpu(), reference(tokens), atol=1e-4,
                                   rtol=1e-4)


def test_the_reference_backends_compile_behaviours():
    counter = CompileCounterWithBackend("openreg")

    @torch.compile(backend=counter)
    def with_break(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    x = torch.randn(8, device="openreg")
    torch.testing.assert_close(with_break(x).cpu(), x.cpu().sin().cos())
    assert counter.frame_count > 1

    @torch.compile(backend="openreg", fullgraph=True)
    def to_host(x):
        return (x * 2).cpu() + 1

    host = to_host(x)
    assert host.device.type == "cpu"
    torch.testing.assert_close(host, x.cpu() * 2 + 1)

    @torch.compile(backend="openreg")
    def matmul_under_autocast(a, b):
        with torch.autocast(device_type="openreg", dtype=torch.float16):
            return a @ b

    a = torch.randn(4, 4, device="openreg")
    b = torch.randn(4, 4, device="openreg")
    assert matmul_under_autocast(a, b).dtype == torch.float16

    @torch.compile(backend="openreg")
    def made_on_the_default_device(n):
        return torch.ones(n) * 3

    with torch.device("openreg"):
        made = made_on_the_default_device(4)
    assert made.device.type == "openreg" and made.cpu().tolist() == [3.0] * 4

    linear = nn.Linear(4, 2).to("openreg")
    weight = linear.weight
    loss = torch.compile(lambda t: linear(t).sum(), backend="openreg")(
        torch.randn(3, 4, device="openreg"))
    loss.backward()
    assert weight.grad is not None and weight.grad.device.type == "openreg"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
