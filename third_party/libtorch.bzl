"""Repository rule that exposes the pip-installed torch to Bazel.

It asks python3 (or $OPENREG_PYTHON) where torch lives and links torch's
headers, shared libraries and bundled pybind11 into an external repository.
torch/include also ships protobuf headers of another version; they are left
out so that #include <google/protobuf/...> always finds the system protobuf.
"""

_QUERY = """
import os, sys, sysconfig, torch
root = os.path.dirname(torch.__file__)
print(sys.executable)
print(os.path.join(root, "include"))
print(os.path.join(root, "lib"))
print(sysconfig.get_paths()["include"])
print(int(torch.compiled_with_cxx11_abi()))
print(torch.__version__)
"""

_LIBS = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"]

def _libtorch_repository_impl(ctx):
    python = ctx.os.environ.get("OPENREG_PYTHON", "python3")
    result = ctx.execute([python, "-c", _QUERY])
    if result.return_code != 0:
        fail("libtorch: `%s -c 'import torch'` failed; run `make setup` " % python +
             "(pip install torch==2.13.0).\n" + result.stderr)
    interpreter, include_dir, lib_dir, python_include, cxx11_abi, version = \
        result.stdout.strip().split("\n")

    for entry in ctx.path(include_dir).readdir():
        if entry.basename != "google":
            ctx.symlink(entry, "include/" + entry.basename)
    for lib in _LIBS:
        ctx.symlink(lib_dir + "/" + lib, "lib/" + lib)
    ctx.symlink(python_include, "python_include")

    ctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

# torch {version}
cc_library(
    name = "torch",
    hdrs = glob(["include/**"], exclude = ["include/pybind11/**"]),
    includes = ["include", "include/torch/csrc/api/include"],
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
    srcs = ["lib/libc10.so", "lib/libtorch.so", "lib/libtorch_cpu.so"],
    linkopts = ["-Wl,-rpath,{lib_dir}"],
)

# For Python extension modules: torch's Python bindings, pybind11, Python.h.
cc_library(
    name = "torch_python",
    hdrs = glob(["include/pybind11/**", "python_include/**"]),
    includes = ["include", "python_include"],
    srcs = ["lib/libtorch_python.so"],
    deps = [":torch"],
)

py_runtime(
    name = "python3_runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "python_runtimes",
    py3_runtime = ":python3_runtime",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":python_runtimes",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(version = version, abi = cxx11_abi, lib_dir = lib_dir, interpreter = interpreter))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["OPENREG_PYTHON", "PATH"],
    local = True,
)
