"""End-to-end training on openreg matches the same training on CPU."""

import copy
import sys

import pytest
import torch
from torch import nn

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=1, memory_per_device="4GiB")


class SmallCnn(nn.Module):
    # Dropout draws differ between devices (as on CUDA), so the comparison
    # with CPU runs it with p=0: the op still executes on the device.
    def __init__(self, dropout):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
            nn.ReLU(), nn.AvgPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout),
                                  nn.Linear(16 * 4 * 4, 10))

    def forward(self, x):
        return self.head(self.features(x))


class LstmClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class GruClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.proj = nn.Linear(32, 32)
        self.norm1 = nn.LayerNorm(32)
        self.norm2 = nn.LayerNorm(32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        split = lambda t: t.view(batch, length, 4, 8).transpose(1, 2)
        attended = nn.functional.scaled_dot_product_attention(
            split(q), split(k), split(v), is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, 32))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


def mlp():
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))


def train(model, optimizer_factory, inputs, labels, steps, device,
          scheduler_factory=None, clip=None):
    model = model.to(device)
    optimizer = optimizer_factory(model.parameters())
    scheduler = scheduler_factory(optimizer) if scheduler_factory else None
    inputs, labels = inputs.to(device), labels.to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return model, optimizer, losses


def assert_same_training(build, inputs, labels, optimizer_factory, steps=6,
                         rtol=1e-4, atol=1e-5, **kwargs):
    torch.manual_seed(0)
    reference = build()
    on_device = copy.deepcopy(reference)
    cpu_model, _, cpu_losses = train(reference, optimizer_factory, inputs,
                                     labels, steps, "cpu", **kwargs)
    dev_model, _, dev_losses = train(on_device, optimizer_factory, inputs,
                                     labels, steps, "openreg", **kwargs)
    assert dev_losses[-1] < dev_losses[0]
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses),
                               rtol=rtol, atol=atol)
    for (name, a), (_, b) in zip(dev_model.state_dict().items(),
                                 cpu_model.state_dict().items()):
        torch.testing.assert_close(a.cpu(), b, rtol=rtol, atol=atol, msg=name)


DATA = {
    "mlp": (torch.randn(64, 20), torch.randint(0, 10, (64,))),
    "cnn": (torch.randn(16, 1, 16, 16), torch.randint(0, 10, (16,))),
    "seq": (torch.randn(16, 12, 8), torch.randint(0, 10, (16,))),
    "tokens": (torch.randn(8, 10, 32), torch.randint(0, 10, (8,))),
}


def test_mlp_sgd_momentum_with_scheduler_and_clipping():
    assert_same_training(
        mlp, *DATA["mlp"],
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        scheduler_factory=lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5),
        clip=1.0)


@pytest.mark.parametrize("foreach", [True, False])
def test_mlp_adam_and_adamw(foreach):
    assert_same_training(mlp, *DATA["mlp"],
                         lambda p: torch.optim.Adam(p, lr=1e-2, foreach=foreach))
    assert_same_training(
        mlp, *DATA["mlp"],
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1,
                                    foreach=foreach, fused=False))


def test_cnn_with_batchnorm_pooling_dropout():
    assert_same_training(lambda: SmallCnn(dropout=0.0), *DATA["cnn"],
                         lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))


def test_cnn_dropout_trains_on_device():
    torch.manual_seed(0)
    _, _, losses = train(SmallCnn(dropout=0.3), lambda p: torch.optim.Adam(p, 1e-2),
                         *DATA["cnn"], steps=15, device="openreg")
    assert losses[-1] < 0.7 * losses[0]


# ATen runs PrivateUse1 LSTM/GRU cells through the CUDA-only fused ops
# (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards); the
# daemon's built-in kernels (device_daemon/kernels/builtin_kernels.cc) run them.
# Recurrent nets compare with SGD: Adam divides each gradient by its own
# magnitude, which turns rounding-order differences in near-zero gradients
# (the daemon's intra-op threads may sum in another order) into lr-sized
# weight differences.
def test_lstm():
    assert_same_training(LstmClassifier, *DATA["seq"],
                         lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))


def test_gru():
    assert_same_training(GruClassifier, *DATA["seq"],
                         lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))


@pytest.mark.parametrize("cell_type", [nn.LSTMCell, nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_cell_forward_and_backward_match_cpu(cell_type, bias):
    torch.manual_seed(0)
    cpu_cell = cell_type(5, 7, bias=bias)
    dev_cell = copy.deepcopy(cpu_cell).to("openreg")
    inputs = torch.randn(3, 5)
    state = torch.randn(3, 7)
    results = []
    for cell, device in ((cpu_cell, "cpu"), (dev_cell, "openreg")):
        x = inputs.to(device, copy=True).requires_grad_()
        h = state.to(device, copy=True).requires_grad_()
        if cell_type is nn.LSTMCell:
            c = state.flip(0).to(device).requires_grad_()
            # Only hy feeds the loss: the backward gets no grad_cy.
            hy, _ = cell(x, (h, c))
            leaves = [x, h, c]
        else:
            hy = cell(x, h)
            leaves = [x, h]
        (hy * torch.arange(7.0, device=device)).sum().backward()
        grads = [leaf.grad.cpu() for leaf in leaves]
        grads += [p.grad.cpu() for p in cell.parameters()]
        results.append((hy.detach().cpu(), grads))
    (cpu_hy, cpu_grads), (dev_hy, dev_grads) = results
    torch.testing.assert_close(dev_hy, cpu_hy)
    assert len(dev_grads) == len(cpu_grads)
    for dev_grad, cpu_grad in zip(dev_grads, cpu_grads):
        torch.testing.assert_close(dev_grad, cpu_grad)


def test_transformer_block_with_sdpa():
    # SGD, not Adam: the key bias has a mathematically zero gradient, and
    # Adam would scale its rounding noise up to the learning rate.
    assert_same_training(TransformerBlock, *DATA["tokens"],
                         lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))


def test_state_dict_round_trip_resumes_identically():
    torch.manual_seed(0)
    model, optimizer, _ = train(mlp(), lambda p: torch.optim.Adam(p, lr=1e-2),
                                *DATA["mlp"], steps=3, device="openreg")
    model_state = copy.deepcopy(model.state_dict())
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    resumed = mlp().to("openreg")
    resumed.load_state_dict(model_state)
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=1e-2)
    resumed_optimizer.load_state_dict(optimizer_state)
    inputs, labels = (t.to("openreg") for t in DATA["mlp"])
    for m, o in ((model, optimizer), (resumed, resumed_optimizer)):
        o.zero_grad()
        nn.functional.cross_entropy(m(inputs), labels).backward()
        o.step()
    for a, b in zip(model.parameters(), resumed.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
