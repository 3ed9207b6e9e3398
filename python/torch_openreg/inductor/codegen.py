"""The Inductor classes of the openreg device: Inductor's C++ scheduling,
unchanged except for how a kernel is defined (an openreg module,
kernels.py), and a Python wrapper that launches those kernels like CPU
kernels, allocates on the graph's openreg device and hands 0-dim CPU
tensors to kernels as device tensors. cpp_wrapper (AOTInductor) and the FX
wrapper are refused with a clear error."""

import hashlib

DEVICE = "openreg"
_CPP_PYBINDING = "async_compile.cpp_pybinding("
_CPP_WRAPPER_REFUSED = (
    "openreg: torch._inductor.config.cpp_wrapper (and AOTInductor) is not "
    "supported: openreg's kernels are launched from the Python wrapper "
    "through the daemon; compile with cpp_wrapper=False")


def make_classes():
    """The classes, built on first use (they subclass Inductor's, and
    importing Inductor costs seconds: `import torch` must not)."""
    from torch._inductor.codegen.common import DeviceOpOverrides
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.wrapper import (
        PythonWrapperCodegen, SubgraphPythonWrapperCodegen)
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
    from torch._inductor.custom_graph_pass import CustomGraphModulePass
    from torch._inductor.ir import get_device_type
    from torch._inductor.virtualized import V

    class OpenRegDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name):
            return (f"def {name}(index):\n"
                    "    return torch.openreg.current_stream(index)"
                    ".stream_id\n")

        def set_device(self, device_idx):
            return f"torch.openreg.set_device({device_idx})"

        def synchronize(self):
            return "torch.openreg.synchronize()"

        def device_guard(self, device_idx):
            return f"torch.openreg.device({device_idx})"

        def current_stream(self):
            return "torch.openreg.current_stream()"

        def cpp_kernel_type(self):
            return "void*"

    class OpenRegScheduling(CppScheduling):
        # The wrapper shares kernels of identical source: an openreg kernel
        # must never be taken for a CPU kernel of the same graph (the CPU
        # one runs on host pointers).
        _SOURCE_TAG = "// openreg kernel\n"

        def define_kernel(self, src_code, nodes, kernel_args=None):
            if V.graph.cpp_wrapper:
                raise RuntimeError(_CPP_WRAPPER_REFUSED)
            wrapper = V.graph.wrapper_code
            wrapper.openreg_defining = True
            try:
                return super().define_kernel(self._SOURCE_TAG + src_code,
                                             nodes, kernel_args)
            finally:
                wrapper.openreg_defining = False

    class OpenRegWrapperMixin:
        openreg_defining = False

        def write_header(self):
            super().write_header()
            self.imports.writeline(
                "from torch_openreg.inductor.kernels import openreg_kernels")

        def define_kernel(self, kernel_name, kernel_body, metadata=None,
                          gpu=True, cpp_definition=None):
            if self.openreg_defining:
                # CppScheduling.define_kernel writes
                # "async_compile.cpp_pybinding(<arg_types>, r'''<source>''')".
                if not kernel_body.startswith(_CPP_PYBINDING):
                    raise RuntimeError(
                        "openreg: Inductor defined a C++ kernel in a form "
                        "openreg does not know (torch upgrade?): "
                        f"{kernel_body[:80]!r}")
                kernel_body = (f"openreg_kernels.define({kernel_name!r}, "
                               + kernel_body[len(_CPP_PYBINDING):])
            return super().define_kernel(kernel_name, kernel_body, metadata,
                                         gpu, cpp_definition)

        def generate_kernel_call(self, kernel_name, call_args, *, device=None,
                                 triton=True, arg_types=None, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if not triton and device.type == DEVICE and arg_types:
                # 0-dim CPU tensors (graph inputs such as torch.tensor(3.0))
                # go to C++ kernels as pointers; GPU backends pass them by
                # value for Triton only. The daemon cannot read host memory.
                call_args = list(call_args)
                for index, (argument, spelled) in enumerate(
                        zip(call_args, arg_types)):
                    if (isinstance(argument, str)
                            and str(spelled).strip().endswith("*")):
                        buffer = V.graph.try_get_buffer(argument)
                        if buffer is not None and \
                                get_device_type(buffer) == "cpu":
                            call_args[index] = f"{argument}.to('{device}')"
            return super().generate_kernel_call(
                kernel_name, call_args, device=device, triton=triton,
                arg_types=arg_types, **kwargs)

        def _generate_kernel_call_helper(self, kernel_name, call_args, *,
                                         device=None, triton=True, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if not triton and device.type == DEVICE:
                self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                return None
            return super()._generate_kernel_call_helper(
                kernel_name, call_args, device=device, triton=triton,
                **kwargs)

        def make_allocation(self, name, device, dtype, shape, stride,
                            allocation_shape=None, is_pinned=False):
            line = super().make_allocation(name, device, dtype, shape, stride,
                                           allocation_shape, is_pinned)
            # The base writes device='openreg' and openreg gets no device
            # guard: name the index, so that a graph on openreg:1 allocates
            # there.
            if device.type == DEVICE and device.index is not None:
                line = line.replace(f"device='{DEVICE}'",
                                    f"device='{DEVICE}:{device.index}'", 1)
            return line

    class OpenRegPythonWrapperCodegen(OpenRegWrapperMixin,
                                      PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper,
                   partition_signatures=None):
            if is_subgraph:
                return OpenRegSubgraphPythonWrapperCodegen(
                    subgraph_name, parent_wrapper, partition_signatures)
            return OpenRegPythonWrapperCodegen()

    class OpenRegSubgraphPythonWrapperCodegen(OpenRegWrapperMixin,
                                              SubgraphPythonWrapperCodegen):
        pass

    class OpenRegCppWrapperCodegen(CppWrapperCpu):
        # A real subclass: compile_fx reads class attributes before create().
        @staticmethod
        def create(*args, **kwargs):
            raise RuntimeError(_CPP_WRAPPER_REFUSED)

    class OpenRegWrapperFxCodegen(WrapperFxCodegen):
        @staticmethod
        def create(*args, **kwargs):
            raise RuntimeError(
                "openreg: torch._inductor.config.fx_wrapper is not supported "
                "(Inductor's FX wrapper converts Triton kernels only)")

    class OpenRegCacheKeyPass(CustomGraphModulePass):
        """Does nothing to the graph; its uuid() (the hash of this package's
        code generation) enters the FX graph cache key, so that a new
        torch_openreg never reuses a wrapper an older one wrote."""

        def __call__(self, graph_module):
            return None

        def uuid(self):
            digest = hashlib.sha256()
            import torch_openreg.inductor.kernels as kernels
            for module_file in (__file__, kernels.__file__):
                with open(module_file, "rb") as source:
                    digest.update(source.read())
            return digest.hexdigest()

    return {
        "DeviceOpOverrides": OpenRegDeviceOpOverrides,
        "Scheduling": OpenRegScheduling,
        "PythonWrapperCodegen": OpenRegPythonWrapperCodegen,
        "CppWrapperCodegen": OpenRegCppWrapperCodegen,
        "WrapperFxCodegen": OpenRegWrapperFxCodegen,
        "CacheKeyPass": OpenRegCacheKeyPass,
    }
