"""`torch.distributed` on openreg: the `occl` c10d backend, whose
collectives run inside the daemon over every rank's device memory
(docs/DISTRIBUTED.md).

Registered at autoload (`install()`): `init_process_group(backend="occl")`
names it, and `init_process_group()` with no backend on an openreg machine
picks it for openreg tensors and gloo for CPU tensors (the mapping
`cpu:gloo,openreg:occl`, as a CUDA machine gets `cpu:gloo,cuda:nccl`)."""

NAME = "occl"


def _create_backend(options, _backend_options):
    """c10d's extended-API creator: `options` is c10d's
    _DistributedBackendOptions (the group's prefixed store, rank, size,
    timeout)."""
    from torch_openreg import _C
    _C._occl_init()
    return _C.ProcessGroupOCCL(options.store, options.group_rank,
                               options.group_size, options.timeout)


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
