"""`openreg-smi --prometheus-port N`: serves the daemon's counters to
Prometheus over HTTP, in the text format, with prometheus_client.

Each scrape asks the daemon afresh (`openreg-ctl --json stats` and
`sessions`: no session, nothing cached here), so a scrape shows the daemon
as it is. Metrics use the DCGM exporter's names where DCGM has the same
fact (memory, utilization, corrected errors) and `openreg_*` names for the
rest; docs/OBSERVABILITY.md lists them with a scrape config. When no daemon
answers, the scrape still succeeds with `openreg_up 0`, as exporters do.
"""

import argparse
import json
import signal
import socket
import subprocess
import threading

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, Metric

from torch_openreg import ctl_binary

_MIB = 1 << 20
_STATES = ("ok", "fault", "lost")
_COPY_DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device")


def _metric(name, documentation, kind, samples):
    """A metric of `kind` whose samples are [(labels, value)], named `name`
    exactly. A counter's name ends in _total, which the text format adds to
    the family's name itself, so the family is named without it."""
    family = name
    if kind == "counter":
        assert name.endswith("_total"), name
        family = name[:-len("_total")]
    metric = Metric(family, documentation, kind)
    for labels, value in samples:
        metric.add_sample(name, labels, value)
    return metric


class DaemonCollector:
    """Reads the daemon on every collect() (one scrape)."""

    def __init__(self, socket_path, timeout=5.0):
        self._socket_path = socket_path
        self._timeout = timeout
        self._hostname = socket.gethostname()

    def _ask(self, command):
        argv = [ctl_binary(), "--json"]
        if self._socket_path:
            argv.append(f"--socket={self._socket_path}")
        done = subprocess.run(argv + [command], capture_output=True,
                              text=True, timeout=self._timeout)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip())
        return json.loads(done.stdout)

    def collect(self):
        try:
            stats = self._ask("stats")
            sessions = self._ask("sessions")
        except (RuntimeError, subprocess.TimeoutExpired, ValueError):
            yield _metric("openreg_up", "1 when the daemon answered the scrape",
                          "gauge", [({}, 0)])
            return
        yield _metric("openreg_up", "1 when the daemon answered the scrape",
                      "gauge", [({}, 1)])
        yield from self._daemon_metrics(stats, sessions)
        yield from self._device_metrics(stats)
        yield from self._process_metrics(sessions)

    def _daemon_metrics(self, stats, sessions):
        yield _metric("openreg_daemon_info", "the daemon's version and pid",
                      "gauge", [({"version": stats["daemon_version"],
                                  "pid": str(stats["daemon_pid"])}, 1)])
        yield _metric("openreg_daemon_uptime_seconds", "seconds since start",
                      "gauge", [({}, stats["uptime_seconds"])])
        yield _metric("openreg_sessions", "client sessions attached now",
                      "gauge", [({}, len(sessions["sessions"]))])
        yield _metric("openreg_sessions_served_total",
                      "sessions attached since start", "counter",
                      [({}, int(stats["sessions_served"]))])
        yield _metric("openreg_draining", "1 while new sessions are refused",
                      "gauge", [({}, int(bool(sessions["draining"])))])

    def _labels(self, device):
        index = device["device"]
        return {"gpu": str(index), "device": f"openreg{index}",
                "modelName": device["name"], "Hostname": self._hostname}

    def _device_metrics(self, stats):
        devices = stats["devices"]

        def each(value_of):
            return [(self._labels(d), value_of(d)) for d in devices]

        yield _metric("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
                      "gauge", each(lambda d: int(d["allocated_bytes"]) / _MIB))
        yield _metric("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
                      "gauge", each(lambda d: int(d["free_bytes"]) / _MIB))
        yield _metric("DCGM_FI_DEV_FB_TOTAL",
                      "Total framebuffer memory (in MiB).", "gauge",
                      each(lambda d: int(d["total_bytes"]) / _MIB))
        yield _metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
                      "gauge", each(lambda d: d["utilization_percent"]))
        # A gauge: prometheus_client names every counter *_total, and
        # DCGM's name has no such suffix.
        yield _metric("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                      "Total number of single-bit volatile ECC errors "
                      "(openreg: corrected_error faults).", "gauge",
                      each(lambda d: int(d["corrected_errors"])))
        yield _metric("openreg_busy_seconds_total",
                      "time during which an executor of the device ran a "
                      "stream", "counter", each(lambda d: d["busy_seconds"]))
        yield _metric("openreg_kernels_executed_total", "kernels run",
                      "counter", each(lambda d: int(d["kernels_executed"])))
        yield _metric("openreg_kernel_failures_total", "kernels that failed",
                      "counter", each(lambda d: int(d["kernel_failures"])))
        yield _metric("openreg_copies_executed_total", "copies run",
                      "counter", each(lambda d: int(d["copies_executed"])))
        yield _metric("openreg_copy_bytes_total",
                      "bytes copied by this device's streams, by direction",
                      "counter",
                      [(dict(self._labels(d), direction=direction),
                        int(d[f"{direction}_bytes"]))
                       for d in devices for direction in _COPY_DIRECTIONS])
        yield _metric("openreg_streams", "streams of every process",
                      "gauge", each(lambda d: d["streams"]))
        yield _metric("openreg_device_state",
                      "1 for the device's state (ok, fault until reset, lost)",
                      "gauge",
                      [(dict(self._labels(d), state=state),
                        int(d["state"] == state))
                       for d in devices for state in _STATES])
        yield _metric("openreg_faults_fired_total",
                      "injected faults fired, by model", "counter",
                      [(dict(self._labels(d), model=model), int(count))
                       for d in devices
                       for model, count in sorted(d["faults_fired"].items())])

    def _process_metrics(self, sessions):
        samples = []
        for session in sessions["sessions"]:
            for usage in session["devices"]:
                samples.append(({"pid": str(session["pid"]),
                                 "gpu": str(usage["device"])},
                                int(usage["allocated_bytes"])))
        yield _metric("openreg_process_memory_used_bytes",
                      "memory each process allocated on each device",
                      "gauge", samples)


def main(argv):
    parser = argparse.ArgumentParser(
        prog="openreg-smi --prometheus-port",
        description="Serve the openreg daemon's metrics to Prometheus.")
    parser.add_argument("--prometheus-port", type=int, required=True,
                        help="TCP port of the /metrics endpoint")
    parser.add_argument("--prometheus-address", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; "
                             "0.0.0.0 to be scraped from other hosts)")
    parser.add_argument("--socket", default="",
                        help="the daemon's socket (default: "
                             "$OPENREG_DAEMON_SOCKET, else the default path)")
    options = parser.parse_args(argv)
    # Its own registry: only the daemon's metrics, not this process's.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(options.socket))
    server, thread = start_http_server(options.prometheus_port,
                                       addr=options.prometheus_address,
                                       registry=registry)
    host, port = server.server_address[:2]
    print(f"openreg-smi: serving metrics on http://{host}:{port}/metrics",
          flush=True)
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.shutdown()
    return 0
