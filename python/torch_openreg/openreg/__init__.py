"""torch.openreg: the device module of the daemon-backed openreg device,
shaped like torch.cuda."""

import json

import torch

from torch_openreg import _C

# The submodules' names (memory, random, streams, amp) are added at the end.
__all__ = [
    "OutOfMemoryError",
    "can_device_access_peer",
    "current_device",
    "daemon_stats",
    "device",
    "device_count",
    "device_of",
    "get_arch_list",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_sync_debug_mode",
    "get_sync_timeout",
    "init",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "set_device",
    "set_sync_debug_mode",
    "set_sync_timeout",
    "synchronize",
    "utilization",
]


# As torch.cuda.OutOfMemoryError: what a failed device allocation raises.
OutOfMemoryError = torch.OutOfMemoryError


def _index(device):
    """Index of `device` (int, str, torch.device or None = current)."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "openreg":
        raise ValueError(f"expected an openreg device, got {device}")
    return _C._current_device() if device.index is None else device.index


def is_available():
    """True when a daemon answers (connecting or spawning one if needed)."""
    return _C._is_available()


def is_initialized():
    """True once this process has attached to a daemon."""
    return _C._is_connected()


def init():
    """Connects to the daemon now instead of at first use."""
    _C._init()


def device_count():
    """Number of devices the daemon exposes; 0 when none is reachable."""
    return _C._device_count() if _C._is_available() else 0


def current_device():
    return _C._current_device()


def set_device(device):
    _C._set_device(_index(device))


def synchronize(device=None):
    """Waits for all work submitted to `device` (default: current)."""
    _C._synchronize(_index(device))


def set_sync_timeout(seconds):
    """A watchdog for hung devices: synchronizing calls (synchronize,
    stream and event synchronization, copies to the host, ``.item()``)
    that wait longer than `seconds` raise RuntimeError naming the stream
    and the last command it completed, instead of waiting forever. 0 (the
    default, or $OPENREG_SYNC_TIMEOUT) waits as long as the daemon lives.
    Process-wide."""
    _C._set_sync_timeout(float(seconds))


def get_sync_timeout():
    """The sync timeout in seconds; 0 when there is none."""
    return _C._get_sync_timeout()


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode):
    """As torch.cuda.set_sync_debug_mode: "warn" (or 1) makes every call
    that waits for the device issue a UserWarning, "error" (or 2) makes it
    raise RuntimeError, "default" (or 0) turns the check off. A wait costs
    a daemon round trip here, so hidden ones are worth finding.

    What counts: copies to the host that wait (``.item()``, ``.cpu()``,
    ``.tolist()``, ``copy_`` to a CPU tensor), blocking copies with pinned
    memory, ``Stream.synchronize()``, and ops the daemon must run before
    the call returns (output shapes that depend on the data, such as
    ``nonzero`` and ``masked_select``). As on CUDA, ``synchronize()`` and
    ``Event.synchronize()`` do not count. Process-wide."""
    if isinstance(debug_mode, bool) or not isinstance(debug_mode, (int, str)):
        raise TypeError(
            "set_sync_debug_mode: expected one of \"default\", \"warn\", "
            f"\"error\" or 0, 1, 2; got {type(debug_mode).__name__}")
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise ValueError(
                f"set_sync_debug_mode: invalid mode {debug_mode!r}; expected "
                "one of \"default\", \"warn\", \"error\" (or 0, 1, 2)")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    elif debug_mode not in (0, 1, 2):
        raise ValueError(
            f"set_sync_debug_mode: invalid mode {debug_mode}; expected one "
            "of 0 (\"default\"), 1 (\"warn\"), 2 (\"error\")")
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode():
    """The sync debug mode as torch.cuda's returns it: 0 (default), 1
    (warn) or 2 (error)."""
    return _C._get_sync_debug_mode()


class device:
    """Context manager that changes the current openreg device."""

    def __init__(self, device):
        self.index = _index(device) if device is not None else -1
        self.previous = -1

    def __enter__(self):
        if self.index >= 0:
            self.previous = _C._current_device()
            if self.previous != self.index:
                _C._set_device(self.index)
        return self

    def __exit__(self, *exc):
        if self.index >= 0 and self.previous != self.index:
            _C._set_device(self.previous)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor or
    storage) current; does nothing for an object not on openreg."""

    def __init__(self, obj):
        on_openreg = obj.device.type == "openreg"
        super().__init__(obj.get_device() if on_openreg else None)


def can_device_access_peer(device, peer_device):
    """True for any two devices of the daemon: copies between them run
    in the daemon, which holds every device's memory (as torch.cuda's,
    invalid indices raise)."""
    count = device_count()
    index, peer = _index(device), _index(peer_device)
    if not 0 <= index < count:
        raise ValueError(f"can_device_access_peer: invalid device {index}; "
                         f"the daemon has {count} device(s)")
    if not 0 <= peer < count:
        raise ValueError(f"can_device_access_peer: invalid peer device "
                         f"{peer}; the daemon has {count} device(s)")
    return True


def get_arch_list():
    """One name per distinct capability of the daemon's devices,
    "openreg_<major><minor>" (as torch.cuda's lists "sm_<major><minor>"
    names); [] when no daemon is reachable. openreg kernels are the
    daemon's ATen CPU kernels, so there is no binary per architecture."""
    names = []
    for index in range(device_count()):
        major, minor = get_device_capability(index)
        name = f"openreg_{major}{minor}"
        if name not in names:
            names.append(name)
    return names


class _DeviceProperties:
    def __init__(self, values):
        self.name = values["name"]
        self.total_memory = values["total_memory"]
        self.multi_processor_count = values["multi_processor_count"]
        self.major = values["major"]
        self.minor = values["minor"]

    def __repr__(self):
        return (f"_OpenRegDeviceProperties(name='{self.name}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None):
    return _DeviceProperties(_C._get_device_properties(_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    """(major, minor) capability of `device` (default: current), as
    torch.cuda.get_device_capability returns it."""
    properties = get_device_properties(device)
    return properties.major, properties.minor


def is_bf16_supported(including_emulation=True):
    """True when a device is available: the daemon runs bfloat16 with ATen's
    CPU kernels on every device, so there is no capability cut-off as on
    CUDA (`including_emulation` is accepted for compatibility)."""
    del including_emulation
    return is_available()


def _counters(entry, text=()):
    """`entry` of the stats JSON with its 64-bit counters as ints (they
    arrive as strings); the fields in `text`, and numbers, are kept."""
    return {key: int(value) if isinstance(value, str) and key not in text
            else value for key, value in entry.items()}


def _communicator(entry):
    """A communicator of the stats JSON: its members and, for each pending
    collective (or send/recv pair), which ranks joined it how many seconds
    ago and which are missing."""
    pending = []
    for waiting in entry.get("pending", []):
        pending.append({
            "number": int(waiting["number"]),
            "operation": waiting["operation"],
            "joined": dict(zip(waiting["joined_ranks"],
                               waiting["joined_seconds_ago"])),
            "missing": list(waiting["missing_ranks"]),
            **({"from_rank": waiting["from_rank"],
                "to_rank": waiting["to_rank"]}
               if waiting["transfer"] else {}),
        })
    return {"id": entry["id"], "size": entry["size"],
            "timeout_seconds": entry["timeout_seconds"],
            "aborted": entry["aborted"],
            "members": [dict(member) for member in entry.get("members", [])],
            "pending": pending}


def utilization(device=None):
    """Percent of the last second during which the device ran a stream, as
    torch.cuda.utilization: measured by the daemon (openreg-smi's
    utilization.gpu), so every client's work counts."""
    index = memory._checked_index(device)
    return round(daemon_stats()["devices"][index]["utilization_percent"])


def daemon_stats():
    """Daemon-wide statistics: per-device memory and kernel counters, the
    attached sessions, shared allocations, and the communicators of
    torch.distributed's occl groups with their pending collectives."""
    reply = json.loads(_C._daemon_stats())
    devices = []
    for device in reply.get("devices", []):
        entry = _counters(device, text=("state", "faults_fired", "name"))
        entry["faults_fired"] = _counters(entry["faults_fired"])
        devices.append(entry)
    return {
        "devices": devices,
        "sessions": [_counters(session)
                     for session in reply.get("sessions", [])],
        "sessions_served": int(reply.get("sessions_served", 0)),
        "shared": [_counters(shared) for shared in reply.get("shared", [])],
        "communicators": [_communicator(communicator) for communicator
                          in reply.get("communicators", [])],
    }


# Used by torch for the device module's lazy initialisation protocol.
def _lazy_init():
    pass


def _is_in_bad_fork():
    """True in a child forked from a process that used the device: the
    device cannot be used there (start children with 'spawn')."""
    return _C._is_in_bad_fork()


# Imported last: the submodules use the helpers above.
from torch_openreg.openreg import amp  # noqa: E402
from torch_openreg.openreg import faults  # noqa: E402
from torch_openreg.openreg.costs import command_costs  # noqa: E402
from torch_openreg.openreg.ipc import ipc_collect  # noqa: E402
from torch_openreg.openreg import graphs  # noqa: E402
from torch_openreg.openreg import memory, random, streams  # noqa: E402
from torch_openreg.openreg import tensor_types  # noqa: E402
from torch_openreg.openreg.amp import get_amp_supported_dtype  # noqa: E402
from torch_openreg.openreg.graphs import *  # noqa: E402,F401,F403
from torch_openreg.openreg.memory import *  # noqa: E402,F401,F403
from torch_openreg.openreg.random import *  # noqa: E402,F401,F403
from torch_openreg.openreg.streams import *  # noqa: E402,F401,F403
from torch_openreg.openreg.tensor_types import *  # noqa: E402,F401,F403

__all__ += ["amp", "command_costs", "faults", "get_amp_supported_dtype",
            "ipc_collect"]
__all__ += graphs.__all__ + memory.__all__ + random.__all__ + streams.__all__
__all__ += tensor_types.__all__
