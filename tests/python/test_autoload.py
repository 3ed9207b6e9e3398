"""`import torch` alone registers openreg, stays fast, never needs (or
starts) a daemon; TORCH_DEVICE_BACKEND_AUTOLOAD=0 disables it."""

import os
import sys

import pytest

from daemon_fixture import python_env, run_python, socket_folder

PROBE = """
import torch
print(torch._C._get_privateuse1_backend_name())
print(hasattr(torch, "openreg"))
print(torch.openreg.is_initialized() if hasattr(torch, "openreg") else "n/a")
"""


@pytest.fixture
def folder():
    with socket_folder() as path:
        yield path


def no_daemon_env(folder, **extra):
    socket = os.path.join(folder, "daemon.sock")
    overrides = {"OPENREG_DAEMON_SOCKET": socket, "OPENREG_AUTOSPAWN": "0"}
    overrides.update(extra)
    return socket, python_env(**overrides)


def test_import_torch_alone_registers_openreg_without_connecting(folder):
    socket, env = no_daemon_env(folder)
    result = run_python(PROBE, env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["openreg", "True", "False"]
    assert "could not be loaded" not in result.stderr
    assert not os.path.exists(socket)


def test_import_torch_with_autospawn_on_does_not_spawn(folder):
    socket, env = no_daemon_env(folder, OPENREG_AUTOSPAWN="1")
    result = run_python(PROBE, env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(socket), "import torch must not start a daemon"


def test_importing_the_package_before_torch_loads_once(folder):
    _, env = no_daemon_env(folder)
    code = "import torch_openreg, torch; print(torch.openreg.__name__)"
    result = run_python(code, env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch_openreg.openreg"
    assert "could not be loaded" not in result.stderr


def test_autoload_can_be_disabled(folder):
    _, env = no_daemon_env(folder, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    result = run_python(PROBE, env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["privateuseone", "False"]


def test_first_device_use_without_daemon_is_a_clear_error(folder):
    socket, env = no_daemon_env(folder)
    code = """
import torch
assert not torch.openreg.is_available()
try:
    torch.ones(2, device="openreg")
except RuntimeError as error:
    print("ERROR:", error)
"""
    result = run_python(code, env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ERROR:" in result.stdout
    assert "openreg-daemon" in result.stdout
    assert socket in result.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
