"""OpInfo conformance: every op of PyTorch's `op_db`, run on CPU and on
openreg with the same sample inputs, outputs (and gradients) compared.

Usage:
  python tests/python/conformance/run_conformance.py [--shard i/N]
      [--ops REGEX] [--summary] [--check] [--samples N] [--verbose]

The runner starts its own daemon (tests/python/daemon_fixture.py) and stops
it on exit. Each (op, dtype) pair is counted once:
  passed   every sample matched (outputs, and gradients where checked);
  failed   a sample differed or raised on openreg only (first error kept);
  skipped  CPU itself raised, or the OpInfo produced no usable sample:
           these say nothing about openreg and are never counted as passed.
Random ops cannot be compared numerically: only shapes, dtypes and devices
are checked, and they are reported in their own category.

--check compares the failures with known_failures.txt (next to this file):
a failure not listed fails the run, and so does a listed pair that now
passes (the list may only shrink).
"""

import argparse
import collections
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN_FAILURES = os.path.join(HERE, "known_failures.txt")

# The dtypes worth the run time: one of each kind the backend handles
# differently (width, integer, bool, complex).
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32",
               "bool", "complex64")
GRAD_DTYPE_NAMES = ("float32", "float64")

# Nondeterministic ops beyond those whose name says so.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal",
    "uniform", "randint", "randint_like", "randn", "randn_like", "rand_like",
    "multinomial", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.gumbel_softmax", "empty", "empty_like", "empty_strided",
    "empty_permuted", "new_empty", "new_empty_strided",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "torch.empty",
    "nn.functional.multi_head_attention_forward", "svd_lowrank",
    "pca_lowrank",
}
# Ops whose tensor arguments (besides the input) must stay on the host, as
# PyTorch requires on every device (tensor_split's index tensor).
HOST_ARGUMENT_OPS = {"tensor_split"}

RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial",
                "empty")

SHAPE_OPS = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "squeeze", "unsqueeze", "permute", "transpose", "t", "T", "H", "mT", "mH",
    "adjoint", "expand", "expand_as", "narrow", "narrow_copy", "split",
    "split_with_sizes", "chunk", "unbind", "movedim", "moveaxis", "swapaxes",
    "swapdims", "flip", "fliplr", "flipud", "rot90", "roll", "cat", "concat",
    "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack",
    "row_stack", "tile", "repeat", "repeat_interleave", "atleast_1d",
    "atleast_2d", "atleast_3d", "tensor_split", "hsplit", "vsplit", "dsplit",
    "as_strided", "as_strided_scatter", "diagonal", "diag", "diag_embed",
    "contiguous", "clone", "ravel", "broadcast_to", "broadcast_tensors",
    "block_diag", "triu", "tril", "unfold", "unfold_copy", "view_copy",
    "alias_copy", "expand_copy", "permute_copy", "squeeze_copy", "t_copy",
    "transpose_copy", "unsqueeze_copy", "view_as_real", "view_as_complex",
    "real", "imag", "conj", "conj_physical", "resolve_conj", "resolve_neg",
    "positive", "to", "type_as", "double", "float", "half", "bfloat16",
    "int", "long", "short", "bool", "byte", "char", "cfloat", "cdouble",
    "chalf", "_unsafe_masked_index",
}
INDEX_WORDS = ("index", "gather", "scatter", "take", "put", "masked",
               "select", "slice", "nonzero", "where", "searchsorted",
               "bucketize", "argwhere", "unique", "sort", "topk", "kthvalue")


def category(op):
    """A coarse family for the summary table."""
    name = op.name
    cls = type(op).__name__
    if is_random(op):
        return "random"
    if name.startswith("linalg.") or name in {
            "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv",
            "addr", "mv", "dot", "vdot", "inner", "outer", "ger", "kron",
            "cholesky", "cholesky_inverse", "cholesky_solve", "inverse",
            "det", "logdet", "slogdet", "pinverse", "svd", "svd_lowrank",
            "pca_lowrank", "qr", "lu", "lu_solve", "lu_unpack", "geqrf",
            "ormqr", "triangular_solve", "symeig", "matrix_exp", "tensordot",
            "einsum", "chain_matmul", "trace", "cross", "norm",
            "__rmatmul__", "addmm_decomposed", "addcmul", "addcdiv",
            "_addmm_activation", "cdist", "corrcoef", "cov"}:
        return "linalg"
    if name.startswith("fft."):
        return "fft"
    if name.startswith("nn.functional.") or name.startswith("_softmax") or \
            name in {"softmax", "log_softmax"}:
        return "nn.functional"
    if cls == "ReductionOpInfo":
        return "reduction"
    if name in SHAPE_OPS or cls == "ShapeFuncInfo":
        return "shape/view"
    if any(word in name for word in INDEX_WORDS):
        return "indexing"
    if cls == "UnaryUfuncInfo" or name.startswith("special."):
        return "elementwise unary"
    if cls == "BinaryUfuncInfo":
        return "elementwise binary"
    return "other"


def is_random(op):
    """Ops whose values cannot be compared: random draws and uninitialized
    memory (empty*)."""
    name = op.name
    return name in RANDOM_OPS or any(word in name for word in RANDOM_WORDS)


def pair_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def first_line(error):
    text = f"{type(error).__name__}: {error}".strip()
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return type(error).__name__


class SampleTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raises SampleTimeout in the main thread after `seconds` (only when
    the interpreter regains control: a hung C++ call is left to Bazel's
    test timeout)."""

    def expire(signum, frame):
        raise SampleTimeout(f"sample took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class CpuError(Exception):
    """The reference run failed: the pair is skipped, not failed."""


class Mismatch(AssertionError):
    pass


def load_known_failures(path=KNOWN_FAILURES):
    known = {}
    if not os.path.exists(path):
        return known
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2:
                raise ValueError(f"{path}:{number}: expected 'op dtype  # "
                                 f"reason', got {raw!r}")
            reason = raw.split("#", 1)[1].strip() if "#" in raw else ""
            known[(fields[0], fields[1])] = reason
    return known


class Runner:

    def __init__(self, torch, samples_per_pair, sample_timeout, verbose):
        self.torch = torch
        self.samples_per_pair = samples_per_pair
        self.sample_timeout = sample_timeout
        self.verbose = verbose
        from torch.utils import _pytree
        self.pytree = _pytree

    # -- moving and comparing -------------------------------------------

    def move_tensor(self, tensor):
        """`tensor` on openreg with the same storage layout: the whole
        storage is copied and the same view (sizes, strides, offset) taken,
        so partial views, expanded (stride 0) and overlapping inputs reach
        the device as they are (`.to()` would compact them)."""
        torch = self.torch
        tensor = tensor.detach()
        if (tensor.layout != torch.strided or tensor.is_conj() or
                tensor.is_neg()):
            return tensor.to("openreg")
        storage = tensor.untyped_storage()
        elements = storage.nbytes() // tensor.element_size()
        flat = torch.empty(0, dtype=tensor.dtype).set_(storage, 0,
                                                       (elements,), (1,))
        return flat.to("openreg").as_strided(tensor.shape, tensor.stride(),
                                             tensor.storage_offset())

    def to_device(self, value, keep_grad=False):
        torch = self.torch

        def move(x):
            if not isinstance(x, torch.Tensor):
                return x
            moved = self.move_tensor(x)
            if keep_grad and x.requires_grad:
                moved.requires_grad_(True)
            return moved

        return self.pytree.tree_map(move, value)

    def device_kwargs(self, kwargs):
        """Factory functions name their device: CPU becomes openreg."""
        if "device" not in kwargs:
            return kwargs
        return dict(kwargs, device="openreg")

    def detached_leaves(self, value):
        """Same tensors as leaves (sample inputs may be non-leaf views)."""
        torch = self.torch

        def leaf(x):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                return x.detach().requires_grad_(True)
            return x

        return self.pytree.tree_map(leaf, value)

    def tolerance(self, dtype):
        torch = self.torch
        # torch.testing's defaults, widened a little for the 16-bit types:
        # the daemon runs the same CPU kernels, but strides may differ and
        # change the summation order.
        # 16-bit floats get a few ulps (fp16: 2**-10, bf16: 2**-7).
        table = {
            torch.float16: (4e-3, 1e-3),
            torch.bfloat16: (3.2e-2, 1e-2),
            torch.float32: (1.3e-6, 1e-5),
            torch.float64: (1e-7, 1e-7),
            torch.complex32: (1e-3, 1e-5),
            torch.complex64: (1.3e-6, 1e-5),
            torch.complex128: (1e-7, 1e-7),
        }
        return table.get(dtype, (0.0, 0.0))

    def compare(self, expected, actual, random, what="output"):
        torch = self.torch
        flat_expected, spec_expected = self.pytree.tree_flatten(expected)
        flat_actual, spec_actual = self.pytree.tree_flatten(actual)
        if len(flat_expected) != len(flat_actual):
            raise Mismatch(f"{what}: {len(flat_actual)} values on openreg, "
                           f"{len(flat_expected)} on CPU")
        for index, (e, a) in enumerate(zip(flat_expected, flat_actual)):
            where = f"{what} {index}"
            if isinstance(e, torch.Tensor):
                if not isinstance(a, torch.Tensor):
                    raise Mismatch(f"{where}: {type(a).__name__} on openreg, "
                                   "tensor on CPU")
                if a.device.type != "openreg":
                    raise Mismatch(f"{where}: on {a.device}, not openreg")
                if a.dtype != e.dtype or a.shape != e.shape:
                    raise Mismatch(f"{where}: {a.dtype}{list(a.shape)} on "
                                   f"openreg, {e.dtype}{list(e.shape)} on CPU")
                if random:
                    continue
                host = a.cpu()
                rtol, atol = self.tolerance(e.dtype)
                try:
                    torch.testing.assert_close(
                        host, e.detach(), rtol=rtol, atol=atol,
                        equal_nan=True, check_stride=False,
                        check_layout=True)
                except AssertionError as error:
                    raise Mismatch(f"{where}: {first_line(error)} "
                                   f"{' '.join(str(error).split())[:200]}")
            elif isinstance(e, float) and isinstance(a, float):
                if not random and not (
                        math.isclose(e, a, rel_tol=1e-5, abs_tol=1e-6) or
                        (math.isnan(e) and math.isnan(a))):
                    raise Mismatch(f"{where}: {a} on openreg, {e} on CPU")
            elif type(e) is not type(a):
                raise Mismatch(f"{where}: {type(a).__name__} on openreg, "
                               f"{type(e).__name__} on CPU")
            elif not random and e != a and not (
                    isinstance(e, torch.Size) or e is None):
                raise Mismatch(f"{where}: {a!r} on openreg, {e!r} on CPU")

    # -- one sample -------------------------------------------------------

    def run_forward(self, op, sample, random):
        torch = self.torch
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception as error:
            raise CpuError(first_line(error))
        if op.name in HOST_ARGUMENT_OPS:
            args = (self.to_device(sample.input), sample.args,
                    self.device_kwargs(sample.kwargs))
        else:
            args = self.to_device((sample.input, sample.args,
                                   self.device_kwargs(sample.kwargs)))
        actual = op(args[0], *args[1], **args[2])
        # Kernel errors surface at the next synchronization: here, so that
        # they are charged to this op.
        torch.openreg.synchronize()
        self.compare(expected, actual, random)

    def random_sample(self, sample):
        """Samples of deterministic ops that draw random numbers anyway
        (scaled_dot_product_attention with dropout)."""
        dropout = sample.kwargs.get("dropout_p", 0.0)
        return isinstance(dropout, float) and dropout > 0.0

    def grad_inputs(self, value):
        torch = self.torch
        return [x for x in self.pytree.tree_leaves(value)
                if isinstance(x, torch.Tensor) and x.requires_grad]

    def loss(self, outputs):
        torch = self.torch
        total = None
        for out in self.pytree.tree_leaves(outputs):
            if isinstance(out, torch.Tensor) and out.requires_grad:
                term = out.sum()
                if term.is_complex():
                    term = term.real + term.imag
                total = term if total is None else total + term
        return total

    def run_backward(self, op, sample):
        """Gradients of the sum of the outputs w.r.t. every input that
        requires grad, on CPU and openreg."""
        torch = self.torch
        cpu_args = self.detached_leaves(
            (sample.input, sample.args, sample.kwargs))
        cpu_inputs = self.grad_inputs(cpu_args)
        if not cpu_inputs:
            return False
        try:
            cpu_out = op(cpu_args[0], *cpu_args[1], **cpu_args[2])
            cpu_loss = self.loss(cpu_out)
            if cpu_loss is None:
                return False
            expected = torch.autograd.grad(cpu_loss, cpu_inputs,
                                           allow_unused=True)
        except Exception as error:
            raise CpuError("grad: " + first_line(error))
        if op.name in HOST_ARGUMENT_OPS:
            dev_args = (self.to_device(cpu_args[0], keep_grad=True),
                        *cpu_args[1:])
        else:
            dev_args = self.to_device(cpu_args, keep_grad=True)
        dev_inputs = self.grad_inputs(dev_args)
        dev_out = op(dev_args[0], *dev_args[1], **dev_args[2])
        dev_loss = self.loss(dev_out)
        if dev_loss is None:
            raise Mismatch("grad: no output requires grad on openreg")
        actual = torch.autograd.grad(dev_loss, dev_inputs, allow_unused=True)
        self.compare(list(expected), list(actual), random=False, what="grad")
        return True

    # -- one (op, dtype) pair --------------------------------------------

    def samples(self, op, dtype, requires_grad):
        generator = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
        taken = []
        for sample in generator:
            taken.append(sample)
            if len(taken) >= self.samples_per_pair:
                break
        return taken

    def run_pair(self, op, dtype):
        """Returns ("passed"|"failed"|"skipped", detail)."""
        torch = self.torch
        random = is_random(op)
        ran = 0
        cpu_errors = []
        try:
            with time_limit(self.sample_timeout * (self.samples_per_pair + 1)):
                samples = self.samples(op, dtype, requires_grad=False)
        except Exception as error:
            return "skipped", "sample generator: " + first_line(error)
        for index, sample in enumerate(samples):
            try:
                torch.manual_seed(index)
                with time_limit(self.sample_timeout):
                    self.run_forward(op, sample,
                                     random or self.random_sample(sample))
                ran += 1
            except CpuError as error:
                cpu_errors.append(str(error))
            except Exception as error:  # noqa: BLE001 - counted as failure
                if self.verbose:
                    traceback.print_exc()
                return "failed", f"sample {index}: {first_line(error)}"
        grad = (op.supports_autograd and not random and
                str(dtype).split(".")[-1] in GRAD_DTYPE_NAMES and
                dtype in op.supported_backward_dtypes("cpu"))
        if grad and ran:
            try:
                with time_limit(self.sample_timeout *
                                (self.samples_per_pair + 1)):
                    grad_samples = self.samples(op, dtype, requires_grad=True)
            except Exception:  # noqa: BLE001 - no gradient samples
                grad_samples = []
            for index, sample in enumerate(grad_samples):
                if self.random_sample(sample):
                    continue
                try:
                    torch.manual_seed(index)
                    with time_limit(self.sample_timeout):
                        self.run_backward(op, sample)
                except CpuError:
                    continue
                except Exception as error:  # noqa: BLE001
                    if self.verbose:
                        traceback.print_exc()
                    return "failed", f"grad sample {index}: {first_line(error)}"
        if ran == 0:
            reason = cpu_errors[0] if cpu_errors else "no samples"
            return "skipped", "cpu: " + reason
        return "passed", ""


def select_ops(op_db, pattern, shard, shards):
    ops = sorted(op_db, key=lambda op: (pair_name(op)))
    if pattern:
        regex = re.compile(pattern)
        ops = [op for op in ops if regex.search(pair_name(op))]
    return ops[shard::shards]


def pair_dtypes(torch, op):
    supported = op.supported_dtypes("cpu")
    return [getattr(torch, name) for name in DTYPE_NAMES
            if getattr(torch, name) in supported]


def print_summary(results, categories, out=sys.stdout):
    table = collections.OrderedDict()
    for (name, dtype), (status, _) in sorted(results.items()):
        row = table.setdefault(categories[name], collections.Counter())
        row[status] += 1
    total = collections.Counter()
    print(f"{'category':<20} {'passed':>7} {'failed':>7} {'skipped':>8} "
          f"{'pass %':>7}", file=out)
    for name in sorted(table):
        row = table[name]
        total.update(row)
        ran = row["passed"] + row["failed"]
        rate = 100.0 * row["passed"] / ran if ran else 100.0
        print(f"{name:<20} {row['passed']:>7} {row['failed']:>7} "
              f"{row['skipped']:>8} {rate:>6.1f}%", file=out)
    ran = total["passed"] + total["failed"]
    rate = 100.0 * total["passed"] / ran if ran else 100.0
    print(f"{'total':<20} {total['passed']:>7} {total['failed']:>7} "
          f"{total['skipped']:>8} {rate:>6.1f}%", file=out)
    return total


def check_known(results, known):
    """Unlisted failures and listed pairs that pass; both fail the run."""
    unexpected = []
    fixed = []
    for key, (status, detail) in sorted(results.items()):
        if status == "failed" and key not in known:
            unexpected.append((key, detail))
        if status == "passed" and key in known:
            fixed.append(key)
    return unexpected, fixed


def import_packages():
    """Makes torch_openreg and daemon_fixture importable. Under Bazel the
    runfiles provide both; run by hand from a source tree, the package
    assembled by `bazel build //tests/python/conformance/...` is used (not
    a possibly stale pip-installed copy)."""
    sys.path.insert(0, os.path.dirname(HERE))  # daemon_fixture
    if "TEST_SRCDIR" in os.environ:
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    runfiles = os.path.join(root, "bazel-bin", "tests", "python",
                            "conformance", "conformance_shard_0.runfiles",
                            "openreg", "python")
    if os.path.isdir(runfiles):
        sys.path.insert(0, runfiles)


def run_worker(args, results_path, resume_after):
    """Runs the selected pairs in this process, appending one JSON line per
    pair to `results_path` ("start" before, "result" after), so that the
    parent can tell which pair a crash interrupted."""
    import torch
    import torch_openreg  # noqa: F401 - registers the device
    from torch.testing._internal.common_methods_invocations import op_db

    shard, shards = (int(x) for x in args.shard.split("/"))
    runner = Runner(torch, args.samples, args.sample_timeout, args.verbose)
    skipping = resume_after is not None
    with open(results_path, "a") as out:

        def record(**fields):
            out.write(json.dumps(fields) + "\n")
            out.flush()

        for op in select_ops(op_db, args.ops, shard, shards):
            name = pair_name(op)
            for dtype in pair_dtypes(torch, op):
                dtype_name = str(dtype).split(".")[-1]
                if skipping:
                    skipping = [name, dtype_name] != resume_after
                    continue
                record(start=[name, dtype_name])
                status, detail = runner.run_pair(op, dtype)
                record(result=[name, dtype_name, status, detail, category(op)])
                if status == "failed" or args.verbose:
                    print(f"{status.upper():8} {name} {dtype_name}  {detail}",
                          flush=True)
        record(done=True)


def read_records(path):
    records = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records


def run_parent(args):
    """Owns the daemon; runs the pairs in worker processes, restarting a
    worker (and the daemon, if it died) after a crash, which counts as the
    failure of the pair that was running."""
    import_packages()
    from daemon_fixture import Daemon

    # Bazel stops a test that times out with SIGTERM: turn it into an
    # exception so that the worker and the daemon are still stopped.
    def terminate(signum, frame):
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    results = {}
    categories = {}
    folder = tempfile.mkdtemp(prefix="openreg-conformance-")
    results_path = os.path.join(folder, "results.jsonl")
    daemon = None
    worker = None
    resume_after = None
    try:
        while True:
            if daemon is None or not daemon.alive():
                if daemon is not None:
                    print("the daemon died; its log:\n" + daemon.log())
                    daemon.stop()
                daemon = Daemon(devices=1, memory_per_device="4GiB").start()
            command = [sys.executable, os.path.abspath(__file__), "--worker",
                       "--results", results_path, "--shard", args.shard,
                       "--ops", args.ops, "--samples", str(args.samples),
                       "--sample-timeout", str(args.sample_timeout)]
            if args.verbose:
                command.append("--verbose")
            if resume_after is not None:
                command += ["--resume-after", json.dumps(resume_after)]
            env = dict(os.environ, OPENREG_DAEMON_SOCKET=daemon.socket,
                       OPENREG_AUTOSPAWN="0",
                       PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            worker = subprocess.Popen(command, env=env)
            code = worker.wait()
            worker = None
            records = read_records(results_path)
            running = None
            for record in records:
                if "start" in record:
                    running = tuple(record["start"])
                elif "result" in record:
                    name, dtype, status, detail, family = record["result"]
                    results[(name, dtype)] = (status, detail)
                    categories[name] = family
                    running = None
            if records and "done" in records[-1]:
                break
            if running is None:
                raise SystemExit(f"the worker exited with {code} outside "
                                 "any (op, dtype) pair")
            detail = (f"crashed the client (exit {code})" if daemon.alive()
                      else "crashed the daemon")
            print(f"FAILED   {running[0]} {running[1]}  {detail}", flush=True)
            results[running] = ("failed", detail)
            with open(results_path, "a") as out:
                out.write(json.dumps(
                    {"result": [*running, "failed", detail, "crash"]}) + "\n")
            categories.setdefault(running[0], "crash")
            resume_after = list(running)
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return results, categories


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shard", default="0/1",
                        help="i/N: run every N-th op starting at i")
    parser.add_argument("--ops", default="",
                        help="regex on 'op.variant' names")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-category table")
    parser.add_argument("--check", action="store_true",
                        help="fail on failures not in known_failures.txt "
                        "and on listed pairs that pass")
    parser.add_argument("--samples", type=int, default=3,
                        help="samples per (op, dtype)")
    parser.add_argument("--sample-timeout", type=float, default=20.0)
    parser.add_argument("--failures-out", default="",
                        help="write failures in known_failures.txt format")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    parser.add_argument("--resume-after", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        run_worker(args, args.results,
                   json.loads(args.resume_after) if args.resume_after else None)
        return 0

    started = time.monotonic()
    results, categories = run_parent(args)
    elapsed = time.monotonic() - started
    if args.failures_out:
        with open(args.failures_out, "w") as f:
            for (name, dtype), (status, detail) in sorted(results.items()):
                if status == "failed":
                    f.write(f"{name} {dtype}  # {detail}\n")
    print(f"\nshard {args.shard}: {len(categories)} ops, {len(results)} "
          f"(op, dtype) pairs in {elapsed:.0f} s")
    if args.summary or args.check:
        print_summary(results, categories)
    if not args.check:
        return 0
    unexpected, fixed = check_known(results, load_known_failures())
    for (name, dtype), detail in unexpected:
        print(f"NEW FAILURE: {name} {dtype}  # {detail}")
    for name, dtype in fixed:
        print(f"NOW PASSES: {name} {dtype} -- remove this line from "
              f"tests/python/conformance/known_failures.txt")
    counts = collections.Counter(status for status, _ in results.values())
    ok = not unexpected and not fixed
    print(f"{'OK' if ok else 'FAILED'}: {counts['passed']} passed, "
          f"{counts['failed']} failed ({counts['failed'] - len(unexpected)} "
          f"known), {counts['skipped']} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
