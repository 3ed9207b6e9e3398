"""Dynamo's view of the openreg device: a `DeviceInterface`
(torch._dynamo.device_interface) with openreg's streams, events, devices
and properties, which torch.compile uses to trace and replay stream- and
event-aware code.

Registered at autoload, lazily: importing torch._dynamo costs about a
second, and `import torch` must stay cheap. `install()` registers the
interface at once if Dynamo's device_interface module is already loaded,
and otherwise the moment it is (_import_hooks.after_import)."""

from torch_openreg import _import_hooks

_MODULE = "torch._dynamo.device_interface"


def _make_interface(device_interface):
    import torch

    openreg = torch.openreg

    def exchange(device):
        previous = openreg.current_device()
        if device != previous:
            openreg.set_device(device)
        return previous

    def maybe_exchange(device):
        return -1 if device < 0 else exchange(device)

    class OpenRegInterface(device_interface.DeviceInterface):
        device = openreg.device
        Event = openreg.Event
        Stream = openreg.Stream

        class Worker:
            """What compile workers (which must not touch the device) ask:
            answered in the parent."""

            @staticmethod
            def set_device(device):
                device_interface.caching_worker_current_devices[
                    "openreg"] = device

            @staticmethod
            def current_device():
                return device_interface.caching_worker_current_devices.get(
                    "openreg", openreg.current_device())

            @staticmethod
            def get_device_properties(device=None):
                if device is None:
                    device = OpenRegInterface.Worker.current_device()
                return openreg.get_device_properties(device)

        current_device = staticmethod(openreg.current_device)
        set_device = staticmethod(openreg.set_device)
        device_count = staticmethod(openreg.device_count)
        stream = staticmethod(openreg.stream)
        current_stream = staticmethod(openreg.current_stream)
        set_stream = staticmethod(openreg.set_stream)
        synchronize = staticmethod(openreg.synchronize)
        get_device_properties = staticmethod(openreg.get_device_properties)
        memory_allocated = staticmethod(openreg.memory_allocated)
        is_bf16_supported = staticmethod(openreg.is_bf16_supported)
        exchange_device = staticmethod(exchange)
        maybe_exchange_device = staticmethod(maybe_exchange)

        @staticmethod
        def _set_stream_by_id(stream_id, device_index, device_type):
            openreg.set_stream(openreg.Stream(stream_id=stream_id,
                                              device_index=device_index,
                                              device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx):
            return openreg.current_stream(device_idx).stream_id

        @staticmethod
        def is_available():
            return openreg.is_available()

        @staticmethod
        def get_compute_capability(device=None):
            major, minor = openreg.get_device_capability(device)
            return major * 10 + minor  # as CUDA's interface answers

        @staticmethod
        def is_triton_capable(device=None):
            return False

        @staticmethod
        def raise_if_triton_unavailable(device=None):
            raise RuntimeError(
                "openreg has no Triton backend: Inductor compiles openreg "
                "kernels with its C++ code generator and the daemon runs "
                "them (docs/COMPILE.md)")

    return OpenRegInterface


def _register(module):
    module.register_interface_for_device("openreg", _make_interface(module))


def install():
    _import_hooks.after_import(_MODULE, _register)
