"""torch.openreg.set_sync_debug_mode: calls that make the host wait for the
daemon warn ("warn") or raise ("error"), as torch.cuda's do."""

import sys
import threading
import warnings

import pytest
import torch

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=1)

SYNC = "called a synchronizing openreg operation"


@pytest.fixture(autouse=True)
def default_mode_after_each_test():
    yield
    torch.openreg.set_sync_debug_mode("default")


def _device_tensor():
    return torch.arange(6, dtype=torch.float32, device="openreg")


def test_the_mode_is_off_by_default_and_round_trips_names_and_numbers():
    assert torch.openreg.get_sync_debug_mode() == 0
    for name, number in (("warn", 1), ("error", 2), ("default", 0)):
        torch.openreg.set_sync_debug_mode(name)
        assert torch.openreg.get_sync_debug_mode() == number
    for number in (2, 1, 0):
        torch.openreg.set_sync_debug_mode(number)
        assert torch.openreg.get_sync_debug_mode() == number


def test_default_mode_is_silent():
    x = _device_tensor()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.sum().item() == 15.0
        assert x.cpu().tolist() == [0, 1, 2, 3, 4, 5]


def test_item_warns_in_warn_mode():
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=SYNC) as caught:
        value = x[2].item()
    assert value == 2.0  # the call still does its work
    assert "device to the host" in str(caught[0].message)


def test_item_raises_in_error_mode():
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=SYNC):
        x[2].item()
    torch.openreg.set_sync_debug_mode("default")
    assert x[2].item() == 2.0


@pytest.mark.parametrize("call", [
    lambda x: x.cpu(),
    lambda x: x.tolist(),
    lambda x: torch.empty(6).copy_(x),
    lambda x: x.to("cpu"),
    lambda x: bool(x[1]),
])
def test_copies_to_the_host_raise_in_error_mode(call):
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=SYNC):
        call(x)


@pytest.mark.parametrize("call", [
    lambda x: torch.nonzero(x),
    lambda x: torch.masked_select(x, x > 2),
    lambda x: x[x > 2],
])
def test_ops_whose_output_shape_depends_on_the_data_warn(call):
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=SYNC) as caught:
        call(x)
    assert any("shape depends on the data" in str(w.message) for w in caught)


def test_stream_synchronize_warns_as_cudas_does():
    stream = torch.openreg.Stream()
    with torch.openreg.stream(stream):
        _device_tensor().mul_(2)
    torch.openreg.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=r"Stream\.synchronize"):
        stream.synchronize()


def test_device_and_event_synchronize_do_not_count_as_on_cuda():
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("error")
    event = torch.openreg.Event()
    x.mul_(3)
    event.record()
    event.synchronize()
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("default")
    assert x.tolist() == [0, 3, 6, 9, 12, 15]


def test_blocking_copy_with_pinned_memory_warns():
    x = _device_tensor()
    pinned = torch.empty(6).pin_memory()
    torch.openreg.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match="pinned memory"):
        pinned.copy_(x)
    with pytest.warns(UserWarning, match="pinned memory"):
        x.copy_(pinned)


def test_async_ops_never_warn():
    host = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    pinned = host.pin_memory()
    torch.openreg.set_sync_debug_mode("error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = host.to("openreg")                          # pageable H2D
        b = pinned.to("openreg", non_blocking=True)     # pinned H2D
        c = (a @ b).relu_() + 1
        d = c.sum(dim=0).softmax(dim=0)
        c.add_(d).mul_(0.5)
        e = torch.cat([c, a]).view(2, 16).t().contiguous()
        back = torch.empty(16, 2).pin_memory()
        back.copy_(e, non_blocking=True)              # pinned D2H, async
        event = torch.openreg.Event()
        event.record()
    torch.openreg.set_sync_debug_mode("default")
    event.synchronize()
    assert torch.equal(back, e.cpu())
    expected = (host @ host).relu() + 1
    expected = (expected + expected.sum(dim=0).softmax(dim=0)) * 0.5
    assert torch.allclose(c.cpu(), expected)


def test_the_mode_applies_to_every_thread_of_the_process():
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("error")
    errors = []

    def other_thread():
        try:
            x.sum().item()
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1 and SYNC in errors[0]


def test_bad_mode_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError) as caught:
        torch.openreg.set_sync_debug_mode("loud")
    message = str(caught.value)
    assert "'loud'" in message
    for valid in ('"default"', '"warn"', '"error"'):
        assert valid in message
    with pytest.raises(ValueError, match="0"):
        torch.openreg.set_sync_debug_mode(3)
    with pytest.raises(TypeError, match="default"):
        torch.openreg.set_sync_debug_mode(1.5)
    assert torch.openreg.get_sync_debug_mode() == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
