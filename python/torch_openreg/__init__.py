"""openreg: an emulated PyTorch accelerator whose device runs in a daemon.

`import torch` loads this package through the `torch.backends` entry point
(set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to disable). Loading registers the
`openreg` device with PyTorch; it never contacts the daemon. The first real
device use connects to the daemon on $OPENREG_DAEMON_SOCKET (or the default
socket), spawning one unless OPENREG_AUTOSPAWN=0.
"""

import os
import warnings

__all__ = ["block_op", "blocked_ops", "ctl_binary", "daemon_binary",
           "smi_binary", "unblock_op"]
from torch_openreg._version import __version__

_loaded = False


def daemon_binary():
    """Path of the packaged openreg-daemon binary."""
    return os.environ.get(
        "OPENREG_DAEMON_BINARY",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                     "openreg-daemon"))


def ctl_binary():
    """Path of the packaged openreg-ctl binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                        "openreg-ctl")


def smi_binary():
    """Path of the packaged openreg-smi binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                        "openreg-smi")


def block_op(name):
    """Makes `name` ("aten::add" for every overload, "aten::add.Tensor" for
    one) raise NotImplementedError "... is not implemented for openreg"
    instead of running on the device. $OPENREG_BLOCKED_OPS (comma-separated)
    is read at the first check. Ops with an explicit openreg kernel (tensor
    creation, copies, views) are never blocked."""
    from torch_openreg import _C
    _C._block_op(name)


def unblock_op(name):
    """Removes `name` from the block list; returns whether it was on it."""
    from torch_openreg import _C
    return _C._unblock_op(name)


def blocked_ops():
    """The blocked operator names, sorted."""
    from torch_openreg import _C
    return _C._blocked_ops()


def _load():
    global _loaded
    # `import torch` runs torch's backend autoload, which may re-enter this
    # function when `import torch_openreg` came first: check afterwards.
    import torch

    if _loaded:
        return
    from torch_openreg import _C
    from torch_openreg import openreg as device_module

    _C._set_daemon_binary(daemon_binary())
    torch.utils.rename_privateuse1_backend("openreg")
    torch._register_device_module("openreg", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _C._register_graph_impl()  # torch.accelerator.Graph, by backend name
    from torch_openreg import dynamo
    dynamo.install()  # Dynamo's DeviceInterface, when Dynamo is imported
    from torch_openreg import inductor
    inductor.install()  # torch.compile's Inductor, when it is imported
    from torch_openreg.openreg import faults, ipc
    faults._install_phase_hooks()
    ipc.install()  # torch.multiprocessing carries openreg tensors
    from torch_openreg import distributed
    distributed.install()  # the occl c10d backend
    _loaded = True


def _autoload():
    """Entry point called by `import torch`. Must never raise or block."""
    try:
        _load()
    except Exception as error:  # noqa: BLE001 - import torch must survive
        warnings.warn(f"torch_openreg could not be loaded: {error}")


_autoload()
