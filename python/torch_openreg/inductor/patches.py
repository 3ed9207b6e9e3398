"""Where Inductor special-cases device type "cpu" but means "uses the C++
(CPU) code generator", extended to openreg. Each change is narrow: only
device type "openreg" answers differently, every other device as before.
Private Inductor APIs (torch 2.13): check them on each torch upgrade
(tests/python/test_compile.py covers each)."""

import torch

DEVICE = "openreg"


def _is_cpu_or_openreg():
    """scheduler.BaseSchedulerNode.is_cpu() switches off loop reordering and
    reindexing for the C++ code generator; for openreg those ran and crashed
    in backward (CppScheduling's groups are not (numel, rnumel))."""
    import torch._inductor.scheduler as scheduler

    if getattr(scheduler.BaseSchedulerNode.is_cpu, "_openreg", False):
        return

    def is_cpu(self):
        device = self.get_device()
        return device is not None and device.type in ("cpu", DEVICE)

    is_cpu._openreg = True
    scheduler.BaseSchedulerNode.is_cpu = is_cpu


def _current_backend_is_cpp():
    """utils.get_current_backend() answers "triton" for an unknown device
    type, which makes dtype propagation and the CSE proxy treat openreg's
    C++ kernels as Triton's (a bfloat16 `where` failed to compile)."""
    import torch._inductor.codegen.common as codegen_common
    import torch._inductor.utils as inductor_utils

    original = inductor_utils.get_current_backend
    if getattr(original, "_openreg", False):
        return

    def get_current_backend(device_type=None):
        if not device_type:
            from torch._inductor.virtualized import V
            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == DEVICE else original(device_type)

    get_current_backend._openreg = True
    inductor_utils.get_current_backend = get_current_backend
    codegen_common.get_current_backend = get_current_backend


def _no_layout_optimization_for_openreg_convolutions():
    """GraphLowering.decide_layout_opt runs GPU heuristics for devices other
    than CPU and XPU and turns convolution graphs channels_last; the fake
    convolution of a PrivateUse1 device then predicts a contiguous result
    while openreg's convolution (CPU's) keeps channels_last, and the
    wrapper's assert_size_stride fails. openreg graphs stay as given, as
    CPU's do."""
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.__dict__["decide_layout_opt"].__func__
    if getattr(original, "_openreg", False):
        return

    def decide_layout_opt(gm, *, is_inference):
        for node in gm.graph.nodes:
            if node.target is torch.ops.aten.convolution.default:
                for argument in node.args[:2]:
                    value = getattr(argument, "meta", {}).get("val")
                    if (isinstance(value, torch.Tensor)
                            and value.device.type == DEVICE):
                        return False
        return original(gm, is_inference=is_inference)

    decide_layout_opt._openreg = True
    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)


def apply():
    _is_cpu_or_openreg()
    _current_backend_is_cpp()
    _no_layout_optimization_for_openreg_convolutions()
