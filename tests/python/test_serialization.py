"""torch.save / torch.load of openreg tensors, modules and optimizer states
(location tags "openreg:N"), and the generated tensor/module/storage API."""

import io
import sys

import pytest
import torch

from daemon_fixture import Daemon, module_daemon, run_python

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


@pytest.mark.parametrize("index", [0, 1])
def test_tensor_round_trip_keeps_device_and_values(index):
    cpu = torch.randn(5, 7)
    loaded = round_trip(cpu.to(f"openreg:{index}"))
    assert loaded.device == torch.device("openreg", index)
    torch.testing.assert_close(loaded.cpu(), cpu)


def test_location_tag_is_openreg_index():
    storage = torch.ones(3, device="openreg:1").untyped_storage()
    assert torch.serialization.location_tag(storage) == "openreg:1"


def test_views_share_storage_after_load():
    base = torch.arange(12.0, device="openreg").reshape(3, 4)
    view = base[1:, ::2]
    loaded_base, loaded_view = round_trip([base, view])
    assert loaded_view.untyped_storage().data_ptr() == \
        loaded_base.untyped_storage().data_ptr()
    loaded_base.fill_(-1.0)  # one storage: the view sees the write
    assert (loaded_view.cpu() == -1.0).all()
    assert loaded_view.stride() == view.stride()


def test_dtypes_round_trip():
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64,
                  torch.int8, torch.bool, torch.complex64):
        cpu = (torch.arange(10) % 3).to(dtype)
        loaded = round_trip(cpu.to("openreg"))
        assert loaded.dtype == dtype and loaded.is_openreg
        assert torch.equal(loaded.cpu(), cpu)


def test_map_location_to_cpu():
    device_tensor = torch.randn(4, 4, device="openreg:1")
    loaded = round_trip(device_tensor, map_location="cpu")
    assert loaded.device.type == "cpu"
    torch.testing.assert_close(loaded, device_tensor.cpu())


def test_map_location_to_another_openreg_device():
    device_tensor = torch.randn(4, 4, device="openreg:0")
    for location in ("openreg:1", torch.device("openreg", 1),
                     {"openreg:0": "openreg:1"}):
        loaded = round_trip(device_tensor, map_location=location)
        assert loaded.device == torch.device("openreg", 1), location
        torch.testing.assert_close(loaded.cpu(), device_tensor.cpu())


def test_cpu_checkpoint_loads_onto_openreg():
    cpu = {"weight": torch.randn(3, 3), "step": torch.tensor(7)}
    loaded = round_trip(cpu, map_location="openreg:1")
    assert loaded["weight"].device == torch.device("openreg", 1)
    torch.testing.assert_close(loaded["weight"].cpu(), cpu["weight"])
    assert loaded["step"].item() == 7


def test_module_state_dict_round_trip():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model = model.openreg()  # the generated Module.openreg()
    model(torch.randn(8, 6, device="openreg"))  # updates BatchNorm buffers
    state = round_trip(model.state_dict())
    for name, value in model.state_dict().items():
        assert state[name].is_openreg, name
        assert torch.equal(state[name].cpu(), value.cpu()), name

    fresh = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 2))
    fresh.load_state_dict(round_trip(model.state_dict(), map_location="cpu"))
    fresh.openreg(1)
    assert next(fresh.parameters()).device == torch.device("openreg", 1)
    inputs = torch.randn(5, 6)
    # Training mode: BatchNorm normalizes with batch statistics, so equal
    # weights give equal outputs.
    torch.testing.assert_close(fresh(inputs.to("openreg:1")).cpu(),
                               model(inputs.to("openreg")).cpu())


def test_whole_module_round_trip():
    model = torch.nn.Linear(3, 2).to("openreg")
    loaded = round_trip(model, weights_only=False)
    assert loaded.weight.is_openreg
    assert torch.equal(loaded.weight.cpu(), model.weight.cpu())


def test_optimizer_state_round_trip_and_resume():
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 1).to("openreg")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 4, device="openreg")
    targets = torch.randn(16, 1, device="openreg")

    def step(model, optimizer):
        optimizer.zero_grad()
        loss = (model(inputs) - targets).pow(2).mean()
        loss.backward()
        optimizer.step()

    for _ in range(3):
        step(model, optimizer)
    checkpoint = round_trip({"model": model.state_dict(),
                             "optimizer": optimizer.state_dict()})
    exp_avg = checkpoint["optimizer"]["state"][0]["exp_avg"]
    assert exp_avg.is_openreg
    assert torch.equal(exp_avg.cpu(),
                       optimizer.state_dict()["state"][0]["exp_avg"].cpu())

    resumed = torch.nn.Linear(4, 1).to("openreg")
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.01)
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    step(model, optimizer)
    step(resumed, resumed_optimizer)
    torch.testing.assert_close(resumed.weight.cpu(), model.weight.cpu())


def test_file_round_trip_in_a_fresh_process(tmp_path):
    """A checkpoint written by one client loads in another (a fresh session,
    even on another daemon): the data lives in the file, not in a daemon."""
    path = tmp_path / "checkpoint.pt"
    tensor = torch.randn(6, device="openreg:1")
    torch.save({"tensor": tensor}, path)
    code = f'''
import torch
loaded = torch.load({str(path)!r})
assert loaded["tensor"].device == torch.device("openreg", 1), loaded
print(loaded["tensor"].cpu().tolist())
'''
    with Daemon(devices=2) as other:
        child = run_python(code, other.env())
    assert child.returncode == 0, child.stderr
    assert eval(child.stdout) == tensor.cpu().tolist()


def test_loading_onto_a_missing_device_fails_clearly():
    tensor = torch.randn(2, device="openreg")
    with pytest.raises(RuntimeError, match="openreg"):
        round_trip(tensor, map_location="openreg:7")


def test_generated_tensor_methods():
    cpu = torch.randn(3)
    assert not cpu.is_openreg
    moved = cpu.openreg()
    assert moved.is_openreg and moved.device == torch.device("openreg", 0)
    assert cpu.openreg(1).device == torch.device("openreg", 1)
    assert moved.openreg() is moved  # already there: no copy
    torch.testing.assert_close(moved.cpu(), cpu)


def test_generated_storage_methods():
    cpu_storage = torch.arange(4, dtype=torch.float32).untyped_storage()
    assert not cpu_storage.is_openreg
    device_storage = cpu_storage.openreg()
    assert device_storage.is_openreg
    assert device_storage.device == torch.device("openreg", 0)
    assert device_storage.nbytes() == cpu_storage.nbytes()
    assert bytes(device_storage.cpu()) == bytes(cpu_storage)
    assert torch.ones(2, device="openreg").untyped_storage().is_openreg

    typed = torch.arange(4, dtype=torch.float32).storage()  # TypedStorage
    assert typed.openreg().is_openreg


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


def test_legacy_tensor_types():
    made = torch.openreg.FloatTensor(2, 3)
    assert made.shape == (2, 3) and made.dtype == torch.float32
    assert made.device.type == "openreg"
    assert isinstance(made, torch.openreg.FloatTensor)
    assert not isinstance(made, torch.openreg.DoubleTensor)
    assert not isinstance(made.cpu(), torch.openreg.FloatTensor)
    from_data = torch.openreg.LongTensor([[1, 2], [3, 4]])
    assert from_data.dtype == torch.int64
    assert from_data.cpu().tolist() == [[1, 2], [3, 4]]
    assert torch.openreg.HalfTensor(torch.Size([4])).shape == (4,)
    assert torch.openreg.BoolTensor().shape == (0,)
    on_one = torch.openreg.IntTensor(3, device="openreg:1")
    assert on_one.device == torch.device("openreg", 1)
    assert isinstance(on_one, torch.openreg.IntTensor)
    with pytest.raises(ValueError, match="makes openreg tensors"):
        torch.openreg.FloatTensor(2, device="cpu")
    # tensor.type() names and converts to them, as for torch.cuda.
    assert made.type() == "torch.openreg.FloatTensor"
    converted = made.type("torch.openreg.DoubleTensor")
    assert converted.dtype == torch.float64 and converted.device.type == "openreg"
    assert torch.ones(2).type("torch.openreg.ByteTensor").device.type == "openreg"


def test_packed_sequence_methods():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    padded = torch.randn(4, 3, 5)
    packed = pack_padded_sequence(padded, torch.tensor([4, 2, 1]))
    on_device = packed.openreg()
    assert on_device.is_openreg and not packed.is_openreg
    assert on_device.data.device.type == "openreg"
    on_one = packed.openreg(1)
    assert on_one.data.device == torch.device("openreg", 1)
    back = on_device.to("cpu")
    assert not back.is_openreg
    torch.testing.assert_close(back.data, packed.data)
    # An RNN consumes the packed sequence on the device.
    rnn = torch.nn.GRU(5, 6).to("openreg")
    output, _ = rnn(on_device)
    unpacked, lengths = pad_packed_sequence(output)
    assert unpacked.device.type == "openreg"
    assert lengths.tolist() == [4, 2, 1]
