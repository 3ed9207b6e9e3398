"""Errors that only a running kernel can find (value-dependent, raised by
the daemon's ATen kernel) reach the user as the same Python class CPU
raises, with CPU's message first and openreg's context (op, device,
command) after it. One daemon serves the module."""

import sys
import re

import pytest
import torch

from daemon_fixture import module_daemon, run_python

DAEMON, setup_module, teardown_module = module_daemon(devices=1)


def cpu_error(fn):
    """The exception CPU raises for fn("cpu")."""
    with pytest.raises(Exception) as caught:
        fn("cpu")
    return caught.value


def device_error(fn):
    """The exception fn("openreg") raises by the next synchronization."""
    with pytest.raises(Exception) as caught:
        fn("openreg")
        torch.openreg.synchronize()
    return caught.value


def index_out_of_bounds(device):
    x = torch.zeros(3, device=device)
    return x[torch.tensor([5], device=device)].cpu()


def cholesky_of_non_positive_definite(device):
    matrix = torch.tensor([[-1.0, 0.0], [0.0, 1.0]], device=device)
    return torch.linalg.cholesky(matrix).cpu()


@pytest.mark.parametrize("fn", [index_out_of_bounds,
                                cholesky_of_non_positive_definite])
def test_kernel_error_keeps_cpus_class_and_message_first(fn):
    expected = cpu_error(fn)
    actual = device_error(fn)
    assert type(actual) is type(expected), (type(actual), actual)
    # CPU's message, first: assertRaisesRegex("^...") works as on CPU.
    assert str(actual).startswith(str(expected).split("\n")[0]), str(actual)


def test_a_daemon_kernel_error_names_op_device_and_command_after_it():
    actual = device_error(index_out_of_bounds)
    assert re.search(r"\(openreg: aten::\S+ failed on openreg:0, command \d+ "
                     r"of its stream\)$", str(actual)), str(actual)


def test_the_next_op_after_a_kernel_error_is_clean():
    device_error(index_out_of_bounds)
    x = torch.arange(4.0, device="openreg")
    torch.testing.assert_close((x * 2).cpu(), torch.arange(4.0) * 2)


def test_index_error_is_catchable_as_index_error():
    with pytest.raises(IndexError, match="^index 5 is out of bounds"):
        index_out_of_bounds("openreg")
        torch.openreg.synchronize()
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        cholesky_of_non_positive_definite("openreg")



_BLOCKING_CHILD = r"""
import torch
x = torch.zeros(3, device="openreg")
# The first launch of an op signature is checked (waited for); a valid one
# first, so that the bad index is a value-dependent error of a later launch.
x[torch.tensor([1], device="openreg")]
index = torch.tensor([5], device="openreg")
try:
    y = x[index]        # the kernel finds the bad index
except IndexError as error:
    print("raised at the call:", str(error).splitlines()[0])
else:
    print("returned")
"""


@pytest.mark.parametrize("blocking", ["1", "0"])
def test_launch_blocking_raises_a_kernel_error_at_its_own_call(blocking):
    result = run_python(_BLOCKING_CHILD,
                        DAEMON.env(OPENREG_LAUNCH_BLOCKING=blocking))
    assert result.returncode == 0, result.stderr[-2000:]
    if blocking == "1":
        assert result.stdout.startswith(
            "raised at the call: index 5 is out of bounds"), result.stdout
    else:
        # Asynchronous by default, as on CUDA: the call returns.
        assert result.stdout.strip() == "returned", result.stdout

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
