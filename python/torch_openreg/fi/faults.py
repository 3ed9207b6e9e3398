"""The fault of each run: one dynamic command instance drawn uniformly from
the golden run's command profile (restricted by --kind, --op, --device,
--phase), and a FaultSpec (protos/faults.proto) that fires at exactly that
instance: its trigger filters on the instance's group and counts to it
with `nth`.

Run i's choices come from a generator seeded with the campaign seed and i
only, so a run's fault never depends on which runs came before it (a
resumed or replayed run gets the same fault).
"""

import bisect
import fnmatch
import random

from torch_openreg.fi.config import (OP_KINDS, ConfigError, corruption_models,
                                     model_kind)

__all__ = ["Population", "fault_for_run", "op_matches", "populations",
           "read_profile", "run_rng"]


def read_profile(reply):
    """The counts of a GetCommandProfileReply JSON (openreg-ctl profile
    --json) as dicts with an int `count` (uint64 is a JSON string)."""
    counts = [{"device": int(entry.get("device", 0)),
               "kind": entry.get("kind", ""),
               "op": entry.get("op", ""),
               "phase": entry.get("phase", ""),
               "count": int(entry.get("count", 0))}
              for entry in reply.get("counts", [])]
    return sorted(counts, key=lambda entry: (
        entry["device"], entry["kind"], entry["op"], entry["phase"]))


def op_matches(patterns, op):
    """Whether `op` ("aten::add.Tensor", "occl::all_reduce") matches one of
    the patterns: an exact name, a name without overload ("aten::add"), a
    collective's bare name ("all_reduce") or a glob."""
    return any(fnmatch.fnmatchcase(op, pattern) or
               op.partition(".")[0] == pattern or op == f"occl::{pattern}"
               for pattern in patterns)


class Population:
    """The dynamic instances a campaign's faults of one kind ("any": every
    command) may hit, grouped as a trigger can address them: (device, kind,
    op, phase) for kernels and collectives, (device, kind, phase) for other
    commands (which have no op). In a job whose ranks each use their own
    device (torchrun's local rank), the device is the rank: every fault
    hits one rank."""

    def __init__(self, profile, kind, ops=None, device=None, phase=None):
        groups = {}
        for entry in profile:
            if kind not in (entry["kind"], "any") or entry["count"] <= 0:
                continue
            if device is not None and entry["device"] != device:
                continue
            if phase is not None and entry["phase"] != phase:
                continue
            if ops is not None and not op_matches(ops, entry["op"]):
                continue
            op = entry["op"] if kind in OP_KINDS else ""
            key = (entry["device"], kind, op, entry["phase"])
            groups[key] = groups.get(key, 0) + entry["count"]
        self.groups = sorted(groups.items())
        self.cumulative = []
        total = 0
        for _, count in self.groups:
            total += count
            self.cumulative.append(total)
        self.total = total

    def draw(self, rng):
        """A uniformly drawn instance as a trigger dict."""
        index = rng.randrange(self.total)
        group = bisect.bisect_right(self.cumulative, index)
        before = self.cumulative[group - 1] if group else 0
        (device, kind, op, phase), _ = self.groups[group]
        trigger = {"kind": kind, "device": device}
        if op:
            trigger["op"] = op
        if phase:
            trigger["phase"] = phase
        trigger["nth"] = index - before + 1
        return trigger


def populations(config, profile):
    """model -> Population for the campaign's models; raises ConfigError if
    one is empty."""
    result = {}
    for model in config["models"]:
        kind = model_kind(model, config["kind"])
        population = Population(profile, kind, config["ops"],
                                config["device"], config["phase"])
        if population.total == 0:
            raise ConfigError(_narrowest_flag(config), (
                f"the golden run has no {kind} command matching "
                f"{_describe(config)} for {model}; its profile has "
                f"{_summary(profile)}"))
        result[model] = population
    return result


def _narrowest_flag(config):
    for key, flag in (("ops", "--op"), ("phase", "--phase"),
                      ("device", "--device"), ("kind", "--kind")):
        if config[key] is not None:
            return flag
    return "--model"


def _describe(config):
    parts = [f"{flag} {config[key] if key != 'ops' else ','.join(config[key])}"
             for key, flag in (("ops", "--op"), ("phase", "--phase"),
                               ("device", "--device"))
             if config[key] is not None]
    return " ".join(parts) or "any filter"


def _summary(profile):
    kinds = {}
    for entry in profile:
        kinds[entry["kind"]] = kinds.get(entry["kind"], 0) + entry["count"]
    ops = sorted({entry["op"] for entry in profile if entry["op"]})
    shown = ", ".join(ops[:12]) + (", ..." if len(ops) > 12 else "")
    counts = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    return f"{counts or 'no commands'} (ops: {shown or 'none'})"


def run_rng(seed, index):
    return random.Random(f"openreg-fi:{seed}:{index}")


def _model_message(model, config, rng):
    message = {}
    if model in corruption_models([model]):
        message = {"pattern": config["pattern"],
                   "bit_count": config["bit_count"]}
        if config["bits"] is not None:
            message["min_bit"], message["max_bit"] = config["bits"]
    elif model == "stuck_at":
        low, high = config["bits"] or (0, 31)
        message = {"bit": rng.randint(low, high), "value": rng.randint(0, 1)}
    message.update(config["model_args"].get(model, {}))
    return message


def fault_for_run(config, pools, index):
    """The FaultSpec dict of run `index` (pools: populations())."""
    rng = run_rng(config["seed"], index)
    model = config["models"][index % len(config["models"])]
    trigger = pools[model].draw(rng)
    return {"name": f"run {index}",
            # 53 bits: exact as a JSON number.
            "seed": rng.getrandbits(53),
            "daemon_wide": True,
            "trigger": trigger,
            model: _model_message(model, config, rng)}
