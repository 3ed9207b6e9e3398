"""Connect-or-spawn: with autospawn on, the first device use starts a
daemon on the selected socket; the test stops it by the pid it recorded."""

import os
import signal
import sys
import time

import pytest

from daemon_fixture import python_env, run_python, socket_folder


def daemon_pid_from_lock(socket):
    with open(socket + ".lock") as f:
        return int(f.read().split()[0])


def test_first_use_spawns_a_daemon_that_serves_later_clients():
    with socket_folder() as folder:
        spawn_and_reuse(folder)


def spawn_and_reuse(folder):
    socket = os.path.join(folder, "daemon.sock")
    env = python_env(OPENREG_DAEMON_SOCKET=socket, OPENREG_AUTOSPAWN=None,
                     OPENREG_IDLE_EXIT_SECONDS="60")
    code = "import torch; print((torch.ones(3, device='openreg') * 2).sum().item())"
    first = run_python(code, env)
    pid = None
    try:
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == "6.0"
        assert os.path.exists(socket)
        pid = daemon_pid_from_lock(socket)
        os.kill(pid, 0)  # alive
        second = run_python(code, env)  # reuses the same daemon
        assert second.returncode == 0, second.stderr
        assert daemon_pid_from_lock(socket) == pid
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
