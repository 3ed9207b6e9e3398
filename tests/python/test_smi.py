"""openreg-smi: the default table, CSV queries with nvidia-smi's field
names, -L, JSON, the loop (ended by a signal), the missing daemon, the
utilization the daemon measures, and the Prometheus endpoint
(docs/OBSERVABILITY.md), against a private daemon with a client process
that holds memory on device 1 and can keep device 0 busy."""

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import torch_openreg
from prometheus_client.parser import text_string_to_metric_families

from daemon_fixture import Daemon, python_env, socket_folder

# Holds 4 MiB on openreg:1 (and 4 KiB copied there), says READY; "busy SECONDS" runs matmuls on
# openreg:0 for that long, then says DONE.
CLIENT = textwrap.dedent("""
    import sys, time
    import torch
    held = torch.ones(1 << 20, device="openreg:1")
    copied = torch.arange(1024.0).to("openreg:1")  # 4 KiB host to device
    torch.openreg.synchronize(1)
    print("READY", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "quit":
            break
        a = torch.randn(256, 256, device="openreg:0")
        end = time.monotonic() + float(words[1])
        while time.monotonic() < end:
            for _ in range(20):
                a = torch.tanh(a @ a)
            torch.openreg.synchronize(0)
        print("DONE", flush=True)
    """)


def smi(daemon_socket, *args, timeout=60):
    return subprocess.run(
        [torch_openreg.smi_binary(), f"--socket={daemon_socket}", *args],
        capture_output=True, text=True, timeout=timeout)


def ctl_json(daemon_socket, *args):
    done = subprocess.run(
        [torch_openreg.ctl_binary(), f"--socket={daemon_socket}", "--json",
         *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Client:
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

    def busy(self, seconds):
        self.process.stdin.write(f"busy {seconds}\n")
        self.process.stdin.flush()

    def wait_done(self):
        assert self.process.stdout.readline().strip() == "DONE"

    def close(self):
        try:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            self.process.wait(timeout=30)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def daemon():
    with Daemon(devices=2, memory_per_device="256MiB") as running:
        yield running


@pytest.fixture(scope="module")
def client(daemon):
    started = Client(daemon)
    yield started
    started.close()


def test_table_shows_devices_and_the_process_with_its_memory(daemon, client):
    done = smi(daemon.socket)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "OPENREG-SMI" in text and f"Socket: {daemon.socket}" in text
    device_rows = re.findall(r"^\|\s+(\d)\s+openreg emulated device\s+OK\s+\|"
                             r"\s+(\d+)MiB /\s+256MiB", text, re.M)
    assert [row[0] for row in device_rows] == ["0", "1"], text
    assert int(device_rows[1][1]) >= 4, text
    process_rows = re.findall(rf"^\|\s+1\s+{client.pid}\s+\d+\s+(.*?)\s+"
                              r"(\d+)MiB\s+\|$", text, re.M)
    assert len(process_rows) == 1, text
    assert process_rows[0][0].startswith(sys.executable[:20])
    assert int(process_rows[0][1]) >= 4


def test_query_gpu_prints_csv_with_nvidia_smi_names_and_units(daemon, client):
    fields = "index,name,memory.used,memory.total,memory.free," \
             "utilization.gpu,pstate,state"
    done = smi(daemon.socket, f"--query-gpu={fields}", "--format=csv")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("index, name, memory.used [MiB], memory.total [MiB], "
                        "memory.free [MiB], utilization.gpu [%], pstate, "
                        "state")
    assert len(lines) == 3
    values = lines[2].split(", ")
    assert values[0] == "1" and values[1] == "openreg emulated device"
    assert values[3] == "256 MiB" and values[7] == "OK"
    used = int(values[2].split()[0])
    free = int(values[4].split()[0])
    assert used >= 4 and used + free in (255, 256)
    bare = smi(daemon.socket, f"--query-gpu={fields}",
               "--format=csv,noheader,nounits", "-i", "1")
    assert bare.returncode == 0, bare.stderr
    # The same values without units (utilization and pstate may move
    # between the two looks).
    [line] = bare.stdout.splitlines()
    bare_values = line.split(", ")
    stable = (0, 1, 2, 3, 4, 7)
    assert [bare_values[i] for i in stable] == [
        values[i].split()[0] if values[i].endswith("MiB") else values[i]
        for i in stable]
    assert bare_values[5].isdigit() and bare_values[6] in ("P0", "P8")


def test_query_compute_apps_lists_the_process_on_its_device(daemon, client):
    done = smi(daemon.socket,
               "--query-compute-apps=pid,process_name,used_memory,gpu_index,"
               "gpu_name", "--format=csv,noheader")
    assert done.returncode == 0, done.stderr
    rows = [line.split(", ") for line in done.stdout.splitlines()]
    mine = [row for row in rows if row[0] == str(client.pid)]
    assert len(mine) == 1, rows
    pid, name, memory, device, gpu_name = mine[0]
    assert name == sys.executable and device == "1"
    assert memory.endswith(" MiB") and int(memory.split()[0]) >= 4
    assert gpu_name == "openreg emulated device"


def test_an_unknown_field_is_refused_naming_the_valid_ones(daemon):
    done = smi(daemon.socket, "--query-gpu=index,pci.bus_id")
    assert done.returncode == 2
    assert 'Field "pci.bus_id" is not a valid field to query' in done.stderr
    assert "memory.used" in done.stderr


def test_list_prints_one_line_per_device(daemon):
    done = smi(daemon.socket, "-L")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"GPU {i}: openreg emulated device (daemon pid {daemon.pid}, "
        f"socket {daemon.socket})" for i in range(2)]


def test_json_holds_every_field_and_the_daemon(daemon, client):
    done = smi(daemon.socket, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["daemon"]["pid"] == daemon.pid
    assert document["daemon"]["socket"] == daemon.socket
    assert document["daemon"]["version"] == torch_openreg.__version__
    assert [gpu["index"] for gpu in document["gpus"]] == [0, 1]
    assert document["gpus"][1]["memory.used"] >= 4
    assert document["gpus"][1]["state"] == "OK"
    mine = [p for p in document["processes"] if p["pid"] == client.pid]
    assert len(mine) == 1 and mine[0]["gpu_index"] == 1


def test_a_bad_device_index_names_the_devices_there_are(daemon):
    done = smi(daemon.socket, "-i", "7")
    assert done.returncode == 6
    assert "no device 7: the daemon has 2 (0-1)" in done.stderr


def test_looking_creates_no_session(daemon, client):
    before = int(ctl_json(daemon.socket, "stats")["sessions_served"])
    for args in ((), ("-L",), ("--json",), ("--query-gpu=index",)):
        assert smi(daemon.socket, *args).returncode == 0
    assert int(ctl_json(daemon.socket, "stats")["sessions_served"]) == before


def test_utilization_is_the_daemons_busy_share_of_the_last_second(
        daemon, client):
    def utilization():
        done = smi(daemon.socket, "--query-gpu=utilization.gpu",
                   "--format=csv,noheader,nounits")
        assert done.returncode == 0, done.stderr
        return [int(v) for v in done.stdout.split()]

    def busy_seconds():
        return ctl_json(daemon.socket, "stats")["devices"][0]["busy_seconds"]

    client.busy(6)
    # The client's first launches take a moment: wait until device 0 works.
    deadline = time.monotonic() + 30
    while busy_seconds() < 0.3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    busy_before, started = busy_seconds(), time.monotonic()
    time.sleep(1.2)
    busy_device, idle_device = utilization()
    busy_share = (busy_seconds() - busy_before) / (time.monotonic() - started)
    client.wait_done()
    # Device 0 ran the loop nearly all the time, as the daemon's busy time
    # over the same second says (the window's edges differ by up to one
    # 250 ms sample); device 1 ran nothing.
    assert busy_device >= 50, (busy_device, busy_share)
    assert abs(busy_device - 100 * busy_share) <= 25, (busy_device, busy_share)
    assert idle_device == 0
    time.sleep(1.6)  # a full window after the loop
    assert utilization() == [0, 0]


def test_the_loop_repeats_until_interrupted(daemon):
    loop = subprocess.Popen(
        [torch_openreg.smi_binary(), f"--socket={daemon.socket}",
         "--query-gpu=index", "--format=csv,noheader", "--loop-ms=100"],
        stdout=subprocess.PIPE, text=True)
    lines = [loop.stdout.readline() for _ in range(6)]
    assert lines == ["0\n", "1\n"] * 3
    loop.send_signal(signal.SIGINT)
    assert loop.wait(timeout=10) == 0
    seconds = subprocess.Popen(
        [torch_openreg.smi_binary(), f"--socket={daemon.socket}", "-L",
         "-l", "0.2"], stdout=subprocess.PIPE, text=True)
    assert seconds.stdout.readline().startswith("GPU 0:")
    seconds.send_signal(signal.SIGTERM)
    assert seconds.wait(timeout=10) == 0


def test_help_lists_the_options_and_every_field():
    done = subprocess.run([torch_openreg.smi_binary(), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for text in ("--query-gpu", "--query-compute-apps", "--loop_ms",
                 "--prometheus-port", "* memory.used [MiB]",
                 "* utilization.gpu [%]", "* used_memory [MiB]",
                 "command_line", "Exit status"):
        assert text in done.stdout, text


def test_without_a_daemon_it_says_so_in_one_line_and_exits_9():
    with socket_folder() as folder:
        done = smi(f"{folder}/daemon.sock")
    assert done.returncode == 9
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "openreg-smi has failed because it couldn't communicate with the "
        f"openreg daemon at {folder}/daemon.sock")
    assert "openreg-daemon" in lines[0] and done.stdout == ""


def exporter(daemon_socket):
    process = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from torch_openreg.cli import smi_main; "
         "sys.argv[0] = 'openreg-smi'; smi_main()",
         "--prometheus-port=0", f"--socket={daemon_socket}"],
        env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    line = process.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    assert match, (line, process.stderr.read() if process.poll() else "")
    return process, match.group(0)


def scrape(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        # Counters parse as counters (their samples end in _total).
        if family.name.startswith("openreg_kernels_executed"):
            assert family.type == "counter", family
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            samples[key] = sample.value
    return samples


def value(samples, name, **labels):
    wanted = {k: str(v) for k, v in labels.items()}
    found = [v for (n, ls), v in samples.items()
             if n == name and wanted.items() <= dict(ls).items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_the_prometheus_endpoint_serves_the_daemons_metrics(daemon, client):
    process, url = exporter(daemon.socket)
    try:
        samples = scrape(url)
        assert value(samples, "openreg_up") == 1
        assert value(samples, "openreg_sessions") == 1
        assert value(samples, "DCGM_FI_DEV_FB_TOTAL", gpu=1) == 256
        assert value(samples, "DCGM_FI_DEV_FB_USED", gpu=1) >= 4
        assert value(samples, "DCGM_FI_DEV_FB_USED", gpu=1) + value(
            samples, "DCGM_FI_DEV_FB_FREE", gpu=1) == 256
        assert 0 <= value(samples, "DCGM_FI_DEV_GPU_UTIL", gpu=0) <= 100
        assert value(samples, "openreg_kernels_executed_total", gpu=0) > 0
        assert value(samples, "openreg_copy_bytes_total", gpu=1,
                     direction="host_to_device") >= 4096
        assert value(samples, "openreg_device_state", gpu=0, state="ok") == 1
        assert value(samples, "openreg_device_state", gpu=0, state="lost") == 0
        assert value(samples, "openreg_process_memory_used_bytes",
                     pid=client.pid, gpu=1) >= 4 << 20
        assert value(samples, "openreg_daemon_info",
                     version=torch_openreg.__version__) == 1
        # Each scrape reads the daemon afresh.
        later = scrape(url)
        assert value(later, "openreg_daemon_uptime_seconds") > value(
            samples, "openreg_daemon_uptime_seconds")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_the_endpoint_reports_a_missing_daemon_as_down():
    with socket_folder() as folder:
        process, url = exporter(f"{folder}/daemon.sock")
        try:
            samples = scrape(url)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    assert value(samples, "openreg_up") == 0
    assert not any(name.startswith("DCGM") for name, _ in samples)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
