"""module.to("openreg") moves Parameters in place, as on CUDA: the same
Parameter objects (an optimizer built before .to() trains the moved model),
tied Parameters stay tied, and `t.data = other` works across CPU and
openreg. One daemon serves the module."""

import sys

import pytest
import torch
from torch import nn

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=1)


def test_an_optimizer_built_before_to_trains_the_moved_model():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    model.to("openreg")
    x = torch.randn(8, 4, device="openreg")
    model(x).sum().backward()
    optimizer.step()
    assert model.weight.device.type == "openreg"
    assert not torch.equal(model.weight.detach().cpu(), before)
    # The same update on CPU.
    torch.manual_seed(0)
    reference = nn.Linear(4, 2)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x.cpu()).sum().backward()
    reference_optimizer.step()
    torch.testing.assert_close(model.weight.detach().cpu(), reference.weight)


@pytest.mark.parametrize("conversion", [
    lambda m: m.to("openreg"), lambda m: m.openreg(),
    lambda m: m.to("openreg").half(), lambda m: m.to("openreg").to("cpu")])
def test_parameters_keep_their_identity(conversion):
    # Buffers are replaced by Module._apply on every device (CUDA too);
    # Parameters are moved in place.
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    parameters = [id(p) for p in model.parameters()]
    conversion(model)
    assert [id(p) for p in model.parameters()] == parameters
    devices = {p.device.type for p in model.parameters()}
    devices |= {b.device.type for b in model.buffers()}
    assert len(devices) == 1


def test_tied_parameters_stay_tied_both_ways():
    class TiedEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    model = TiedEmbedding()
    count = len(list(model.parameters()))
    model.to("openreg")
    assert model.head.weight is model.embed.weight
    assert len(list(model.parameters())) == count
    assert model.head.weight.device.type == "openreg"
    model.to("cpu")
    assert model.head.weight is model.embed.weight
    assert model.head.weight.device.type == "cpu"


def test_data_assignment_across_devices_shares_the_new_storage():
    cpu = torch.zeros(3)
    device = torch.arange(3.0, device="openreg")
    cpu.data = device
    assert cpu.device.type == "openreg"
    assert cpu.data_ptr() == device.data_ptr()
    back = torch.ones(2, device="openreg")
    host = torch.full((2,), 7.0)
    back.data = host
    assert back.device.type == "cpu"
    assert back.data_ptr() == host.data_ptr()


def test_grads_move_with_their_parameters():
    model = nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    grad_id = id(model.weight.grad)
    model.to("openreg")
    assert model.weight.grad.device.type == "openreg"
    assert id(model.weight.grad) == grad_id


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
