"""openreg's BackendMeta ("openreg.fault_target", torch_backend/tensor_meta.h)
through PyTorch's generic tensor-metadata API: set and get, torch.save /
torch.load (also weights_only=True), copy.deepcopy, clone, and
torch.compile(backend="aot_eager")."""

import copy
import io
import sys

import pytest
import torch

from daemon_fixture import process_daemon

DAEMON = process_daemon(devices=1)

KEY = "openreg.fault_target"


def _marked():
    x = torch.arange(4.0, device="openreg")
    torch._utils.set_tensor_metadata(x, {KEY: True})
    return x


def _meta(tensor):
    return torch._utils.get_tensor_metadata(tensor)


def test_set_and_get_round_trip():
    x = torch.ones(2, device="openreg")
    assert _meta(x) == {}
    torch._utils.set_tensor_metadata(x, {KEY: True})
    assert _meta(x) == {KEY: True}
    torch._utils.set_tensor_metadata(x, {KEY: False})
    assert _meta(x) == {}


def test_an_unknown_key_is_refused_naming_the_known_one():
    with pytest.raises(ValueError, match="unknown tensor metadata key 'x'.*"
                       + KEY):
        torch._utils.set_tensor_metadata(torch.ones(1, device="openreg"),
                                         {"x": True})


@pytest.mark.parametrize("weights_only", [True, False])
def test_the_metadata_survives_save_and_load(weights_only):
    model = torch.nn.Linear(2, 2).to("openreg")
    torch._utils.set_tensor_metadata(model.weight, {KEY: True})
    buffer = io.BytesIO()
    torch.save({"tensor": _marked(), "state": model.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=weights_only)
    assert loaded["tensor"].device.type == "openreg"
    assert _meta(loaded["tensor"]) == {KEY: True}
    assert torch.equal(loaded["tensor"].cpu(), torch.arange(4.0))
    assert _meta(loaded["state"]["weight"]) == {KEY: True}
    assert _meta(loaded["state"]["bias"]) == {}


def test_copies_keep_the_metadata_and_other_results_do_not():
    x = _marked()
    assert _meta(x.clone()) == {KEY: True}
    assert _meta(copy.deepcopy(x)) == {KEY: True}
    model = torch.nn.Linear(2, 2).to("openreg")
    torch._utils.set_tensor_metadata(model.weight, {KEY: True})
    assert _meta(copy.deepcopy(model).weight) == {KEY: True}
    assert _meta(x + 1) == {}
    assert _meta(x.cpu()) == {}


def test_compiled_code_keeps_the_metadata_of_inputs_and_clones():
    x = _marked()
    scaled = torch.compile(lambda t: t * 2 + 1, backend="aot_eager")
    assert torch.equal(scaled(x).cpu(), torch.arange(4.0) * 2 + 1)
    assert _meta(x) == {KEY: True}
    cloned = torch.compile(lambda t: t.clone(), backend="aot_eager")
    assert _meta(cloned(x)) == {KEY: True}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
