"""torch.compile for openreg (docs/COMPILE.md): Inductor with openreg's
code generation (codegen.py: Inductor's C++ kernels built as modules the
daemon loads, kernels.py), and the Dynamo backend name "openreg".

Registered at autoload without importing Inductor: `install()` puts the
four classes Inductor looks up on a PrivateUse1 backend's module
(torch.openreg.Scheduling, PythonWrapperCodegen, CppWrapperCodegen,
WrapperFxCodegen) behind a lazy attribute lookup, and registers everything
as soon as torch._inductor.compile_fx is imported (before Inductor lowers
a first graph). torch.compile(model) with the default backend then works
on openreg tensors, and so does torch.compile(model, backend="openreg")."""

import threading

import torch

from torch_openreg import _import_hooks

_CLASSES_ON_THE_DEVICE_MODULE = ("Scheduling", "PythonWrapperCodegen",
                                 "CppWrapperCodegen", "WrapperFxCodegen")
_lock = threading.Lock()
_classes = {}


def register():
    """Registers openreg with Inductor. Idempotent."""
    with _lock:
        if _classes:
            return
        from torch._inductor.codegen.common import (
            register_backend_for_device, register_device_op_overrides)

        import torch._inductor.config as config

        from torch_openreg.inductor import codegen, patches, reduce_overhead

        patches.apply()
        # mode="reduce-overhead": openreg graphs instead of CUDA graph trees
        # (reduce_overhead.py); graphs of other devices pass through.
        if config.cudagraph_policy is None:
            config.cudagraph_policy = reduce_overhead.make_policy()
        classes = codegen.make_classes()
        register_backend_for_device(
            "openreg", classes["Scheduling"],
            classes["PythonWrapperCodegen"], classes["CppWrapperCodegen"],
            classes["WrapperFxCodegen"], classes["CacheKeyPass"]())
        register_device_op_overrides("openreg",
                                     classes["DeviceOpOverrides"]())
        for name in _CLASSES_ON_THE_DEVICE_MODULE:
            setattr(torch.openreg, name, classes[name])
        _classes.update(classes)


def openreg_dynamo_backend(graph_module, example_inputs, **kwargs):
    """The Dynamo backend "openreg": Inductor with openreg's codegen."""
    register()
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(graph_module, example_inputs, **kwargs)


def _device_module_getattr(name):
    if name in _CLASSES_ON_THE_DEVICE_MODULE:
        register()
        return getattr(torch.openreg, name)
    raise AttributeError(f"module 'torch.openreg' has no attribute {name!r}")


def _register_dynamo_backend(registry):
    if "openreg" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=openreg_dynamo_backend,
                                  name="openreg")


def install():
    import torch_openreg.openreg as device_module

    device_module.__getattr__ = _device_module_getattr
    _import_hooks.after_import("torch._inductor.compile_fx",
                               lambda module: register())
    _import_hooks.after_import("torch._dynamo.backends.registry",
                               _register_dynamo_backend)
