"""`--help` of openreg-daemon and openreg-ctl: the program's own flags with
their defaults, on stdout, exit status 0, and nothing else done."""
import os
import re
import subprocess
import sys
import tempfile

import pytest
import torch_openreg

FLAG_LINE = re.compile(r"^  --([a-z_]+) \(default: (.*)\)$", re.M)


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True,
                          timeout=60, check=False)


def readme_flags():
    path = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"],
                        "README.md")
    with open(path) as f:
        return re.findall(r"^\| `--([a-z_]+)` \|", f.read(), re.M)


@pytest.mark.parametrize("spelling", ["--help", "-h"])
def test_daemon_help_lists_every_flag_of_the_readme_table_and_exits_0(
        spelling):
    result = run(torch_openreg.daemon_binary(), spelling)
    assert result.returncode == 0, result.stderr
    flags = dict(FLAG_LINE.findall(result.stdout))
    assert sorted(flags) == sorted(readme_flags())
    assert flags["devices"] == "2"
    assert flags["socket"] == '""'
    assert "Usage: openreg-daemon" in result.stdout


def test_daemon_help_starts_no_daemon():
    with tempfile.TemporaryDirectory() as folder:
        socket = os.path.join(folder, "daemon.sock")
        result = run(torch_openreg.daemon_binary(), f"--socket={socket}",
                     "--help")
        assert result.returncode == 0, result.stderr
        assert os.listdir(folder) == []


def test_ctl_help_lists_its_flags_and_commands_and_exits_0():
    result = run(torch_openreg.ctl_binary(), "--help")
    assert result.returncode == 0, result.stderr
    flags = dict(FLAG_LINE.findall(result.stdout))
    assert sorted(flags) == ["force", "json", "prefix", "since", "socket",
                             "spec"]
    assert flags["force"] == "false"
    assert flags["json"] == "false"
    for command in ["fault add", "fault list", "fault log", "device reset",
                    "profile", "stats", "flight-recorder", "sessions",
                    "kill-session", "drain", "shutdown", "set-idle-exit"]:
        assert command in result.stdout


def test_an_unknown_flag_still_fails_with_its_name():
    result = run(torch_openreg.daemon_binary(), "--no_such_flag=1")
    assert result.returncode != 0
    assert "no_such_flag" in result.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
