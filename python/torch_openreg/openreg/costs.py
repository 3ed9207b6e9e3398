"""The daemon's cost profile: where the daemon's time goes, per op (each
command's stages: read, wait, hook, settings, decode, kernel, reply,
complete), per stream (slices, parks, wakes, spinning), per executor
thread (busy time, sleeps, CPU) and the CPU of the daemon's threads by
role (executors, their OpenMP workers, others). `openreg-ctl costs` shows
the same.

    with torch.openreg.command_costs() as costs:
        train_step()
    print(costs.table())

The profile is daemon-wide (every session's commands count) and costs the
daemon about a microsecond per command while it runs.
"""

import json

from torch_openreg import _C

__all__ = ["CommandCosts", "command_costs"]

# protos/control.proto, CostProfileRequest.Action.
_READ, _START, _STOP, _RESET = 0, 1, 2, 3
STAGES = ("read", "wait", "hook", "settings", "decode", "kernel", "reply",
          "complete")


def _ints(entry, text=("op",)):
    return {key: value if key in text else int(value)
            for key, value in entry.items()}


class CommandCosts:
    """A read of the profile: `ops`, `streams` and `executors` (lists of
    dicts with nanosecond totals), `seconds` counted, `enabled`."""

    def __init__(self, reply):
        self.enabled = bool(reply.get("enabled", False))
        self.seconds = float(reply.get("seconds", 0.0))
        self.ops = [_ints(op) for op in reply.get("ops", [])]
        self.streams = [_ints(stream) for stream in reply.get("streams", [])]
        self.executors = [_ints(executor)
                          for executor in reply.get("executors", [])]
        # The daemon's threads by role ("executors", "openmp_workers" of a
        # device's executors, "other": device -1) and their CPU.
        self.thread_groups = [_ints(group, text=("role",))
                              for group in reply.get("thread_groups", [])]

    def commands(self):
        return sum(op["count"] for op in self.ops)

    def synchronous_launches(self):
        """Launches the client waited for."""
        return sum(op["synchronous"] for op in self.ops)

    def stage_totals(self):
        """Nanoseconds per stage over every command."""
        return {stage: sum(op[f"{stage}_ns"] for op in self.ops)
                for stage in STAGES}

    def thread_cpu_ns(self, role=None):
        """The CPU nanoseconds of the daemon's threads of `role` (all
        threads when None), every device."""
        return sum(group["cpu_ns"] for group in self.thread_groups
                   if role is None or group["role"] == role)

    def table(self, top=20):
        """The most expensive ops, microseconds per command by stage."""
        rows = sorted(self.ops, key=lambda op: -sum(
            op[f"{stage}_ns"] for stage in STAGES))[:top]
        header = f"{'op':36} {'dev':>3} {'count':>7} {'sync':>5} " + \
            " ".join(f"{stage:>8}" for stage in STAGES) + \
            f" {'threads':>7} {'fewer':>5}"
        lines = [f"{self.commands()} commands in {self.seconds:.3f} s; "
                 "microseconds per command:", header]
        for op in rows:
            count = max(op["count"], 1)
            lines.append(
                f"{op['op'][:36]:36} {op['device']:>3} {op['count']:>7} "
                f"{op['synchronous']:>5} " +
                " ".join(f"{op[f'{stage}_ns'] / count / 1e3:8.2f}"
                         for stage in STAGES) +
                f" {op['kernel_threads']:>7} {op['fewer_threads']:>5}")
        for stream in self.streams:
            lines.append(
                f"stream {stream['stream']} of pid {stream['pid']} "
                f"(openreg:{stream['device']}): {stream['commands']} "
                f"commands, {stream['slices']} slices, {stream['parks']} "
                f"parks, {stream['rung_wakes']} rung wakes, "
                f"{stream['periodic_wakes']} periodic wakes, spun "
                f"{stream['spin_ns'] / 1e6:.2f} ms "
                f"({stream['spins_with_work']} found work)")
        for executor in self.executors:
            lines.append(
                f"executor {executor['executor']} of openreg:"
                f"{executor['device']}: busy {executor['busy_ns'] / 1e6:.2f} "
                f"ms in {executor['slices']} slices, {executor['sleeps']} "
                f"sleeps ({executor['timeouts']} timed out), CPU "
                f"{executor['cpu_ns'] / 1e6:.2f} ms")
        for group in self.thread_groups:
            where = (f" of openreg:{group['device']}"
                     if group["device"] >= 0 else "")
            lines.append(
                f"{group['role']}{where}: {group['threads']} threads, CPU "
                f"{group['cpu_ns'] / 1e6:.2f} ms")
        return "\n".join(lines)

    def __repr__(self):
        return (f"CommandCosts({self.commands()} commands, "
                f"{self.seconds:.3f} s)")


def _call(action):
    return CommandCosts(json.loads(_C._cost_profile(action)))


class command_costs:  # noqa: N801 - used like torch.profiler.profile
    """Starts (and resets) the daemon's cost profile for the block, then
    synchronizes every device, reads the profile into `self.result` and
    stops it. Also usable without `with`: start(), read(), stop()."""

    def __init__(self):
        self.result = None

    @staticmethod
    def start():
        return _call(_START)

    @staticmethod
    def read():
        return _call(_READ)

    @staticmethod
    def reset():
        return _call(_RESET)

    @staticmethod
    def stop():
        return _call(_STOP)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        import torch
        for device in range(torch.openreg.device_count()):
            torch.openreg.synchronize(device)
        self.result = self.stop()
        return False

    # The read's attributes, once the block ended.
    def __getattr__(self, name):
        result = self.__dict__.get("result")
        if result is None:
            raise AttributeError(
                f"command_costs has no attribute {name!r} (read it after "
                "the `with` block, or call read())")
        return getattr(result, name)
