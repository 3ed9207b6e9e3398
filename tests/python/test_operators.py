"""openreg-ctl for operators: sessions, kill-session, drain, shutdown and
set-idle-exit, against private daemons with client processes that hold
device memory (docs/OBSERVABILITY.md)."""

import json
import subprocess
import sys
import textwrap
import time

import pytest
import torch_openreg

from daemon_fixture import Daemon, python_env

# A client that allocates 4 MiB on openreg:0, says READY, then runs one
# command per line it reads ("add": an add read back; "quit") and prints
# the outcome.
CLIENT = textwrap.dedent("""
    import sys
    import torch
    held = torch.ones(1 << 20, device="openreg")
    torch.openreg.synchronize()
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        try:
            print("OK", (held + 1).sum().item(), flush=True)
        except RuntimeError as error:
            print("ERROR", error, flush=True)
    """)


def ctl(daemon, *args):
    return subprocess.run(
        [torch_openreg.ctl_binary(), f"--socket={daemon.socket}", *args],
        capture_output=True, text=True, timeout=60)


def ctl_json(daemon, *args):
    done = ctl(daemon, "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Client:
    """A client process of `daemon` holding 4 MiB."""

    def __init__(self, daemon):
        self.process = subprocess.Popen(
            [sys.executable, "-c", CLIENT],
            env=python_env(OPENREG_DAEMON_SOCKET=daemon.socket,
                           OPENREG_AUTOSPAWN="0"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        assert line.strip() == "READY", (line, self.process.stderr.read())
        self.pid = self.process.pid

    def ask(self):
        self.process.stdin.write("add\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


@pytest.fixture
def daemon():
    with Daemon(devices=1, memory_per_device="256MiB") as running:
        yield running


@pytest.fixture
def clients(daemon):
    started = []
    yield lambda: started.append(Client(daemon)) or started[-1]
    for client in started:
        client.close()


def sessions_by_pid(daemon):
    reply = ctl_json(daemon, "sessions")
    return {int(s["pid"]): s for s in reply.get("sessions", [])}, reply


def test_sessions_lists_each_client_with_its_memory_and_command_line(
        daemon, clients):
    first, second = clients(), clients()
    listed, reply = sessions_by_pid(daemon)
    assert set(listed) == {first.pid, second.pid}
    for session in listed.values():
        assert int(session["allocated_bytes"]) >= 4 << 20, session
        assert session["command_line"].startswith(sys.executable), session
    assert not reply.get("draining", False)
    text = ctl(daemon, "sessions").stdout
    assert "accepting sessions; idle exit: never" in text
    assert str(first.pid) in text and "MB" in text


def test_kill_session_frees_its_memory_and_leaves_the_others_working(
        daemon, clients):
    victim, bystander = clients(), clients()
    done = ctl(daemon, "kill-session", str(victim.pid))
    assert done.returncode == 0, done.stderr
    assert f"of pid {victim.pid}" in done.stdout
    deadline = time.monotonic() + 10
    while victim.pid in sessions_by_pid(daemon)[0]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The device holds the bystander's memory only.
    remaining = sessions_by_pid(daemon)[0]
    assert list(remaining) == [bystander.pid]
    stats = ctl_json(daemon, "stats")
    assert int(stats["devices"][0].get("allocated_bytes", 0)) == int(
        remaining[bystander.pid]["allocated_bytes"])
    # The client learns it from its stream's error or from its session's
    # hang-up, whichever it meets first.
    answer = victim.ask()
    assert answer.startswith("ERROR") and "session" in answer and \
        "ended" in answer, answer
    assert bystander.ask() == f"OK {float((1 << 20) * 2)}"
    missing = ctl(daemon, "kill-session", str(victim.pid))
    assert missing.returncode == 1
    assert f"no session of pid {victim.pid} is attached" in missing.stderr


def test_drain_refuses_new_sessions_and_lets_current_ones_finish(
        daemon, clients):
    current = clients()
    done = ctl(daemon, "drain")
    assert done.returncode == 0 and "1 attached" in done.stdout, done
    refused = subprocess.run(
        [sys.executable, "-c",
         "import torch; torch.ones(1, device='openreg')"],
        env=python_env(OPENREG_DAEMON_SOCKET=daemon.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "draining" in refused.stderr, refused.stderr[-2000:]
    assert current.ask().startswith("OK")
    assert sessions_by_pid(daemon)[1]["draining"] is True
    assert ctl(daemon, "drain", "off").returncode == 0
    clients()


def test_shutdown_refuses_while_clients_are_attached_unless_forced(
        daemon, clients):
    client = clients()
    refused = ctl(daemon, "shutdown")
    assert refused.returncode == 1
    assert f"pid {client.pid}" in refused.stderr and "--force" in \
        refused.stderr, refused.stderr
    assert client.ask().startswith("OK")
    forced = ctl(daemon, "shutdown", "--force")
    assert forced.returncode == 0 and "1 session(s) ended" in forced.stdout
    assert daemon.process.wait(timeout=30) == 0
    answer = client.ask()
    assert answer.startswith("ERROR"), answer


def test_set_idle_exit_stops_a_daemon_without_clients(daemon):
    done = ctl(daemon, "set-idle-exit", "0.5")
    assert done.returncode == 0 and "idle exit: 0.5 s" in done.stdout
    assert daemon.process.wait(timeout=30) == 0
    bad = subprocess.run(
        [torch_openreg.ctl_binary(), "--socket=/nonexistent/sock",
         "set-idle-exit", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "set-idle-exit takes" in bad.stderr



def test_the_log_file_has_each_attach_error_fault_and_detach(tmp_path):
    """--log_level=info --log_file: a client's attach (pid, uid, command
    line), the error its bad index got, the fault it met, a refused
    control request and its detach, each line with its UTC time."""
    log = tmp_path / "daemon.log"
    with Daemon(devices=1, memory_per_device="256MiB",
                extra_args=("--log_level=info", f"--log_file={log}")) as d:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""
                import torch
                from torch.openreg import faults
                x = torch.ones(4, device="openreg")
                try:
                    x[torch.tensor([9], device="openreg")].cpu()
                except IndexError as error:
                    print("raised", type(error).__name__)
                faults.arm(faults.corrected_error(), op="aten::mul")
                (x * 2).cpu()
                """), "marker-argument"],
            env=python_env(OPENREG_DAEMON_SOCKET=d.socket,
                           OPENREG_AUTOSPAWN="0"),
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert ctl(d, "kill-session", "1").returncode == 1
        deadline = time.monotonic() + 10
        while "detached session" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    text = log.read_text()
    lines = text.splitlines()
    assert all(line[:4].isdigit() and line[10] == "T" and
               " openreg-daemon: " in line for line in lines), text
    attach = next(line for line in lines if "attached session" in line)
    assert "uid " in attach and "marker-argument" in attach, attach
    pid = attach.split("(pid ")[1].split(",")[0]
    assert any(f"(pid {pid}): openreg:0 stream" in line and
               "failed: KERNEL_INDEX_ERROR" in line for line in lines), text
    assert any("corrected a single-bit error" in line for line in lines), \
        text
    assert any("refused a control request: INVALID_VALUE: no session of "
               "pid 1" in line for line in lines), text
    assert any("detached session" in line and f"(pid {pid})" in line
               for line in lines), text


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
