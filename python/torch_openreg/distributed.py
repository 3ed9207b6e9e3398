"""`torch.distributed` on openreg: the `occl` c10d backend, whose
collectives run inside the daemon over every rank's device memory
(docs/DISTRIBUTED.md).

Registered at autoload (`install()`): `init_process_group(backend="occl")`
names it, and `init_process_group()` with no backend on an openreg machine
picks it for openreg tensors and gloo for CPU tensors (the mapping
`cpu:gloo,openreg:occl`, as a CUDA machine gets `cpu:gloo,cuda:nccl`).

Group formation (the creator below), through the group's c10d store only:
every rank publishes which daemon it reaches (host name and socket path);
the ranks of each daemon share a communicator id written by their first
rank; when the group spans several daemons (hosts), those first ranks also
form a gloo group among themselves."""

import os
import secrets
import socket

NAME = "occl"


def _daemon_identity():
    """Which daemon this process reaches: its host and control socket."""
    from torch_openreg import _C
    return f"{socket.gethostname()}:{os.path.realpath(_C._daemon_socket_path())}"


def _create_backend(options, _backend_options):
    """c10d's extended-API creator: `options` is c10d's
    _DistributedBackendOptions (the group's prefixed store, rank, size,
    timeout)."""
    return _form_group(options.store, options.group_rank, options.group_size,
                       options.timeout)


def _form_group(store, rank, size, timeout):
    """A ProcessGroupOCCL of `size` ranks meeting through `store` (a new
    group's, or a split's: ProcessGroupOCCL::split calls this)."""
    import torch.distributed as distributed
    from torch_openreg import _C

    _C._occl_init(_form_group)
    store.set(f"occl/daemon/{rank}", _daemon_identity())
    # The flight recorder names ranks as the job does: by global rank (the
    # default group's, which is being formed when none exists yet).
    store.set(f"occl/global/{rank}", str(
        distributed.get_rank() if distributed.is_initialized() else rank))
    daemons = [store.get(f"occl/daemon/{r}").decode() for r in range(size)]
    global_ranks = [int(store.get(f"occl/global/{r}")) for r in range(size)]
    hosts = list(dict.fromkeys(daemons))  # by first rank
    host_of_rank = [hosts.index(daemon) for daemon in daemons]
    local = [r for r in range(size) if host_of_rank[r] == host_of_rank[rank]]
    first = local[0]
    if rank == first:
        store.set(f"occl/communicator/{first}", secrets.token_hex(16))
    comm_id = store.get(f"occl/communicator/{first}").decode()
    leaders = everyone = None
    if len(hosts) > 1:
        if rank == first:
            leaders = distributed.ProcessGroupGloo(
                distributed.PrefixStore("occl/leaders", store),
                host_of_rank[rank], len(hosts), timeout)
        # send/recv between ranks of different daemons.
        everyone = distributed.ProcessGroupGloo(
            distributed.PrefixStore("occl/everyone", store), rank, size,
            timeout)
    return _C.ProcessGroupOCCL(rank, size, timeout, comm_id,
                               local.index(rank), len(local), host_of_rank,
                               leaders, everyone, global_ranks)


def flight_recorder_traces(pid=None):
    """The flight recorder's traces of this process's job (every rank on
    this daemon of every group this process shares with them), or of the
    job of rank process `pid`: {global rank: bytes}, each in the pickle
    format of PyTorch's flight recorder (docs/DISTRIBUTED.md)."""
    from torch_openreg import _C
    return _C._occl_flight_recorder_traces(pid or 0)


def dump_flight_recorder(prefix=None, pid=None):
    """Writes flight_recorder_traces() to `prefix`<global rank> (default:
    $TORCH_FR_DUMP_TEMP_FILE, else /tmp/nccl_trace_rank_), as NCCL's
    flight recorder names its dumps; returns the paths. Read them with
    `python -m torch.distributed.flight_recorder.fr_trace FOLDER`."""
    from torch_openreg import _C
    prefix = prefix or _C._occl_flight_recorder_prefix()
    paths = []
    for rank, trace in sorted(flight_recorder_traces(pid).items()):
        path = f"{prefix}{rank}"
        partial = f"{path}.partial.{os.getpid()}"
        with open(partial, "wb") as file:
            file.write(trace)
        os.replace(partial, path)
        paths.append(path)
    return paths


def _default_to_gloo_for_cpu(distributed):
    """torch 2.13 maps an undefined backend to the accelerator's backend
    only; CPU tensors (object collectives, barriers on CPU, metrics) then
    have no backend. Add gloo for them, as CUDA machines have it."""
    config_class = distributed.distributed_c10d.BackendConfig
    if getattr(config_class, "_openreg_cpu_default", False):
        return
    original_init = config_class.__init__

    def init(self, backend):
        original_init(self, backend)
        undefined = str(backend) == distributed.Backend.UNDEFINED
        mapping = self.device_backend_map
        if (undefined and mapping.get("openreg") == NAME
                and "cpu" not in mapping and distributed.is_gloo_available()):
            mapping["cpu"] = distributed.Backend("gloo")

    config_class.__init__ = init
    config_class._openreg_cpu_default = True


def install():
    """Registers the backend with torch.distributed (once)."""
    import torch.distributed as distributed

    if not distributed.is_available():
        return
    if NAME.upper() not in distributed.Backend._plugins:
        distributed.Backend.register_backend(
            NAME, _create_backend, extended_api=True, devices=["openreg"])
    _default_to_gloo_for_cpu(distributed)
