"""Inductor's C++ kernels as openreg modules (docs/COMPILE.md).

Inductor's CPU C++ code generator writes each fused kernel as
`extern "C" void kernel(const float* in_ptr0, ..., float* out_ptr0,
const int64_t ks0, ...)`. For openreg the generated wrapper defines it
with `openreg_kernels.define(name, arg_types, source)`: the source gets an
entry point of the module ABI (data_plane/module_abi.h) appended and is
built into a shared library by Inductor's own C++ toolchain and on-disk
cache (a second process finds the library and compiles nothing); the
client never loads it. Calling the returned `OpenRegKernel` loads the
library into the daemon once per process (LoadModule) and enqueues a
LaunchModuleKernel command on the current stream of its tensors' device:
the daemon checks each tensor against the session's allocations and runs
the kernel on device memory.
"""

import functools
import re
import threading

from torch_openreg import _C

# A tensor argument arrives as the element-0 address in daemon memory, a
# scalar as the address of an int64_t or a double (module_abi.h).
_SCALAR_SLOT_TYPES = {"int64_t": "int64_t", "float": "double",
                      "double": "double", "bool": "int64_t"}
# Element types of pointer arguments: Inductor's DTYPE_TO_CPP
# (torch/_inductor/codegen/cpp_utils.py).
_POINTER_ELEMENT_TYPES = {
    "float", "double", "at::Half", "at::BFloat16", "int64_t", "int32_t",
    "int16_t", "int8_t", "uint64_t", "uint32_t", "uint16_t", "uint8_t",
    "bool", "at::complex<at::Half>", "at::complex<float>",
    "at::complex<double>", "at::Float8_e4m3fn", "at::Float8_e5m2",
    "at::Float8_e4m3fnuz", "at::Float8_e5m2fnuz",
}
# CppScheduling names every kernel function "kernel".
_KERNEL_FUNCTION = "kernel"

# Every parallel region of Inductor's C++ kernels declares its OpenMP
# thread id (cpp.py, ParallelLoop); only a reduction split between threads
# reads it (each thread's partial result, "tmp_acc0_arr[tid]"), or reads
# the thread count.
_THREAD_ID_DECLARATION = "int tid = omp_get_thread_num();"
_READS_THREAD_ID_OR_COUNT = re.compile(
    r"\btid\b|omp_get_num_threads|omp_get_max_threads|omp_get_thread_num")


def thread_invariant(source):
    """Whether a kernel gives the same bits at any thread count: it never
    reads its thread id or count, so each element, or each output of a
    reduction, is computed by one thread however its loops are split. Such
    a kernel runs on one thread when its tensors are small, as eager
    launches do (docs/COMPILE.md, "Threads"); a split reduction keeps the
    client's count, as CPU's compiled kernel would."""
    return not _READS_THREAD_ID_OR_COUNT.search(
        source.replace(_THREAD_ID_DECLARATION, ""))


class ArgumentType:
    """One entry of Inductor's arg_types: 'const float*', 'const int64_t'."""

    def __init__(self, spelled):
        self.spelled = spelled
        text = spelled.strip()
        self.const = text.startswith("const ")
        if self.const:
            text = text[len("const "):].strip()
        self.pointer = text.endswith("*")
        self.element = text[:-1].strip() if self.pointer else text
        known = (_POINTER_ELEMENT_TYPES if self.pointer
                 else _SCALAR_SLOT_TYPES)
        if self.element not in known:
            raise NotImplementedError(
                f"openreg: Inductor kernel argument type {spelled!r} is not "
                "supported by openreg's module entry (kernels.py)")

    def unpack(self, index):
        """C++ that reads argument `index` of the entry's `arguments`."""
        if self.pointer:
            const = "const " if self.const else ""
            return f"static_cast<{const}{self.element}*>(arguments[{index}])"
        slot = _SCALAR_SLOT_TYPES[self.element]
        return (f"static_cast<{self.element}>("
                f"*static_cast<const {slot}*>(arguments[{index}]))")


def module_entry(arg_types):
    """The module ABI's two symbols, calling `kernel` with `arg_types`."""
    parsed = [ArgumentType(spelled) for spelled in arg_types]
    call = ",\n        ".join(argument.unpack(index)
                              for index, argument in enumerate(parsed))
    return f"""
// ---- openreg module entry (torch_openreg/inductor/kernels.py) ----
#include <cstdint>
#include <cstdio>
#include <exception>
extern "C" __attribute__((visibility("default")))
uint32_t {_C._module_abi_symbol}() {{ return {_C._module_abi_version}; }}
extern "C" __attribute__((visibility("default")))
int {_C._module_entry_symbol}(void** arguments, uint32_t count, char* error,
                              size_t error_size) {{
  if (count != {len(parsed)}) {{
    std::snprintf(error, error_size, "expected {len(parsed)} arguments, "
                  "got %u", count);
    return 1;
  }}
  try {{
    {_KERNEL_FUNCTION}(
        {call});
    return 0;
  }} catch (const std::exception& exception) {{
    std::snprintf(error, error_size, "%s", exception.what());
  }} catch (...) {{
    std::snprintf(error, error_size, "an unknown C++ exception");
  }}
  return 1;
}}
"""


class KernelLibrary:
    """What the code cache hands back in the client: only the path; the
    daemon loads the library, the client never does."""

    def __init__(self, path):
        self.path = path


@functools.cache
def _code_cache():
    from torch._inductor.codecache import (
        CppCodeCache, _get_cpp_prefix_header, clear_on_fresh_cache)

    @clear_on_fresh_cache
    class OpenRegKernelCodeCache(CppCodeCache):
        cache = {}
        cache_clear = staticmethod(cache.clear)
        # As CppPythonBindingsCodeCache: no libtorch, a shared library.
        cpp_compile_command_flags = {"include_pytorch": False, "shared": True}

        @staticmethod
        def _load_library_inner(path, key):
            return KernelLibrary(path)

        @classmethod
        def _load_library(cls, path, key):
            return cls._load_library_inner(path, key)

        @classmethod
        def _get_uncompiled_header(cls, device):
            return _get_cpp_prefix_header(device)

    return OpenRegKernelCodeCache


@functools.cache
def _extra_flags():
    from torch._inductor.cpp_builder import is_gcc

    # cpp_prefix.h defines an inline thread_local, which g++ makes a
    # GNU-unique symbol, and glibc never unmaps a library with one: the
    # daemon would keep every kernel a session loaded after it ended
    # (device_daemon/sessions/loaded_module.h). Without it each module has
    # its own copy of that variable, which only its own kernel uses.
    return ("-fno-gnu-unique",) if is_gcc() else ()


def _build(arg_types, source, submit_fn=None):
    # device_type "cpu": the kernel is host C++ run by the daemon on this
    # machine; any other type turns on Inductor's -O1 and changes its
    # vector-ISA choice.
    return _code_cache().load_async(source + module_entry(arg_types),
                                    device_type="cpu", submit_fn=submit_fn,
                                    extra_flags=_extra_flags())


class _LoadedModules:
    """Module ids by library path, for this process's session: each library
    is loaded into the daemon once, at its first launch."""

    def __init__(self):
        self._ids = {}
        self._lock = threading.Lock()

    def id_of(self, path):
        with self._lock:
            module = self._ids.get(path)
            if module is None:
                module = self._ids[path] = _C._load_module(path)
            return module


_loaded = _LoadedModules()


class OpenRegKernel:
    """A compiled kernel; calling it launches it on the current stream."""

    def __init__(self, name, arg_types, library, one_thread_if_small=False):
        self.name = name
        self.one_thread_if_small = one_thread_if_small
        self.arg_types = [ArgumentType(spelled) for spelled in arg_types]
        self.written = [argument.pointer and not argument.const
                        for argument in self.arg_types]
        self.path = library.path
        self._module = None  # loaded at the first launch

    def __repr__(self):
        return f"OpenRegKernel({self.name}, {self.path})"

    def __call__(self, *arguments):
        if len(arguments) != len(self.arg_types):
            raise TypeError(f"openreg: compiled kernel {self.name} takes "
                            f"{len(self.arg_types)} arguments, got "
                            f"{len(arguments)}")
        if self._module is None:
            self._module = _loaded.id_of(self.path)
        _C._launch_module_kernel(self._module, self.name, list(arguments),
                                 self.written, self.one_thread_if_small)


class OpenRegKernels:
    """What generated wrappers import as `openreg_kernels`."""

    def define(self, name, arg_types, source):
        from torch._inductor.async_compile import (AsyncCompile,
                                                   get_compile_threads)
        from torch._inductor.codecache import LambdaFuture

        invariant = thread_invariant(source)
        if get_compile_threads() <= 1:
            return OpenRegKernel(name, arg_types, _build(arg_types, source)(),
                                 invariant)
        # In Inductor's compile pool, as async_compile.cpp_pybinding does;
        # the wrapper's async_compile.wait(globals()) resolves the future.
        library = _build(arg_types, source, submit_fn=AsyncCompile.submit)
        return LambdaFuture(
            lambda: OpenRegKernel(name, arg_types, library(), invariant))


openreg_kernels = OpenRegKernels()
