"""torch.openreg.faults: inject faults into the openreg device.

    import torch
    from torch.openreg import faults

    # Flip bit 30 of one element of the 3rd aten::mm's output (seeded).
    with faults.inject(faults.corrupt_output(bits=[30]), op="aten::mm", nth=3,
                       seed=1):
        y = model(x)
    for record in faults.log():
        print(record.command, record.element, record.value_before,
              "->", record.value_after)

A fault is a model (what happens: corrupt_output, kernel_failure, sticky,
device_fault, hang, ...) plus a trigger (when: op, phase, device, stream,
nth / after / every, probability, time window, times) and a seed. Faults
armed here affect only this process's session unless ``daemon_wide=True``.
The same specs are the JSON plan-file schema (protos/faults.proto); see
docs/FAULT_INJECTION.md for every model and its real-hardware counterpart.
"""

import contextlib
import dataclasses
import json
import os

import torch

from torch_openreg import _C

__all__ = [
    "FaultRecord",
    "allocation_failure",
    "arm",
    "arm_plan",
    "command_profile",
    "copy_failure",
    "corrected_error",
    "corrupt_copy",
    "corrupt_input",
    "corrupt_memory",
    "corrupt_output",
    "daemon_abort",
    "device_fault",
    "device_lost",
    "disarm",
    "disconnect",
    "hang",
    "inject",
    "kernel_failure",
    "list",
    "log",
    "reset_device",
    "slow",
    "sticky",
    "stuck_at",
]

_builtin_list = list


def _model(name, **fields):
    return {name: {key: value for key, value in fields.items()
                   if value is not None}}


# ---- Models: each returns the model part of a fault spec. -------------------
def corrupt_output(pattern="bit_flip", *, bit_count=None, burst=None,
                   bits=None, min_bit=None, max_bit=None, element=None,
                   elements=None, output=None):
    """Silent data corruption of a kernel's output: flip `bit_count` bits
    (adjacent with `burst`) drawn from [min_bit, max_bit], or exactly
    `bits`; or replace the element with a random value ("random_value") or
    zero ("zero"). `element` (flat index) and `output` are random unless
    given; `elements` neighbouring elements are hit. On a collective
    (kind="collective"): what it delivered to the rank, which alone sees
    the corruption."""
    return _model("corrupt_output", pattern=pattern, bit_count=bit_count,
                  burst=burst, bits=bits, min_bit=min_bit, max_bit=max_bit,
                  element=element, elements=elements, output=output)


def corrupt_input(pattern="bit_flip", *, input=None, **fields):
    """Corruption of a kernel's input: one of its tensor arguments (the
    `input`th, random when None) is corrupted in device memory just before
    the kernel reads it. Other fields as corrupt_output. On a collective
    (kind="collective"): the rank's contribution, in its memory, before
    the collective reads it (every rank receives the corrupted result)."""
    return _model("corrupt_input", pattern=pattern, input=input, **fields)


def corrupt_copy(pattern="bit_flip", **fields):
    """Corruption of a copy's destination (a 64-bit word of it)."""
    return _model("corrupt_copy", pattern=pattern, **fields)


def corrupt_memory(pattern="bit_flip", **fields):
    """A flip in memory at rest: a 64-bit word of a live allocation of this
    session on the command's device, between commands (a DRAM error)."""
    return _model("corrupt_memory", pattern=pattern, **fields)


def stuck_at(bit, value, *, element=None, address=None, bytes=None,
             word_bytes=None):
    """A permanent stuck bit: in the `element` of every matching kernel's
    outputs (a bad device), or, with `address`/`bytes`, in every word of a
    device memory range. Fires always unless `times` is given."""
    return _model("stuck_at", bit=bit, value=value, element=element,
                  address=address, bytes=bytes, word_bytes=word_bytes)


def kernel_failure(message=None):
    """The kernel fails to launch (cudaErrorLaunchFailure): raised at the
    next synchronizing call, like an asynchronous CUDA error."""
    return _model("kernel_failure", message=message)


def copy_failure(message=None):
    return _model("copy_failure", message=message)


def allocation_failure(message=None):
    """The allocation fails: the program sees torch.OutOfMemoryError."""
    return _model("allocation_failure", message=message)


def sticky(error="illegal_address"):
    """A context-corrupting error (illegal_address or ecc_uncorrectable):
    every later call of this process fails with it until it exits."""
    return _model("sticky", error=error)


def device_fault():
    """The device enters the FAULT state for every session until
    reset_device(); memory held on it is lost."""
    return {"device_fault": {}}


def device_lost():
    return {"device_lost": {}}


def daemon_abort():
    return {"daemon_abort": {}}


def disconnect():
    """The daemon drops this session (as if the connection broke). On a
    collective: the rank drops out of it, as if its process had died; the
    other ranks' collective fails naming it."""
    return {"disconnect": {}}


def hang(seconds=0.0):
    """The command never completes (0) or takes `seconds`: pair with
    torch.openreg.set_sync_timeout to turn the hang into an error. On a
    collective: the rank never joins it (for `seconds`); the others fail
    at the group's timeout, naming it."""
    return _model("hang", seconds=seconds)


def slow(delay_seconds=None, factor=None):
    """A straggler: each matching command delayed and/or stretched. On a
    collective: the rank joins `delay_seconds` late; the others wait."""
    return _model("slow", delay_seconds=delay_seconds, factor=factor)


def corrected_error():
    """A corrected (ECC single-bit) error: counted, no effect on data."""
    return {"corrected_error": {}}


# ---- Arming ----------------------------------------------------------------
_TRIGGER_FIELDS = ("device", "pid", "stream", "kind", "op", "phase", "output",
                   "input",
                   "nth", "after", "every", "probability",
                   "window_start_seconds", "window_end_seconds", "times",
                   "group", "rank", "collective_number")


def _spec(model, seed, name, daemon_wide, trigger):
    if not isinstance(model, dict) or len(model) != 1:
        raise TypeError("model must be one of the model functions' results, "
                        f"e.g. faults.kernel_failure(); got {model!r}")
    unknown = set(trigger) - set(_TRIGGER_FIELDS)
    if unknown:
        raise TypeError(f"unknown trigger field(s) {sorted(unknown)}; "
                        f"known: {', '.join(_TRIGGER_FIELDS)}")
    if "device" in trigger and not isinstance(trigger["device"], int):
        trigger["device"] = torch.device(trigger["device"]).index or 0
    spec = dict(model)
    spec["seed"] = seed
    if name:
        spec["name"] = name
    if daemon_wide:
        spec["daemon_wide"] = True
    spec["trigger"] = {k: v for k, v in trigger.items() if v is not None}
    return spec


def arm(model, *, seed=0, name=None, daemon_wide=False, **trigger):
    """Arms one fault; returns its id. `trigger` fields: device, pid,
    stream, kind, op, phase, output, nth, after, every, probability,
    window_start_seconds, window_end_seconds, times (default 1, 0 =
    always); for kind="collective" also group (a process group's name or
    description), rank (in that group) and collective_number (#N in
    occl's errors). Raises ValueError naming a bad field (nothing is
    armed).

        faults.arm(faults.corrupt_input(bits=[30]), kind="collective",
                   op="all_reduce", rank=1, phase="backward")
    """
    spec = _spec(model, seed, name, daemon_wide, dict(trigger))
    return arm_plan({"faults": [spec]})[0]


def arm_plan(plan):
    """Arms a whole plan (a dict, a JSON string or a path to a plan file):
    all faults or none. Returns their ids."""
    if isinstance(plan, (str, os.PathLike)) and os.path.exists(plan):
        with open(plan) as f:
            text = f.read()
    elif isinstance(plan, str):
        text = plan
    else:
        text = json.dumps(plan)
    return _C._arm_faults(text)


def disarm(ids=None):
    """Disarms this process's faults `ids` (an id, a list; all when None).
    Returns how many were disarmed."""
    if ids is None:
        ids = []
    elif isinstance(ids, int):
        ids = [ids]
    return _C._disarm_faults(_builtin_list(ids))


def vocabulary():
    """The words plans use, from protos/faults.proto: {"kinds", "phases",
    "patterns", "sticky_errors": [...], "models": [{"name", "kind"}, ...]}
    (each model with the command kind it acts on; "any": every kind)."""
    return json.loads(_C._fault_plan_vocabulary())


def list():  # noqa: A001 - mirrors the CLI's `fault list`
    """Every armed fault in the daemon: dicts with id, spec, session_id,
    matches and fired."""
    faults = json.loads(_C._list_faults()).get("faults", [])
    for fault in faults:
        for key in ("session_id", "matches", "fired"):
            fault[key] = int(fault.get(key, 0))
    return faults


@contextlib.contextmanager
def inject(model, **kwargs):
    """Arms a fault for the duration of the block (see arm()); yields its
    id. The devices are synchronized before the fault is armed, so work
    queued before the block never sees it (a launch still queued when the
    fault is armed would be its first match), and before it is disarmed,
    so asynchronous kernels inside the block see it. An error of earlier
    work is raised at the block's entry, as by torch.openreg.synchronize()."""
    for index in range(torch.openreg.device_count()):
        _C._synchronize(index)
    fault_id = arm(model, **kwargs)
    try:
        yield fault_id
    finally:
        try:
            for index in range(torch.openreg.device_count()):
                _C._synchronize(index)
        except Exception:  # noqa: BLE001 - the block's error wins
            pass
        finally:
            try:
                disarm(fault_id)
            except Exception:  # noqa: BLE001 - e.g. a dropped session
                pass


@dataclasses.dataclass
class FaultRecord:
    """One firing, as the daemon logged it."""
    index: int
    fault_id: int
    fault_name: str
    model: str
    time: float
    pid: int
    session_id: int
    device: int
    stream: int
    sequence: int
    command: str
    phase: str
    output: int
    element: int
    bits: _builtin_list
    dtype: str
    value_before: str
    value_after: str
    message: str
    match: int
    input: int
    group: str = ""  # collectives: the process group's name
    rank: int = -1   # collectives: the rank hit, else -1


def log(since=0):
    """The daemon's fault log from record `since` on (all sessions)."""
    reply = json.loads(_C._fault_log(int(since)))
    records = []
    for raw in reply.get("records", []):
        fields = {}
        for field in dataclasses.fields(FaultRecord):
            value = raw.get(field.name)
            if field.type in (int, "int"):
                value = int(value or 0)
            elif field.name == "bits":
                value = [int(bit) for bit in (value or [])]
            elif field.type in (float, "float"):
                value = float(value or 0)
            else:
                value = value or ""
            fields[field.name] = value
        records.append(FaultRecord(**fields))
    return records


def reset_device(device, force=False):
    """Brings a device back from the FAULT or lost state, as `openreg-ctl
    device reset N`. Memory held on it is lost: tensors allocated before
    fail at their next use. A healthy device on which sessions hold memory
    is refused (ValueError naming them) unless `force`, as nvidia-smi -r
    refuses a GPU in use. Returns the sessions whose memory the reset lost:
    dicts with session_id, pid and bytes."""
    index = device if isinstance(device, int) else torch.device(device).index
    reply = json.loads(_C._reset_device(int(index or 0), bool(force)))
    # This process's cached free blocks were on the device: give them back
    # rather than hand out lost memory.
    torch.openreg.empty_cache()
    return [{key: int(value) for key, value in affected.items()}
            for affected in reply.get("affected", [])]


def command_profile():
    """The daemon's command profile (openreg-daemon --profile_commands):
    dicts with device, kind, op, phase, count. Empty when profiling is
    off."""
    reply = json.loads(_C._command_profile())
    counts = reply.get("counts", [])
    for entry in counts:
        entry["count"] = int(entry.get("count", 0))
    return counts


def _install_phase_hooks():
    """Marks optimizer steps so that their commands carry the "optimizer"
    phase (backward is known from the autograd engine)."""
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(
        lambda *args: _C._set_in_optimizer_step(True))
    register_optimizer_step_post_hook(
        lambda *args: _C._set_in_optimizer_step(False))
