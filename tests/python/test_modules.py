"""Compiled modules (openreg/modules.h, data_plane/module_abi.h,
docs/COMPILE.md): a kernel library the client built, loaded into the
daemon for its session and launched on device memory on the current
stream; the trust checks on loading; errors at the call or at the next
synchronization, naming the kernel; fault injection into a module kernel's
output; unloading."""

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch_openreg import _C

from daemon_fixture import process_daemon, run_python

DAEMON = process_daemon(devices=2)
faults = torch.openreg.faults

# out[i] = x[i] * alpha + offset; a negative count throws inside the kernel.
SOURCE = textwrap.dedent("""
    #include <cstddef>
    #include <cstdint>
    #include <cstring>
    #include <stdexcept>

    static void scale(const float* x, float* out, int64_t count,
                      double alpha, int64_t offset) {
      if (count < 0) throw std::runtime_error("negative count");
      for (int64_t i = 0; i < count; ++i) out[i] = x[i] * alpha + offset;
    }

    extern "C" uint32_t openreg_module_abi() { return ABI; }
    extern "C" int openreg_module_entry(void** args, uint32_t count,
                                        char* error, size_t error_size) {
      try {
        if (count != 5) throw std::runtime_error("expected 5 arguments");
        scale(static_cast<const float*>(args[0]),
              static_cast<float*>(args[1]),
              *static_cast<int64_t*>(args[2]),
              *static_cast<double*>(args[3]),
              *static_cast<int64_t*>(args[4]));
        return 0;
      } catch (const std::exception& e) {
        std::strncpy(error, e.what(), error_size - 1);
        return 1;
      }
    }
    """)


def build(tmp_path, name="scale", abi=None, source=SOURCE, flags=()):
    source_path = tmp_path / f"{name}.cc"
    source_path.write_text(source.replace(
        "ABI", str(_C._module_abi_version if abi is None else abi)))
    library = tmp_path / f"{name}.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", *flags, "-o",
                    str(library), str(source_path)], check=True, timeout=120)
    os.chmod(library, 0o755)
    return str(library)


@pytest.fixture(scope="module")
def module_path(tmp_path_factory):
    return build(tmp_path_factory.mktemp("modules"))


def test_a_module_kernel_runs_on_device_memory_in_stream_order(module_path):
    module = _C._load_module(module_path)
    x = torch.arange(6, dtype=torch.float32, device="openreg")
    out = torch.empty_like(x)
    _C._launch_module_kernel(module, "scale", [x, out, 6, 2.5, 1],
                             [False, True, False, False, False])
    # Ordered with the ops around it on the current stream.
    result = (out + 0).cpu()
    expected = torch.arange(6, dtype=torch.float32) * 2.5 + 1
    assert torch.equal(result, expected)
    _C._unload_module(module)


def test_a_module_kernel_runs_on_the_tensors_device_and_its_stream(
        module_path):
    module = _C._load_module(module_path)
    x = torch.full((4,), 3.0, device="openreg:1")
    out = torch.zeros(4, device="openreg:1")
    stream = torch.openreg.Stream(device=1)
    with torch.openreg.stream(stream):
        _C._launch_module_kernel(module, "scale", [x, out, 4, 2.0, 0],
                                 [False, True, False, False, False])
    stream.synchronize()
    assert out.cpu().tolist() == [6.0] * 4
    _C._unload_module(module)


def test_an_exception_in_a_kernel_fails_at_the_next_synchronization(
        module_path):
    module = _C._load_module(module_path)
    x = torch.zeros(2, device="openreg")
    _C._launch_module_kernel(module, "scale", [x, x, -1, 1.0, 0],
                             [False, True, False, False, False])
    with pytest.raises(RuntimeError, match="compiled kernel scale .*"
                       "failed: negative count"):
        torch.openreg.synchronize()
    _C._unload_module(module)


# Writes the OpenMP thread count a parallel region would get.
THREADS_SOURCE = textwrap.dedent("""
    #include <omp.h>
    #include <cstddef>
    #include <cstdint>

    extern "C" uint32_t openreg_module_abi() { return ABI; }
    extern "C" int openreg_module_entry(void** args, uint32_t count,
                                        char* error, size_t error_size) {
      *static_cast<int64_t*>(args[0]) = omp_get_max_threads();
      return 0;
    }
    """)


def test_a_module_kernel_runs_with_the_clients_intra_op_threads(tmp_path):
    """As an op does: the client's torch.set_num_threads reaches a compiled
    kernel's OpenMP regions, whatever the daemon's thread last ran."""
    module = _C._load_module(build(tmp_path, "threads",
                                   source=THREADS_SOURCE,
                                   flags=["-fopenmp"]))
    out = torch.zeros(1, dtype=torch.int64, device="openreg")
    before = torch.get_num_threads()
    try:
        for threads in (3, 1, 2):
            torch.set_num_threads(threads)
            _C._launch_module_kernel(module, "threads", [out], [True])
            assert out.item() == threads
    finally:
        torch.set_num_threads(before)
    _C._unload_module(module)


def test_a_launch_of_an_unloaded_module_fails_naming_it(module_path):
    module = _C._load_module(module_path)
    _C._unload_module(module)
    x = torch.zeros(2, device="openreg")
    _C._launch_module_kernel(module, "scale", [x, x, 2, 1.0, 0],
                             [False, True, False, False, False])
    with pytest.raises(RuntimeError, match=f"module {module} is not loaded"):
        torch.openreg.synchronize()
    with pytest.raises(RuntimeError, match="is not loaded"):
        _C._unload_module(module)


def test_arguments_are_checked_at_the_call(module_path):
    module = _C._load_module(module_path)
    x = torch.zeros(2, device="openreg")
    with pytest.raises(ValueError, match="is a tensor on cpu"):
        _C._launch_module_kernel(module, "scale", [torch.zeros(2), x, 2,
                                                   1.0, 0],
                                 [False, True, False, False, False])
    with pytest.raises(ValueError, match="kernel runs on one device"):
        _C._launch_module_kernel(
            module, "scale",
            [torch.zeros(2, device="openreg:1"), x, 2, 1.0, 0],
            [False, True, False, False, False])
    with pytest.raises(TypeError, match="is a <class 'str'>"):
        _C._launch_module_kernel(module, "scale", [x, x, "2", 1.0, 0],
                                 [False, True, False, False, False])
    with pytest.raises(ValueError, match="written flags"):
        _C._launch_module_kernel(module, "scale", [x, x, 2, 1.0, 0], [True])
    _C._unload_module(module)


def test_a_library_of_another_abi_or_none_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not an openreg module of ABI "
                       f"version {_C._module_abi_version}.*ABI version 999"):
        _C._load_module(build(tmp_path, "other_abi", abi=999))
    plain = build(tmp_path, "plain", source="int answer() { return 42; }")
    with pytest.raises(ValueError, match="no openreg_module_abi"):
        _C._load_module(plain)
    with pytest.raises(ValueError, match="cannot open module"):
        _C._load_module(str(tmp_path / "missing.so"))


def test_a_module_others_may_write_or_of_another_uid_is_refused(tmp_path):
    library = build(tmp_path, "writable")
    os.chmod(library, 0o775)
    with pytest.raises(RuntimeError, match="group or others may write"):
        _C._load_module(library)
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    os.chmod(library, 0o755)
    os.chown(library, 65534, 65534)
    with pytest.raises(RuntimeError, match="belongs to uid 65534"):
        _C._load_module(library)


def test_a_corrupt_output_fault_hits_a_module_kernels_output(module_path):
    module = _C._load_module(module_path)
    x = torch.arange(8, dtype=torch.float32, device="openreg")
    out = torch.zeros(8, device="openreg")
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(bits=[30], element=3),
                       op="scale", nth=1):
        _C._launch_module_kernel(module, "scale", [x, out, 8, 1.0, 0],
                                 [False, True, False, False, False])
        result = out.cpu()
    [record] = faults.log(since)
    assert record.model == "corrupt_output" and record.command == "scale"
    expected = torch.arange(8, dtype=torch.float32)
    flipped = (expected[3:4].view(torch.int32) ^ (1 << 30)).view(
        torch.float32)
    assert torch.equal(result[3:4], flipped)
    mask = torch.arange(8) != 3
    assert torch.equal(result[mask], expected[mask])
    assert torch.equal(x.cpu(), expected)  # inputs are not outputs
    _C._unload_module(module)


def test_a_module_kernel_on_a_lost_device_fails_cleanly(module_path):
    code = f"""
import torch
from torch_openreg import _C
from torch.openreg import faults
module = _C._load_module({module_path!r})
x = torch.ones(4, device="openreg:0")
out = torch.empty_like(x)
faults.arm(faults.device_lost(), op="scale", device=0, nth=1)
_C._launch_module_kernel(module, "scale", [x, out, 4, 1.0, 0],
                         [False, True, False, False, False])
try:
    torch.openreg.synchronize(0)
except RuntimeError as error:
    print("lost:", "was lost" in str(error))
print("device 1:", torch.ones(2, device="openreg:1").sum().item())
faults.reset_device(0)
"""
    result = run_python(code, DAEMON.env())
    assert result.stdout.split("\n")[:2] == ["lost: True", "device 1: 2.0"], \
        result.stderr[-3000:]


CRASHING = textwrap.dedent("""
    #include <cstddef>
    #include <cstdint>
    extern "C" uint32_t openreg_module_abi() { return ABI; }
    extern "C" int openreg_module_entry(void** args, uint32_t, char*,
                                        size_t) {
      volatile float* nowhere = reinterpret_cast<float*>(16);
      *nowhere = *static_cast<float*>(args[0]);
      return 0;
    }
    """)


def test_a_crashing_kernel_fails_its_process_and_the_daemon_goes_on(
        tmp_path):
    crashing = build(tmp_path, "crashing", source=CRASHING)
    code = f"""
import torch
from torch_openreg import _C
module = _C._load_module({crashing!r})
x = torch.ones(4, device="openreg")
_C._launch_module_kernel(module, "crashing", [x], [True])
try:
    torch.openreg.synchronize()
except RuntimeError as error:
    print("crashed:", "compiled kernel crashing" in str(error),
          "crashed with SIGSEGV at address 0x10" in str(error))
try:
    (x + 1).cpu()
except RuntimeError as error:
    print("sticky:", "crashed with SIGSEGV" in str(error))
"""
    result = run_python(code, DAEMON.env())
    assert result.stdout.split("\n")[:2] == ["crashed: True True",
                                             "sticky: True"], \
        result.stderr[-3000:]
    # The daemon and its other clients go on (on device 1: the lost-device
    # test reset device 0, which took this process's cached blocks there).
    assert (torch.ones(3, device="openreg:1") * 2).cpu().tolist() == \
        [2.0] * 3
    assert DAEMON.process.poll() is None


# out[0] = MARK, through an inline variable: g++ gives it a GNU-unique
# symbol, and glibc then never unmaps the library (Inductor's kernels have
# one too: cpp_prefix.h's inductor_cpu_integer_div_error_flag).
UNIQUE_SOURCE = textwrap.dedent("""
    #include <cstddef>
    #include <cstdint>

    inline thread_local float* last_output = nullptr;

    extern "C" uint32_t openreg_module_abi() { return ABI; }
    extern "C" int openreg_module_entry(void** args, uint32_t count,
                                        char* error, size_t error_size) {
      last_output = static_cast<float*>(args[0]);
      *last_output = MARK;
      return 0;
    }
    """)


def test_a_module_loaded_after_one_that_stayed_mapped_runs_its_own_code(
        tmp_path):
    # The first library (the unique symbol's definition the others bind
    # to) stays mapped after its unload; the next is opened under the same
    # fd number, so a load name reused would run the first one's code.
    # On device 1: the lost-device test reset device 0, which took this
    # process's cached blocks there.
    out = torch.zeros(1, device="openreg:1")
    for mark in range(1, 5):
        library = build(tmp_path, f"unique{mark}",
                        source=UNIQUE_SOURCE.replace("MARK", f"{mark}.0f"))
        module = _C._load_module(library)
        _C._launch_module_kernel(module, "mark", [out], [True])
        assert out.cpu().item() == mark
        _C._unload_module(module)
        with open(f"/proc/{DAEMON.pid}/maps") as maps:
            assert "unique1.so" in maps.read()


def daemon_fds_of(path):
    fds = f"/proc/{DAEMON.pid}/fd"
    count = 0
    for fd in os.listdir(fds):
        try:
            count += os.readlink(f"{fds}/{fd}") == path
        except OSError:
            pass  # closed meanwhile
    return count


def test_a_module_runs_its_own_code_while_another_session_maps_the_last(
        tmp_path, module_path):
    # Loaded here first, the library is mapped under this session's load
    # name; another process loads the same file (glibc finds it by inode:
    # one mapping, two references). Unloaded here, it stays mapped for the
    # other process under this session's name, so the next module loaded
    # here must not be given that name.
    first = _C._load_module(module_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            import torch
            from torch_openreg import _C
            _C._load_module({module_path!r})
            print("loaded", flush=True)
            sys.stdin.readline()
            """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=DAEMON.env())
    try:
        assert holder.stdout.readline().strip() == "loaded"
        _C._unload_module(first)
        marker = _C._load_module(build(
            tmp_path, "marker",
            source=UNIQUE_SOURCE.replace("MARK", "7.0f")))
        out = torch.zeros(1, device="openreg:1")
        _C._launch_module_kernel(marker, "mark", [out], [True])
        assert out.cpu().item() == 7
        _C._unload_module(marker)
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    # Once the holder's session ended, no library answers to the names any
    # more: the daemon closes both of its fds of the file.
    deadline = time.monotonic() + 30
    while daemon_fds_of(module_path) != 0:
        assert time.monotonic() < deadline, "the daemon kept the fds"
        time.sleep(0.05)


def test_a_sessions_modules_go_when_it_ends(tmp_path):
    own = build(tmp_path, "ending")
    code = f"""
import os, torch
from torch_openreg import _C
_C._load_module({own!r})
_C._load_module({own!r})
mine = [s for s in torch.openreg.daemon_stats()["sessions"]
        if s["pid"] == os.getpid()]
print(os.getpid(), mine[0]["modules"])
"""
    result = run_python(code, DAEMON.env())
    assert result.returncode == 0, result.stderr[-3000:]
    pid, modules = map(int, result.stdout.split())
    assert modules == 2
    # The daemon ends the session when it sees the client's hang-up, then
    # unloads the library (dlclose).
    deadline = time.monotonic() + 30
    while any(s["pid"] == pid
              for s in torch.openreg.daemon_stats()["sessions"]):
        assert time.monotonic() < deadline, "the session did not end"
        time.sleep(0.05)
    while True:
        with open(f"/proc/{DAEMON.pid}/maps") as maps:
            if "ending.so" not in maps.read():
                break
        assert time.monotonic() < deadline, "the module stayed loaded"
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
