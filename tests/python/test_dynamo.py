"""Dynamo's DeviceInterface for openreg (torch_openreg/dynamo.py) and
torch.compile(backend="aot_eager") of stream- and event-aware code."""

import sys

import pytest
import torch

from daemon_fixture import process_daemon, run_python

DAEMON = process_daemon(devices=2)


def test_import_torch_does_not_import_dynamo_but_registers_on_its_import():
    code = """
import sys, torch
assert "torch._dynamo" not in sys.modules, "autoload imported Dynamo"
from torch._dynamo.device_interface import get_interface_for_device
print(get_interface_for_device("openreg").__name__)
"""
    result = run_python(code, DAEMON.env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "OpenRegInterface"


def _interface():
    from torch._dynamo.device_interface import get_interface_for_device
    return get_interface_for_device("openreg")


def test_the_interface_answers_as_torch_openreg():
    interface = _interface()
    assert interface.is_available()
    assert interface.device_count() == torch.openreg.device_count() == 2
    assert interface.current_device() == torch.openreg.current_device()
    assert interface.Stream is torch.openreg.Stream
    assert interface.Event is torch.openreg.Event
    major, minor = torch.openreg.get_device_capability(0)
    assert interface.get_compute_capability(0) == major * 10 + minor
    assert interface.get_device_properties(0).name == \
        torch.openreg.get_device_properties(0).name
    assert interface.get_raw_stream(0) == \
        torch.openreg.current_stream(0).stream_id
    assert not interface.is_triton_capable()
    with pytest.raises(RuntimeError, match="no Triton backend: Inductor "
                       "compiles openreg kernels with its C\\+\\+"):
        interface.raise_if_triton_unavailable()


def test_the_interface_switches_devices_and_streams():
    interface = _interface()
    assert interface.exchange_device(1) == 0
    assert interface.current_device() == 1
    assert interface.maybe_exchange_device(0) == 1
    assert interface.maybe_exchange_device(-1) == -1
    assert interface.current_device() == 0
    stream = torch.openreg.Stream(0)
    interface._set_stream_by_id(stream.stream_id, stream.device_index,
                                stream.device_type)
    assert torch.openreg.current_stream(0) == stream
    interface.set_stream(torch.openreg.default_stream(0))
    x = torch.ones(3, device="openreg") * 2
    interface.synchronize(0)
    assert x.sum().item() == 6


def _generic_streams(x):
    stream = torch.Stream(device="openreg")
    event = torch.Event(device="openreg")
    with stream:
        y = x * 2
    event.record(stream)
    event.wait()
    return y + 1


def _openreg_streams(x):
    stream = torch.openreg.Stream()
    event = torch.openreg.Event()
    with torch.openreg.stream(stream):
        y = x * 2
        event.record()
    torch.openreg.current_stream().wait_event(event)
    return y + 1


def test_compiled_code_with_generic_streams_and_events_is_one_graph():
    x = torch.arange(4.0, device="openreg")
    compiled = torch.compile(_generic_streams, backend="aot_eager",
                             fullgraph=True)
    assert torch.equal(compiled(x).cpu(), _generic_streams(x).cpu())


def test_compiled_code_with_torch_openreg_streams_and_events_runs():
    # torch.openreg's constructors are third-party code to Dynamo: a graph
    # break around them, the same result.
    x = torch.arange(4.0, device="openreg")
    compiled = torch.compile(_openreg_streams, backend="aot_eager")
    assert torch.equal(compiled(x).cpu(), _openreg_streams(x).cpu())


def test_a_compiled_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2)).to("openreg")
    x = torch.randn(4, 8, device="openreg")
    eager_loss = model(x).square().mean()
    eager_loss.backward()
    eager_grads = [p.grad.cpu() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, backend="aot_eager")
    loss = compiled(x).square().mean()
    loss.backward()
    torch.testing.assert_close(loss.cpu(), eager_loss.cpu())
    for parameter, expected in zip(model.parameters(), eager_grads):
        torch.testing.assert_close(parameter.grad.cpu(), expected)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
