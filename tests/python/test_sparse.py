"""Sparse COO tensors on openreg, compared with CPU: the paths training
uses (nn.Embedding / nn.EmbeddingBag with sparse gradients, SGD, SparseAdam,
Adagrad, a DLRM-like model), the conversions and arithmetic around them,
and refusals: other sparse layouts raise NotImplementedError at the call,
and indices out of range never reach a daemon kernel."""

import sys

import pytest
import torch
from torch import nn

from daemon_fixture import process_daemon

DAEMON = process_daemon(devices=1)

DEVICE = "openreg"


def _coo(device):
    indices = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
    values = torch.tensor([3.0, 4.0, 5.0, 6.0])
    return torch.sparse_coo_tensor(indices, values, (2, 3),
                                   check_invariants=True).to(device)


def test_a_sparse_tensor_lives_on_the_device():
    x = _coo(DEVICE)
    assert x.layout == torch.sparse_coo
    assert x.device == torch.device(DEVICE, 0)
    assert x._indices().device == x.device and x._values().device == x.device
    assert x._nnz() == 4 and not x.is_coalesced()
    back = x.cpu()
    assert back.layout == torch.sparse_coo and back.device.type == "cpu"
    assert torch.equal(back.to_dense(), _coo("cpu").to_dense())


def test_coalesce_matches_cpu():
    result, expected = _coo(DEVICE).coalesce(), _coo("cpu").coalesce()
    assert result.is_coalesced()
    assert torch.equal(result._indices().cpu(), expected._indices())
    assert torch.equal(result._values().cpu(), expected._values())


def test_to_sparse_and_to_dense_round_trip_as_on_cpu():
    dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    sparse = dense.to(DEVICE).to_sparse()
    assert sparse.layout == torch.sparse_coo and sparse.device.type == DEVICE
    assert sparse._nnz() == dense.to_sparse()._nnz() == 3
    assert torch.equal(sparse.to_dense().cpu(), dense)
    assert torch.equal(_coo(DEVICE).to_dense().cpu(), _coo("cpu").to_dense())


def test_arithmetic_with_dense_tensors_matches_cpu():
    dense = torch.randn(2, 3)
    other = torch.randn(3, 4)
    sparse, cpu_sparse = _coo(DEVICE), _coo("cpu")
    cases = {
        "dense + sparse": (lambda s, d, o: d + s),
        "sparse @ dense": (lambda s, d, o: s @ o),
        "torch.sparse.mm": (lambda s, d, o: torch.sparse.mm(s, o)),
        "sparse * 2": (lambda s, d, o: (s * 2).to_dense()),
        "sparse + sparse": (lambda s, d, o: (s + s).to_dense()),
        "torch.sparse.sum": (lambda s, d, o: torch.sparse.sum(s)),
        # A CompositeExplicitAutograd kernel would make this sum over no
        # dims (the identity); CPU's sparse kernel sums everything.
        "sparse.sum()": (lambda s, d, o: s.sum()),
        "torch.sparse.sum dim": (
            lambda s, d, o: torch.sparse.sum(s, 1).to_dense()),
        "dense.add_(sparse)": (lambda s, d, o: d.clone().add_(s, alpha=0.5)),
    }
    for name, case in cases.items():
        result = case(sparse, dense.to(DEVICE), other.to(DEVICE))
        expected = case(cpu_sparse, dense, other)
        torch.testing.assert_close(result.cpu(), expected, msg=name)


def test_an_unsupported_sparse_layout_fails_at_the_call_naming_it():
    # Moving a CSR tensor is metadata and a few dense copies (ATen's
    # composite kernel); computing with it is refused at the call.
    csr = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse_csr().to(DEVICE)
    dense = torch.ones(2, 2, device=DEVICE)
    for name, call in {"to_dense": lambda: csr.to_dense(),
                       "matmul": lambda: csr @ dense,
                       "sum": lambda: csr.sum()}.items():
        with pytest.raises(NotImplementedError,
                           match="not implemented for sparse compressed"):
            call()
    # The device is clean afterwards.
    assert (torch.ones(2, device=DEVICE) * 2).sum().item() == 4


def test_out_of_range_indices_never_reach_a_daemon_kernel():
    # Built unchecked on the device (as a hostile or buggy client could):
    # CPU would read out of bounds; the daemon checks the indices first.
    indices = torch.tensor([[0, 7], [1, 1]], device=DEVICE)
    values = torch.tensor([1.0, 2.0], device=DEVICE)
    bad = torch.sparse_coo_tensor(indices, values, (2, 3),
                                  check_invariants=False)
    with pytest.raises(ValueError, match="sparse tensor"):
        bad.to_dense()
    assert (torch.ones(2, device=DEVICE) * 3).sum().item() == 6


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("sparse", [True, False])
def test_embedding_bag_gradients_match_cpu(mode, sparse):
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(40, 8, mode=mode, sparse=sparse)
    device_bag = nn.EmbeddingBag(40, 8, mode=mode, sparse=sparse).to(DEVICE)
    device_bag.load_state_dict(bag.state_dict())
    ids = torch.randint(0, 40, (12,))
    offsets = torch.arange(0, 12, 2)
    weight = torch.randn(6, 8)
    (bag(ids, offsets) * weight).sum().backward()
    (device_bag(ids.to(DEVICE), offsets.to(DEVICE)) *
     weight.to(DEVICE)).sum().backward()
    grad, device_grad = bag.weight.grad, device_bag.weight.grad
    assert device_grad.layout == grad.layout
    if sparse:
        grad, device_grad = grad.to_dense(), device_grad.to_dense()
    torch.testing.assert_close(device_grad.cpu(), grad)


class _DLRM(nn.Module):
    """Sparse embeddings and a bag of embeddings, a bottom MLP for the dense
    features, and a top MLP over their concatenation."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(50, 8, sparse=True)
        self.bag = nn.EmbeddingBag(40, 8, mode="sum", sparse=True)
        self.bottom = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(24, 16), nn.ReLU(),
                                 nn.Linear(16, 1))

    def forward(self, dense, ids, bag_ids, offsets):
        features = torch.cat([self.bottom(dense), self.embedding(ids),
                              self.bag(bag_ids, offsets)], 1)
        return self.top(features).squeeze(1)

    def sparse_parameters(self):
        return [self.embedding.weight, self.bag.weight]

    def dense_parameters(self):
        return list(self.bottom.parameters()) + list(self.top.parameters())


def _optimizers(model, name):
    if name == "SGD":
        return [torch.optim.SGD(model.parameters(), lr=0.1)]
    if name == "SparseAdam":
        return [torch.optim.SparseAdam(model.sparse_parameters(), lr=0.01),
                torch.optim.Adam(model.dense_parameters(), lr=0.01)]
    return [torch.optim.Adagrad(model.sparse_parameters(), lr=0.1),
            torch.optim.SGD(model.dense_parameters(), lr=0.1)]


def _train_dlrm(device, optimizer_name, steps=4):
    torch.manual_seed(0)
    model = _DLRM().to(device)
    optimizers = _optimizers(model, optimizer_name)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        dense = torch.randn(6, 4, generator=data).to(device)
        ids = torch.randint(0, 50, (6,), generator=data).to(device)
        bag_ids = torch.randint(0, 40, (12,), generator=data).to(device)
        offsets = torch.arange(0, 12, 2).to(device)
        target = torch.rand(6, generator=data).to(device)
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(
            model(dense, ids, bag_ids, offsets), target)
        loss.backward()
        assert model.embedding.weight.grad.is_sparse
        assert model.embedding.weight.grad.device.type == device
        for optimizer in optimizers:
            optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", ["SGD", "SparseAdam", "Adagrad"])
def test_a_dlrm_like_model_trains_as_on_cpu(optimizer):
    losses, parameters = _train_dlrm(DEVICE, optimizer)
    cpu_losses, cpu_parameters = _train_dlrm("cpu", optimizer)
    torch.testing.assert_close(losses, cpu_losses)
    assert losses[-1] != losses[0]  # it trained
    for parameter, expected in zip(parameters, cpu_parameters):
        torch.testing.assert_close(parameter, expected)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
