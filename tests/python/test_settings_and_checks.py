"""The client's settings reach the daemon's kernels, and arguments on the
wrong device are refused at the call, as on CUDA.

The device-generic tests use PyTorch's own infrastructure
(instantiate_device_type_tests): each runs on CPU (the reference) and on
openreg, and compares openreg with CPU where the result is a value. One
daemon serves the module."""

import copy
import subprocess
import sys
import warnings

import pytest
import torch

from daemon_fixture import process_daemon, python_env

# Started before torch.testing._internal is imported: importing it asks
# whether the device is available, which connects (and would spawn a
# default daemon otherwise).
DAEMON = process_daemon(devices=1)

from torch.testing._internal.common_device_type import (  # noqa: E402
    instantiate_device_type_tests)
from torch.testing._internal.common_utils import (  # noqa: E402
    DeterministicGuard, TestCase)

_UPDATES = 100000


def _duplicate_index_inputs():
    """Many updates into few slots, values of very different magnitudes: the
    order of accumulation shows in float32 results."""
    generator = torch.Generator().manual_seed(0)
    index = torch.randint(0, 7, (_UPDATES,), generator=generator)
    values = (torch.randn(_UPDATES, generator=generator) *
              torch.logspace(-3, 3, _UPDATES)[
                  torch.randperm(_UPDATES, generator=generator)])
    return index, values


class TestSettingsReachKernels(TestCase):
    def test_default_dtype_switched_back_and_forth(self, device):
        for dtype in (torch.float64, torch.float32, torch.float64,
                      torch.float32):
            with _default_dtype(dtype):
                result = torch.ones(3, dtype=torch.uint8, device=device) + 0.1
                quotient = (torch.arange(1, 4, device=device) /
                            torch.tensor(3, device=device))
                self.assertEqual(result.dtype, dtype)
                self.assertEqual(quotient.dtype, dtype)
                # Computed in that dtype, not converted afterwards.
                expected = torch.ones(3, dtype=torch.uint8) + 0.1
                self.assertEqual(result.cpu(), expected, atol=0, rtol=0)
                self.assertEqual(quotient.cpu(),
                                 torch.arange(1, 4) / torch.tensor(3),
                                 atol=0, rtol=0)

    def test_default_dtype_reaches_factory_kernels(self, device):
        with _default_dtype(torch.float64):
            values = torch.linspace(0, 1, 7, device=device)
            self.assertEqual(values.dtype, torch.float64)
            self.assertEqual(values.cpu(), torch.linspace(0, 1, 7),
                             atol=0, rtol=0)

    def test_deterministic_index_put_accumulate_equals_cpu(self, device):
        index, values = _duplicate_index_inputs()

        def run():
            return torch.zeros(7, device=device).index_put_(
                (index.to(device),), values.to(device), accumulate=True)

        with DeterministicGuard(True):
            deterministic = run().cpu()
        with DeterministicGuard(True):
            reference = torch.zeros(7).index_put_((index,), values,
                                                  accumulate=True)
        # CPU's other (sequential) order almost always gives another result
        # for these inputs, so a daemon that ignored the mode would fail.
        self.assertEqual(deterministic, reference, atol=0, rtol=0)

    def test_deterministic_index_copy_equals_cpu(self, device):
        index, _ = _duplicate_index_inputs()
        source = torch.arange(_UPDATES, dtype=torch.float32)
        with DeterministicGuard(True):
            result = torch.zeros(7, device=device).index_copy_(
                0, index.to(device), source.to(device)).cpu()
            reference = torch.zeros(7).index_copy_(0, index, source)
        self.assertEqual(result, reference, atol=0, rtol=0)

    def test_deterministic_scatter_add_equals_cpu(self, device):
        index, values = _duplicate_index_inputs()
        with DeterministicGuard(True):
            result = torch.zeros(7, device=device).scatter_add_(
                0, index.to(device), values.to(device)).cpu()
            reference = torch.zeros(7).scatter_add_(0, index, values)
        self.assertEqual(result, reference, atol=0, rtol=0)

    def test_empty_is_filled_under_deterministic_mode(self, device):
        with DeterministicGuard(True):
            floats = torch.empty(5, device=device).cpu()
            ints = torch.empty(5, dtype=torch.int32, device=device).cpu()
        self.assertTrue(floats.isnan().all())
        self.assertTrue((ints == torch.iinfo(torch.int32).max).all())



class TestOutArguments(TestCase):
    """An out= tensor of any layout is written exactly where CPU writes it,
    and nothing outside it is touched."""

    _SEQUENCES = [
        ("arange", lambda out: torch.arange(0, 4, out=out)),
        ("linspace", lambda out: torch.linspace(0, 3, 4, out=out)),
        ("logspace", lambda out: torch.logspace(0, 3, 4, out=out)),
    ]

    def _views(self, device):
        """(name, base, out) with a sentinel-filled base and a 4-element
        non-contiguous view of it."""
        narrowed = torch.full((2, 3), -7.0, device=device)
        transposed = torch.full((2, 2), -7.0, device=device)
        offset = torch.full((9,), -7.0, device=device)
        return [("narrowed", narrowed, narrowed.narrow(1, 1, 2)),
                ("transposed", transposed, transposed.t()),
                ("strided with offset", offset, offset[1::2])]

    def test_sequence_ops_fill_a_non_contiguous_out_as_cpu(self, device):
        for op_name, op in self._SEQUENCES:
            for (view, base, out), (_, cpu_base, cpu_out) in zip(
                    self._views(device), self._views("cpu")):
                with self.subTest(op=op_name, view=view):
                    op(out)
                    op(cpu_out)
                    self.assertEqual(out.cpu(), cpu_out, atol=0, rtol=0)
                    # The sentinel outside the view is where CPU left it.
                    self.assertEqual(base.cpu(), cpu_base, atol=0, rtol=0)

    def test_a_wrongly_sized_out_is_resized_as_on_cpu(self, device):
        base = torch.full((2, 3), -7.0, device=device)
        out = base.narrow(1, 1, 2)
        cpu_base = torch.full((2, 3), -7.0)
        cpu_out = cpu_base.narrow(1, 1, 2)
        with self.assertWarnsRegex(UserWarning, "resized"):
            torch.arange(0, 3, out=out)
        with self.assertWarnsRegex(UserWarning, "resized"):
            torch.arange(0, 3, out=cpu_out)
        self.assertEqual(out.shape, cpu_out.shape)
        self.assertEqual(out.stride(), cpu_out.stride())
        self.assertEqual(base.cpu(), cpu_base, atol=0, rtol=0)


    def test_a_resized_out_warns_in_cpus_words_at_every_call(self, device):
        x = torch.ones(3, device=device)
        for out_size, expected in [(3, 0), (0, 0), (2, 1), (2, 1)]:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.add(x, 1, out=torch.empty(out_size, device=device))
            messages = [str(warning.message) for warning in caught]
            self.assertEqual(len(messages), expected, messages)
            for message in messages:
                self.assertIn(
                    "resized since it had shape [2], which does not match "
                    "the required output shape [3].", message)

    def test_an_in_place_op_never_resizes_its_self(self, device):
        # Some of torch's Meta kernels would resize self to the broadcast
        # shape; CPU refuses, and so must openreg, before writing anything.
        other = torch.full((3, 2), 2.0, device=device)
        for name in ["pow_", "atan2_", "copysign_", "fmod_", "remainder_",
                     "hypot_", "add_", "mul_"]:
            with self.subTest(op=name):
                self_ = torch.full((2,), 3.0, device=device)
                with self.assertRaisesRegex(
                        RuntimeError, r"output with shape \[2\] doesn't "
                        r"match the broadcast shape \[3, 2\]"):
                    getattr(self_, name)(other)
                self.assertEqual(self_.shape, (2,))
                self.assertEqual(self_.cpu(), torch.full((2,), 3.0))


class TestOutputMetadataMatchesCpu(TestCase):
    """Where torch 2.13's Python Meta kernels disagree with CPU's kernels,
    openreg follows CPU, at the call."""

    def test_nan_reductions_over_an_empty_dim_list_reduce_everything(self,
                                                                    device):
        x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])
        for op in (torch.nansum, torch.nanmean):
            for keepdim in (False, True):
                with self.subTest(op=op.__name__, keepdim=keepdim):
                    result = op(x.to(device), dim=[], keepdim=keepdim)
                    expected = op(x, dim=[], keepdim=keepdim)
                    self.assertEqual(result.shape, expected.shape)
                    self.assertEqual(result.cpu(), expected)

    def test_a_channels_last_network_has_cpu_layouts_at_every_layer(
            self, device):
        # torch 2.13's Meta kernel of convolution answers contiguous (meta
        # tensors have no backend); CPU's mkldnn path gives channels_last,
        # and every later layer follows the layout it is given.
        torch.manual_seed(0)
        cpu_net = _residual_net().to(memory_format=torch.channels_last)
        net = copy.deepcopy(cpu_net).to(device)
        x = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
        cpu_strides, cpu_grads = _layer_strides(cpu_net, x)
        strides, grads = _layer_strides(net, x.to(device))
        self.assertEqual(strides, cpu_strides)
        self.assertEqual(grads, cpu_grads)
        for dims, conv in ((1, torch.nn.Conv1d(3, 4, 3)),
                           (3, torch.nn.Conv3d(3, 4, 3)),
                           (2, torch.nn.ConvTranspose2d(3, 4, 3))):
            with self.subTest(conv=type(conv).__name__):
                formats = {2: torch.channels_last, 3: torch.channels_last_3d}
                x = torch.randn(2, 3, *([6] * dims))
                if dims in formats:
                    x = x.to(memory_format=formats[dims])
                expected = conv(x)
                result = copy.deepcopy(conv).to(device)(x.to(device))
                self.assertEqual(result.stride(), expected.stride())
                self.assertEqual(result.cpu(), expected)

    def test_tensors_of_more_than_64_dims_work_where_cpu_allows_them(
            self, device):
        x = torch.arange(2.0).reshape([1] * 64 + [2]).to(device)
        # (assertEqual itself cannot compare tensors of over 64 dims)
        self.assertEqual((x + 1).cpu().reshape(-1), torch.tensor([1.0, 2.0]))
        self.assertEqual(x.sum().item(), 1.0)
        self.assertEqual((x * x).shape, x.shape)

    def test_new_empty_strided_with_zero_strides(self, device):
        base = torch.ones(1, device=device)
        result = base.new_empty_strided((2, 3, 4), (0, 0, 0))
        self.assertEqual(result.shape, (2, 3, 4))
        self.assertEqual(result.stride(), (0, 0, 0))
        # The next op is clean.
        self.assertEqual((base * 2).cpu(), torch.full((1,), 2.0))



class _ResidualBlock(torch.nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1,
                               bias=False)
        self.norm1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1,
                               bias=False)
        self.norm2 = nn.BatchNorm2d(channels_out)
        self.down = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
            nn.BatchNorm2d(channels_out))

    def forward(self, x):
        y = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(y)) + self.down(x))


def _residual_net():
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, 2, 1), _ResidualBlock(16, 32, 2),
        _ResidualBlock(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10))


def _layer_strides(net, x):
    """The strides of every layer's output and of every gradient."""
    strides = []
    for layer in net:
        x = layer(x)
        strides.append(x.stride())
    x.sum().backward()
    return strides, [p.grad.stride() for p in net.parameters()]


def _uint8_mask_index(device):
    x = torch.arange(3.0, device=device)
    mask = torch.tensor([1, 0, 1], dtype=torch.uint8, device=device)
    return x[mask]


class TestKernelWarnings(TestCase):
    """Warnings a daemon kernel raises reach the user as Python warnings,
    with CPU's category and message, through the `warnings` filters."""

    def test_a_kernel_warning_is_a_python_warning(self, device):
        with self.assertWarnsRegex(
                UserWarning, "indexing with dtype torch.uint8 is now deprecated"):
            result = _uint8_mask_index(device)
        self.assertEqual(result.cpu(), torch.tensor([0.0, 2.0]))

    def test_an_asynchronous_kernel_warns_at_every_call(self, device):
        # std's kernel warns for every call (TORCH_WARN); on openreg the op
        # runs asynchronously after its first, checked launch.
        x = torch.ones(1, device=device)
        for _ in range(3):
            with self.assertWarnsRegex(UserWarning,
                                       "degrees of freedom is <= 0"):
                result = x.std()
        self.assertTrue(result.isnan().item())

    def test_a_warn_once_site_warns_for_each_call_under_warn_always(
            self, device):
        # TORCH_WARN_ONCE: searchsorted's warning for a non-contiguous
        # boundary tensor. Under set_warn_always(True) CPU warns at every
        # call; openreg's daemon always does (once per daemon would mean
        # once for its first client only).
        boundaries = torch.arange(6.0).reshape(3, 2).t().to(device)
        values = torch.ones(2, 2, device=device)
        previous = torch.is_warn_always_enabled()
        torch.set_warn_always(True)
        try:
            for _ in range(2):
                with self.assertWarnsRegex(UserWarning, "non-contiguous"):
                    result = torch.searchsorted(boundaries, values)
        finally:
            torch.set_warn_always(previous)
        self.assertEqual(result.cpu(),
                         torch.searchsorted(boundaries.cpu(), values.cpu()))

    def test_a_warn_once_site_warns_once_per_process(self, device):
        # As on CPU, per client process: a fresh process warns at its first
        # call only, and exactly once per call under set_warn_always(True)
        # (the daemon runs every kernel with warn-always on, and marks which
        # warnings came from TORCH_WARN_ONCE).
        code = f"""
import warnings, torch
boundaries = torch.arange(6.0).reshape(3, 2).t().to("{device}")
values = torch.ones(2, 2, device="{device}")
def count():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.searchsorted(boundaries, values)
        torch.ones(1, device="{device}").sum().item()  # a synchronization
    return sum("non-contiguous" in str(w.message) for w in caught)
print([count() for _ in range(3)])
torch.set_warn_always(True)
print([count() for _ in range(2)])
"""
        run = subprocess.run([sys.executable, "-c", code], env=python_env(),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.split("\n")[:2], ["[1, 0, 0]", "[1, 1]"])

    def test_reduced_losses_warn_nothing_cpu_does_not(self, device):
        # The daemon runs mse_loss as its out= overload, which resizes the
        # output on the way; that resize must not surface as a warning.
        a = torch.randn(16, 1, device=device)
        b = torch.randn(16, 1, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for reduction in ("mean", "sum"):
                loss = torch.nn.functional.mse_loss(a, b, reduction=reduction)
                expected = torch.nn.functional.mse_loss(
                    a.cpu(), b.cpu(), reduction=reduction)
                self.assertEqual(loss.cpu(), expected)

    def test_warning_filters_apply(self, device):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with self.assertRaisesRegex(UserWarning, "torch.uint8"):
                _uint8_mask_index(device)
        # The failed call left the device clean.
        self.assertEqual((torch.ones(2, device=device) * 3).cpu(),
                         torch.full((2,), 3.0))


class _num_threads:
    def __init__(self, threads):
        self.threads = threads

    def __enter__(self):
        self.previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        torch.set_num_threads(self.previous)


class TestResultsDoNotDependOnTheDaemon(TestCase):
    """Kernels whose order of accumulation depends on how ATen splits them
    give CPU's exact result at the client's thread count: the daemon runs
    them with that count (KernelSettings.intra_op_threads)."""

    def _check_bitwise(self, device, compute, *inputs):
        expected = compute(*inputs)
        on_device = compute(*[t.to(device) for t in inputs])
        self.assertEqual(on_device.cpu(), expected.cpu(), atol=0, rtol=0)

    def test_bfloat16_index_put_accumulate_at_each_thread_count(self, device):
        generator = torch.Generator().manual_seed(0)
        index = torch.randint(0, 2000, (400000,), generator=generator)
        values = torch.randn(400000, 256, generator=generator).bfloat16()
        target = torch.zeros(2000, 256, dtype=torch.bfloat16)
        for threads in (1, 2, 3):
            with _num_threads(threads):
                self._check_bitwise(
                    device,
                    lambda t, i, v: t.clone().index_put_((i,), v,
                                                    accumulate=True),
                    target, index, values)

    def test_low_precision_reductions_of_a_strided_input(self, device):
        generator = torch.Generator().manual_seed(1)
        base = torch.randn(4097, 1031, generator=generator)
        for dtype in (torch.bfloat16, torch.float16):
            for threads in (1, 2):
                with _num_threads(threads):
                    for reduce in (torch.nansum, torch.nanmean, torch.sum):
                        self._check_bitwise(
                            device, lambda t: reduce(t[:, ::2]),
                            base.to(dtype))


def _put_unbroadcastable(t: torch.Tensor, index: torch.Tensor,
                         values: torch.Tensor) -> torch.Tensor:
    t[:, :, index] = values
    return t


class TestWhereAnAcceleratorDiffersFromCpu(TestCase):
    """Where PyTorch's device-generic tests expect an accelerator to differ
    from CPU, openreg does what CUDA (the reference accelerator) does."""

    def test_integer_fmod_and_remainder_by_zero_give_cudas_values(self,
                                                                   device):
        for dtype in [torch.uint8, torch.int8, torch.int16, torch.int32,
                      torch.int64]:
            low = 0 if dtype == torch.uint8 else -9
            x = torch.arange(low, 10, device=device).to(dtype)
            zero = torch.zeros_like(x)
            for op in [torch.fmod, torch.remainder]:
                with self.subTest(dtype=dtype, op=op.__name__):
                    if self.device_type == "cpu":
                        with self.assertRaisesRegex(RuntimeError,
                                                    "ZeroDivisionError"):
                            op(x, zero)
                        continue
                    result = op(x, zero)
                    if dtype == torch.int64:
                        expected = torch.where(x >= 0, 4294967295, -1)
                    else:
                        expected = torch.full_like(x, 255 if dtype ==
                                                   torch.uint8 else -1)
                    self.assertEqual(result, expected, exact_dtype=False)
                    self.assertEqual(op(x, 0), expected, exact_dtype=False)
                    # A non-zero divisor is CPU's answer, element by element.
                    divisor = torch.where(x % 2 == 0, 0, 3).to(dtype)
                    mixed = op(x, divisor).cpu()
                    nonzero = divisor.cpu() != 0
                    self.assertEqual(mixed[nonzero],
                                     op(x.cpu()[nonzero],
                                        divisor.cpu()[nonzero]))

    def test_index_put_of_unbroadcastable_values_fails_in_cudas_words(
            self, device):
        # CUDA's sort-based index_put_ (accumulate, or deterministic mode)
        # fails in expand; CPU's kernel in its own check.
        expected = ("shape mismatch" if self.device_type == "cpu" else
                    r"The expanded size of the tensor \(3\) must match the "
                    r"existing size \(6\) at non-singleton dimension 1")
        t = torch.zeros(2, 3, 4, device=device)
        index = torch.tensor([0, 1], device=device)
        values = torch.randn(6, 2, device=device)
        with DeterministicGuard(True):
            with self.assertRaisesRegex(RuntimeError, expected):
                t[..., index] = values
        with self.assertRaisesRegex(RuntimeError, expected):  # accumulate
            torch.ops.aten.index_put_(t, [None, None, index], values, True)
        mask = torch.tensor([True, False, True, True], device=device)
        with self.assertRaisesRegex(
                RuntimeError, "shape mismatch" if self.device_type == "cpu"
                else "must match the existing size"):
            torch.ops.aten.index_put_(t, [None, None, mask],
                                      torch.ones(4, device=device), True)
        # Without the sort path CUDA says what CPU says.
        with self.assertRaisesRegex(RuntimeError, "shape mismatch"):
            t[..., index] = values
        self.assertEqual(t.cpu(), torch.zeros(2, 3, 4))

    def test_a_scripted_index_put_works_as_in_eager_mode(self, device):
        # TorchScript passes index_put_'s indices as a generic list.
        @torch.jit.script
        def clamp_low(x):
            x[x < 50] = 1.0
            return x

        x = clamp_low(torch.arange(100.0, device=device))
        self.assertEqual(x.cpu(), clamp_low(torch.arange(100.0)))
        if self.device_type != "cpu":
            with DeterministicGuard(True):
                with self.assertRaisesRegex(RuntimeError, "must match"):
                    torch.jit.script(_put_unbroadcastable)(
                        torch.zeros(2, 3, 4, device=device),
                        torch.tensor([0, 1], device=device),
                        torch.randn(6, 2, device=device))

    def test_complex_half_pow_is_computed_in_complex_float(self, device):
        base = torch.tensor([1 + 1j, 2 - 1j, -0.5 + 0.25j],
                            dtype=torch.complex32)
        exponent = torch.tensor([2, 0.5 + 1j, -1], dtype=torch.complex32)
        calls = [lambda b, e: torch.pow(b, e), lambda b, e: torch.pow(b, 2),
                 lambda b, e: torch.pow(2, e),
                 # float16 with a complex scalar: a ComplexHalf result
                 lambda b, e: torch.pow(b.real.half(), 1.0j),
                 lambda b, e: torch.pow(0.5 + 1.0j, e.real.half())]
        for index, call in enumerate(calls):
            with self.subTest(call=index):
                if self.device_type == "cpu":
                    with self.assertRaisesRegex(NotImplementedError,
                                                "ComplexHalf"):
                        call(base, exponent)
                    continue
                result = call(base.to(device), exponent.to(device))
                if index < 3:
                    reference = call(base.to(torch.complex64),
                                     exponent.to(torch.complex64))
                else:  # CUDA computes from the float16 values
                    reference = (torch.pow(base.real.half().float(), 1.0j)
                                 if index == 3 else
                                 torch.pow(0.5 + 1.0j,
                                           exponent.real.half().float()))
                self.assertEqual(result.dtype, torch.complex32)
                self.assertEqual(result.cpu(), reference.to(torch.complex32),
                                 atol=0, rtol=0)


class TestOverlapChecks(TestCase):
    """The memory-overlap checks CPU makes at the call."""

    def test_an_out_that_partly_overlaps_an_input_is_refused_every_time(
            self, device):
        for _ in range(3):  # also once the launch's signature is known
            x = torch.rand(6, device=device, dtype=torch.double)
            with self.assertRaisesRegex(RuntimeError,
                                        "unsupported operation"):
                torch.pow(x[:3], 42, out=x[1:4])
            with self.assertRaisesRegex(RuntimeError,
                                        "unsupported operation"):
                torch.pow(42, x[:3], out=x[1:4])
            with self.assertRaisesRegex(RuntimeError,
                                        "unsupported operation"):
                torch.add(x[:3], 1, out=x[2:5])
        x = torch.arange(6.0, device=device)
        torch.add(x[:3], 1, out=x[3:])  # disjoint: allowed
        x.add_(x)  # the same memory exactly: allowed
        self.assertEqual(x.cpu(), torch.tensor([0.0, 2, 4, 2, 4, 6]))

    def test_storage_relative_arguments_mean_the_clients_storage(self,
                                                                 device):
        base = torch.arange(12.0, device=device)
        view = base[3:]
        for offset in [None, 0, 5]:
            with self.subTest(storage_offset=offset):
                self.assertEqual(
                    torch.as_strided_copy(view, (2, 2), (1, 3), offset).cpu(),
                    torch.as_strided_copy(base.cpu()[3:], (2, 2), (1, 3),
                                          offset), atol=0, rtol=0)
        # A tensor copied onto itself, and onto a neighbour in one storage.
        pair = torch.arange(8.0, device=device)
        pair[:4].copy_(pair[:4])
        pair[4:].copy_(pair[:4])
        self.assertEqual(pair.cpu(), torch.tensor([0.0, 1, 2, 3, 0, 1, 2, 3]))

    def test_views_of_empty_tensors_report_cpus_addresses(self, device):
        # A view's data_ptr is its base's plus its offset, empty or not;
        # compared through what CPU reports for the same views.
        def addresses(make):
            complex_base = make(torch.complex64)
            real_base = make(torch.float32)
            views = [torch.view_as_real(complex_base),
                     torch.view_as_complex(real_base.reshape(0, 2)),
                     complex_base[0:0], real_base.view(0, 1).t(),
                     real_base.unsqueeze(0), real_base.expand(3, 0)]
            bases = [complex_base, real_base, complex_base, real_base,
                     real_base, real_base]
            return [(v.data_ptr() - b.data_ptr(), v.storage_offset(),
                     v.untyped_storage().data_ptr() ==
                     b.untyped_storage().data_ptr())
                    for v, b in zip(views, bases)]

        for where, make in [
                ("empty", lambda dtype: torch.tensor([], dtype=dtype,
                                                     device=device)),
                ("empty slice of a storage",
                 lambda dtype: torch.zeros(8, dtype=dtype,
                                           device=device)[4:4])]:
            with self.subTest(where=where):
                cpu_make = {"empty": lambda dtype: torch.tensor(
                    [], dtype=dtype)}.get(
                        where, lambda dtype: torch.zeros(8, dtype=dtype)[4:4])
                self.assertEqual(addresses(make), addresses(cpu_make))

    def test_an_expanded_destination_is_refused(self, device):
        for source in ["cpu", device]:
            with self.assertRaisesRegex(RuntimeError,
                                        "unsupported operation"):
                torch.rand(1, device=device).expand(3).copy_(
                    torch.ones(3, device=source))
        for op in [torch.linspace, torch.logspace]:
            with self.assertRaisesRegex(RuntimeError,
                                        "unsupported operation"):
                op(1, 10, 10, out=torch.rand(1, device=device).expand(10))

    def test_sequence_ops_resize_a_wrongly_sized_out_as_cpu_does(self,
                                                                 device):
        calls = {"linspace": lambda out: torch.linspace(0, 1, 3, out=out),
                 "logspace": lambda out: torch.logspace(0, 1, 3, out=out),
                 "arange": lambda out: torch.arange(0, 3, out=out)}
        for name, call in calls.items():
            with self.subTest(op=name):
                out = torch.empty(2, device=device)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    call(out)
                self.assertEqual(out.shape, (3,))
                messages = [str(w.message) for w in caught]
                if name == "arange":  # CPU's kernel warns in its words
                    self.assertEqual(len(messages), 1, messages)
                    self.assertIn("The number of elements in the out tensor "
                                  "of shape [2] is 2", messages[0])
                else:
                    self.assertEqual(messages, [])


instantiate_device_type_tests(TestWhereAnAcceleratorDiffersFromCpu,
                              globals())
instantiate_device_type_tests(TestOverlapChecks, globals())
instantiate_device_type_tests(TestSettingsReachKernels, globals())
instantiate_device_type_tests(TestResultsDoNotDependOnTheDaemon, globals())
instantiate_device_type_tests(TestKernelWarnings, globals())
instantiate_device_type_tests(TestOutputMetadataMatchesCpu, globals())
instantiate_device_type_tests(TestOutArguments, globals())


class _default_dtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.previous)


def test_the_test_classes_run_on_cpu_and_openreg():
    names = set(globals())
    assert "TestSettingsReachKernelsCPU" in names
    assert "TestSettingsReachKernelsOPENREG" in names, sorted(names)


# ---- Device checks, as CUDA does them ---------------------------------------

def test_cpu_values_for_index_put_are_refused_at_the_call():
    x = torch.zeros(3, device="openreg")
    index = torch.tensor([0], device="openreg")
    with pytest.raises(RuntimeError,
                       match="Expected all tensors to be on the same device"):
        x.index_put_((index,), torch.ones(1))
    # 0-dim CPU values and CPU index tensors are accepted, as on CUDA.
    x.index_put_((index,), torch.tensor(5.0))
    x.index_put_((torch.tensor([2]),), torch.tensor(7.0))
    assert x.cpu().tolist() == [5.0, 0.0, 7.0]


def test_a_cpu_out_tensor_is_refused_even_when_0_dim():
    x = torch.ones(3, device="openreg")
    for out in (torch.empty(0, dtype=torch.long), torch.empty(())):
        with pytest.raises(RuntimeError,
                           match="Expected all tensors to be on the same"):
            torch.sum(x, dim=0, out=out)
        assert out.numel() <= 1  # nothing written into client memory
    with pytest.raises(RuntimeError, match="same device"):
        torch.nonzero(x, out=torch.empty(0, dtype=torch.long))


def test_0_dim_cpu_tensors_are_read_as_scalars():
    x = torch.arange(3.0, device="openreg")
    torch.testing.assert_close((x * torch.tensor(2.0)).cpu(),
                               torch.arange(3.0) * 2)


# ---- Two clients with different settings ------------------------------------

_CLIENT = r"""
import sys, torch
dtype = getattr(torch, sys.argv[1])
torch.set_default_dtype(dtype)
for _ in range(200):
    result = torch.ones(64, dtype=torch.uint8, device="openreg") + 0.1
    assert result.dtype == dtype, result.dtype
    expected = torch.ones(64, dtype=torch.uint8) + 0.1
    assert torch.equal(result.cpu(), expected), (result.cpu()[:2], expected[:2])
print("ok", sys.argv[1])
"""


def test_two_clients_with_different_settings_never_see_each_others():
    env = DAEMON.env()
    clients = [subprocess.Popen([sys.executable, "-c", _CLIENT, dtype],
                                env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for dtype in ("float64", "float32", "float64", "float32")]
    for client in clients:
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err[-2000:]
        assert out.startswith("ok")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
