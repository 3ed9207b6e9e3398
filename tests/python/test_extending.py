"""The extension paths of docs/EXTENDING.md, one worked example each:
a custom op whose kernel runs in the daemon (examples/extension), a daemon
kernel library that fails to load, a per-op fast path (aten::relu), the
block list, and a DispatchStub registration (_fused_sdp_choice_stub)."""

import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import torch_openreg
from torch_openreg import _C
from daemon_fixture import Daemon, run_python

EXTENSION = os.path.join(os.environ.get("TEST_SRCDIR", os.getcwd()),
                         "openreg", "examples", "extension", "libopenreg_ext.so")
if not os.path.exists(EXTENSION):  # run from the runfiles root
    EXTENSION = os.path.abspath("examples/extension/libopenreg_ext.so")

DAEMON = None


def setup_module():
    global DAEMON
    # The daemon loads the extension's CPU kernels before it serves.
    DAEMON = Daemon(devices=1, extra_args=[f"--kernel_library={EXTENSION}"])
    DAEMON.start().use()
    # The client loads the same library: schema, Meta kernel, autograd.
    torch.ops.load_library(EXTENSION)


def teardown_module():
    DAEMON.stop()


def kernels_executed():
    torch.openreg.synchronize()
    return torch.openreg.daemon_stats()["devices"][0]["kernels_executed"]


# --- Custom operator (examples/extension/scaled_gelu.cc) -------------------

def test_custom_op_runs_in_the_daemon_and_matches_cpu():
    x = torch.randn(4, 33)
    before = kernels_executed()
    y = torch.ops.openreg_ext.scaled_gelu(x.to("openreg"), 1.5)
    assert kernels_executed() == before + 1
    assert y.device.type == "openreg" and y.shape == x.shape
    torch.testing.assert_close(y.cpu(), torch.ops.openreg_ext.scaled_gelu(x, 1.5))
    torch.testing.assert_close(y.cpu(), 1.5 * F.gelu(x))


def test_a_value_dependent_kernel_warning_reaches_the_next_synchronization():
    # The first launch of a signature is checked (its warnings come with its
    # reply); later launches are asynchronous: a warning their kernel raises
    # waits in the stream's mailbox and is raised at the next synchronizing
    # call, as a CUDA program sees asynchronous errors.
    clean = torch.ones(6, device="openreg")
    torch.ops.openreg_ext.scaled_gelu(clean, 2.0)
    torch.openreg.synchronize()
    poisoned = torch.ones(6, device="openreg")
    poisoned[2] = float("nan")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = torch.ops.openreg_ext.scaled_gelu(poisoned, 2.0)  # a cache hit
        at_the_call = [str(w.message) for w in caught]
        torch.openreg.synchronize()
    messages = [str(w.message) for w in caught]
    assert not any("holds NaN" in m for m in at_the_call), at_the_call
    assert sum("scaled_gelu: the input holds NaN" in m
               for m in messages) == 1, messages
    assert y.cpu().isnan().sum().item() == 1
    # Taken once: the next synchronization raises nothing again.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        torch.openreg.synchronize()
    assert not again


def test_a_kernel_warning_on_a_side_stream_reaches_the_next_synchronization():
    # The client reads only the mailboxes of stream slots it ever submitted
    # to: a stream from the pool, first used here, is among them.
    clean = torch.ones(6, device="openreg")
    torch.ops.openreg_ext.scaled_gelu(clean, 3.0)
    torch.openreg.synchronize()
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        poisoned = torch.ones(6, device="openreg")
        poisoned[4] = float("nan")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.ops.openreg_ext.scaled_gelu(poisoned, 3.0)  # a cache hit
            side.synchronize()
    messages = [str(w.message) for w in caught]
    assert sum("scaled_gelu: the input holds NaN" in m
               for m in messages) == 1, messages


def test_custom_op_gradient_matches_cpu():
    x = torch.randn(5, 7)
    weights = torch.randn(5, 7)
    x_cpu = x.clone().requires_grad_()
    (F.gelu(x_cpu) * 0.75 * weights).sum().backward()
    x_dev = x.to("openreg").requires_grad_()
    before = kernels_executed()
    y = torch.ops.openreg_ext.scaled_gelu(x_dev, 0.75)
    (y * weights.to("openreg")).sum().backward()
    assert y.grad_fn is not None
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
    # Forward and backward ops both ran in the daemon (plus mul, sum, the
    # ones_like seed and the gradient's mul in between).
    assert kernels_executed() >= before + 2


def test_custom_op_needs_the_daemon_library():
    # A daemon started without --kernel_library does not know the op: the
    # kernel the client used above was really the daemon's. The op's first
    # launch is checked, so the call itself raises.
    code = f"""
import torch
torch.ops.load_library({EXTENSION!r})
try:
    torch.ops.openreg_ext.scaled_gelu(torch.ones(3, device="openreg"), 2.0)
except NotImplementedError as error:
    print("ERROR:", error)
"""
    with Daemon(devices=1) as plain:
        result = run_python(code, plain.env())
    assert result.returncode == 0, result.stderr
    assert "unknown operator openreg_ext::scaled_gelu" in result.stdout


def test_kernel_library_load_failure_is_a_startup_error():
    missing = "/nonexistent/openreg/libmissing.so"
    daemon = Daemon(devices=1, extra_args=[f"--kernel_library={missing}"])
    try:
        with pytest.raises(RuntimeError) as failure:
            daemon.start()
        message = str(failure.value)
        assert f"cannot load --kernel_library={missing}" in message
        assert "cannot open shared object file" in message  # dlerror()
    finally:
        daemon.stop()


def test_kernel_library_flag_is_repeatable():
    # Both occurrences are kept and loaded in order: the first loads, the
    # second is the one reported.
    missing = "/nonexistent/openreg/libsecond.so"
    daemon = Daemon(devices=1, extra_args=[f"--kernel_library={EXTENSION}",
                                           f"--kernel_library={missing}"])
    try:
        with pytest.raises(RuntimeError,
                           match=f"cannot load --kernel_library={missing}"):
            daemon.start()
    finally:
        daemon.stop()


# --- Per-op override (torch_backend/kernels/fast_path_ops.cc) --------------

def test_relu_fast_path_is_used_and_matches_cpu():
    x = torch.randn(6, 10)
    before = _C._fast_path_launch_count()
    y = torch.relu(x.to("openreg"))
    assert _C._fast_path_launch_count() == before + 1
    torch.testing.assert_close(y.cpu(), torch.relu(x))
    # Channels-last keeps its layout, as on CPU.
    image = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    out = torch.relu(image.to("openreg"))
    assert _C._fast_path_launch_count() == before + 2
    assert out.stride() == torch.relu(image).stride()
    torch.testing.assert_close(out.cpu(), torch.relu(image))


def test_relu_fast_path_hands_other_cases_to_the_fallback():
    x = torch.randn(6, 10)
    before = _C._fast_path_launch_count()
    sliced = torch.relu(x.to("openreg")[:, ::3])  # not dense
    torch.testing.assert_close(sliced.cpu(), torch.relu(x[:, ::3]))
    # Dense but transposed: the fallback's Meta answer gives CPU's layout.
    transposed = torch.relu(x.to("openreg").t())
    assert transposed.stride() == torch.relu(x.t()).stride()
    torch.testing.assert_close(transposed.cpu(), torch.relu(x.t()))
    ints = torch.relu(torch.arange(-3, 3, device="openreg"))
    assert _C._fast_path_launch_count() == before  # all three: fallback
    assert ints.cpu().tolist() == [0, 0, 0, 0, 1, 2]
    with pytest.raises(RuntimeError, match="Boolean inputs not supported"):
        torch.relu(torch.ones(3, dtype=torch.bool, device="openreg")).cpu()


# Dense layouts whose size-1 dimensions carry strides CPU's TensorIterator
# does not keep in its output: the output's strides must be CPU's, not the
# input's.
SIZE_ONE_LAYOUTS = [((3, 1), (1, 3)), ((3, 1, 4), (4, 7, 1)),
                    ((1, 1), (9, 9)), ((2, 1, 4, 5), (20, 1, 5, 1))]


@pytest.mark.parametrize("sizes,strides", SIZE_ONE_LAYOUTS)
def test_fast_paths_give_cpus_strides_for_size_one_dimensions(sizes, strides):
    base = torch.randn(64)
    x = base.as_strided(sizes, strides)
    x_dev = base.to("openreg").as_strided(sizes, strides)
    before = _C._fast_path_launch_count()
    for op in (torch.relu, lambda t: torch.add(t, t), lambda t: t * t):
        out = op(x_dev)
        assert out.stride() == op(x).stride(), (sizes, strides)
        torch.testing.assert_close(out.cpu(), op(x))
    assert _C._fast_path_launch_count() == before + 3


BINARY_FAST_PATHS = [
    ("add", lambda a, b: torch.add(a, b)),
    ("add alpha", lambda a, b: torch.add(a, b, alpha=-2.5)),
    ("sub", lambda a, b: a - b),
    ("sub alpha", lambda a, b: torch.sub(a, b, alpha=3)),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64,
                                   torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,op", BINARY_FAST_PATHS,
                         ids=[name for name, _ in BINARY_FAST_PATHS])
def test_binary_fast_paths_are_used_and_match_cpu(name, op, dtype):
    a = torch.randn(4, 3, 5, 6).to(dtype)
    b = torch.randn(4, 3, 5, 6).to(dtype)
    before = _C._fast_path_launch_count()
    out = op(a.to("openreg"), b.to("openreg"))
    assert _C._fast_path_launch_count() == before + 1
    assert out.dtype == dtype and out.stride() == op(a, b).stride()
    torch.testing.assert_close(out.cpu(), op(a, b), rtol=0, atol=0)
    channels_last = [t.to(memory_format=torch.channels_last) for t in (a, b)]
    out = op(*[t.to("openreg") for t in channels_last])
    assert _C._fast_path_launch_count() == before + 2
    assert out.stride() == op(*channels_last).stride()
    torch.testing.assert_close(out.cpu(), op(*channels_last), rtol=0, atol=0)


def test_binary_fast_paths_hand_other_cases_to_the_fallback():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    a_dev, b_dev = a.to("openreg"), b.to("openreg")
    cases = [
        ("broadcast", lambda x, y: x + y[0]),
        ("python scalar", lambda x, y: x * 2.5),
        ("mixed dtypes", lambda x, y: x + y.double()),
        ("mixed layouts", lambda x, y: x * y.t().contiguous().t()),
        ("transposed", lambda x, y: x.t() / y.t()),
        ("integers", lambda x, y: x.long() + y.long()),
        ("integer division", lambda x, y: x.long() / (y.long() + 7)),
    ]
    before = _C._fast_path_launch_count()
    for name, op in cases:
        out = op(a_dev, b_dev)
        assert out.dtype == op(a, b).dtype, name
        assert out.stride() == op(a, b).stride(), name
        torch.testing.assert_close(out.cpu(), op(a, b), msg=name)
    # The conversions above (.double(), .long(), contiguous) are other ops;
    # none of the cases' own ops took a fast path.
    assert _C._fast_path_launch_count() == before


def test_binary_fast_paths_keep_cpus_errors_at_the_call():
    a, b = torch.randn(5), torch.randn(5)
    a_dev, b_dev = a.to("openreg"), b.to("openreg")
    with pytest.raises(RuntimeError, match="alpha must not be a complex"):
        torch.add(a_dev, b_dev, alpha=1j)
    with pytest.raises(RuntimeError, match="Boolean alpha only supported"):
        torch.sub(a_dev, b_dev, alpha=True)
    with pytest.raises(RuntimeError, match="same device"):
        torch.mul(a_dev, b)  # a CPU tensor that is not a 0-dim scalar
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.div(a_dev, torch.randn(4, device="openreg"))


def test_sum_fast_path_is_used_and_matches_cpu():
    before = _C._fast_path_launch_count()
    for dtype in (torch.float32, torch.float64, torch.float16,
                  torch.bfloat16):
        x = torch.randn(7, 9).to(dtype)
        for view in (lambda t: t, lambda t: t.t(), lambda t: t[:, ::2]):
            out = view(x.to("openreg")).sum()
            assert out.dtype == dtype and out.dim() == 0
            torch.testing.assert_close(out.cpu(), view(x).sum())
    assert _C._fast_path_launch_count() == before + 12
    # A dtype, integers, bool: the fallback, with CPU's promotions.
    x = torch.arange(6)
    assert x.to("openreg").sum().item() == 15
    assert x.to("openreg").sum().dtype == torch.int64
    assert x.bool().to("openreg").sum().dtype == torch.int64
    assert x.float().to("openreg").sum(dtype=torch.float64).dtype == \
        torch.float64
    assert _C._fast_path_launch_count() == before + 12


def test_fast_paths_keep_gradients():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    a_dev = a.detach().to("openreg").requires_grad_()
    b_dev = b.detach().to("openreg").requires_grad_()
    before = _C._fast_path_launch_count()
    out = ((a_dev + b_dev) * (a_dev - b_dev) / (b_dev * b_dev + 1)).sum()
    assert _C._fast_path_launch_count() >= before + 5
    out.backward()
    expected = ((a + b) * (a - b) / (b * b + 1)).sum()
    expected.backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    torch.testing.assert_close(a_dev.grad.cpu(), a.grad)
    torch.testing.assert_close(b_dev.grad.cpu(), b.grad)


def test_fast_paths_respect_the_block_list():
    x = torch.randn(8, device="openreg")
    torch_openreg.block_op("aten::add.Tensor")
    try:
        with pytest.raises(NotImplementedError, match="aten::add"):
            torch.add(x, x)
    finally:
        torch_openreg.unblock_op("aten::add.Tensor")
    torch.testing.assert_close(torch.add(x, x).cpu(), (x + x).cpu())
    # sum(self) runs sum.dim_IntList on both routes (fast path, and the
    # fallback for dtype=), so that name blocks both.
    torch_openreg.block_op("aten::sum.dim_IntList")
    try:
        with pytest.raises(NotImplementedError, match="aten::sum"):
            x.sum()
        with pytest.raises(NotImplementedError, match="aten::sum"):
            x.sum(dtype=torch.float64)
    finally:
        torch_openreg.unblock_op("aten::sum.dim_IntList")
    torch.testing.assert_close(x.sum().cpu(), x.cpu().sum())


def test_relu_fast_path_gradient():
    x = torch.randn(8)
    x_dev = x.to("openreg").requires_grad_()
    torch.relu(x_dev).sum().backward()
    torch.testing.assert_close(x_dev.grad.cpu(), (x > 0).float())


# --- Block list (torch_backend/kernels/blocked_ops.cc) --------------------

def test_blocked_op_raises_not_implemented():
    x = torch.arange(4.0, device="openreg")
    torch_openreg.block_op("aten::cumsum")
    try:
        assert "aten::cumsum" in torch_openreg.blocked_ops()
        # A name without overload blocks them all.
        with pytest.raises(NotImplementedError,
                           match='"aten::cumsum" is not implemented for '
                                 'openreg'):
            torch.cumsum(x, 0)
        with pytest.raises(NotImplementedError,
                           match='"aten::cumsum.out" is not implemented'):
            torch.cumsum(x, 0, out=torch.empty_like(x))
    finally:
        assert torch_openreg.unblock_op("aten::cumsum")
    assert torch.cumsum(x, 0).cpu().tolist() == [0.0, 1.0, 3.0, 6.0]
    assert not torch_openreg.unblock_op("aten::cumsum")


def test_blocking_one_overload_leaves_the_others():
    x = torch.arange(3.0, device="openreg")
    torch_openreg.block_op("aten::pow.Tensor_Scalar")
    try:
        with pytest.raises(NotImplementedError,
                           match='"aten::pow.Tensor_Scalar" is not '
                                 'implemented'):
            torch.pow(x, 2)
        assert torch.pow(x, x).cpu().tolist() == [1.0, 1.0, 4.0]
    finally:
        torch_openreg.unblock_op("aten::pow.Tensor_Scalar")


def test_blocking_applies_to_the_relu_fast_path_too():
    torch_openreg.block_op("aten::relu")
    try:
        with pytest.raises(NotImplementedError, match="not implemented for openreg"):
            torch.relu(torch.ones(3, device="openreg"))
    finally:
        torch_openreg.unblock_op("aten::relu")


def test_block_op_rejects_malformed_names():
    with pytest.raises(ValueError, match="expected an operator name"):
        torch_openreg.block_op("cumsum")
    assert "cumsum" not in torch_openreg.blocked_ops()


def test_blocked_ops_from_the_environment():
    code = """
import torch
try:
    torch.cumsum(torch.ones(2, device="openreg"), 0)
except NotImplementedError as error:
    print("ERROR:", error)
print("SUM", torch.ones(2, device="openreg").sum().item())
"""
    result = run_python(code, DAEMON.env(
        OPENREG_BLOCKED_OPS=" aten::cumsum, bogus ,aten::nonexistent_op"))
    assert result.returncode == 0, result.stderr
    assert '"aten::cumsum" is not implemented for openreg' in result.stdout
    assert "SUM 2.0" in result.stdout


# --- DispatchStub (torch_backend/kernels/sdp_choice.cc) --------------------

class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def sdpa_inputs(device):
    torch.manual_seed(0)
    return [torch.randn(2, 3, 9, 8).to(device).requires_grad_()
            for _ in range(3)]


FLASH_FOR_CPU = "aten._scaled_dot_product_flash_attention_for_cpu.default"
OVERRIDEABLE = "aten._scaled_dot_product_fused_attention_overrideable.default"


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_takes_the_overrideable_route_chosen_by_the_dispatch_stub(
        is_causal):
    cpu_inputs = sdpa_inputs("cpu")
    dev_inputs = sdpa_inputs("openreg")
    assert torch._fused_sdp_choice(*dev_inputs, is_causal=is_causal) == \
        SDPBackend.OVERRIDEABLE.value
    expected = F.scaled_dot_product_attention(*cpu_inputs, is_causal=is_causal)
    expected.sum().backward()
    with OpRecorder() as recorder:
        out = F.scaled_dot_product_attention(*dev_inputs, is_causal=is_causal)
    assert OVERRIDEABLE in recorder.ops
    assert "aten.bmm.default" not in recorder.ops  # not the math path
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    for dev, cpu in zip(dev_inputs, cpu_inputs):
        torch.testing.assert_close(dev.grad.cpu(), cpu.grad)


def _sdpa_and_grads(device, inputs, **kwargs):
    q, k, v = [t.detach().to(device).requires_grad_() for t in inputs]
    kwargs = {name: value.to(device) if isinstance(value, torch.Tensor)
              else value for name, value in kwargs.items()}
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out.sum().backward()
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64,
                                   torch.bfloat16])
@pytest.mark.parametrize("case", ["plain", "causal", "bool mask",
                                  "float mask", "scale", "gqa"])
def test_sdpa_forward_and_backward_match_cpu(dtype, case):
    torch.manual_seed(0)
    heads_kv = 2 if case == "gqa" else 8
    q = torch.randn(2, 8, 40, 16, dtype=dtype)
    k = torch.randn(2, heads_kv, 40, 16, dtype=dtype)
    v = torch.randn(2, heads_kv, 40, 16, dtype=dtype)
    kwargs = {"plain": {}, "causal": {"is_causal": True},
              "bool mask": {"attn_mask": torch.rand(40, 40) > 0.3},
              "float mask": {"attn_mask": torch.randn(2, 1, 40, 40,
                                                      dtype=dtype)},
              "scale": {"scale": 0.3}, "gqa": {"enable_gqa": True}}[case]
    dev = [t.to("openreg") for t in (q, k, v)]
    dev_kwargs = {name: value.to("openreg") if isinstance(value, torch.Tensor)
                  else value for name, value in kwargs.items()}
    assert torch._fused_sdp_choice(*dev, **dev_kwargs) == \
        SDPBackend.OVERRIDEABLE.value
    expected = _sdpa_and_grads("cpu", (q, k, v), **kwargs)
    result = _sdpa_and_grads("openreg", (q, k, v), **kwargs)
    tolerance = ({"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16
                 else {})
    for got, want in zip(result, expected):
        torch.testing.assert_close(got, want, **tolerance)


def test_sdpa_with_dropout_or_a_mask_needing_grad_keeps_cpu_choice():
    cpu = sdpa_inputs("cpu")
    dev = sdpa_inputs("openreg")
    for kwargs in ({"dropout_p": 0.5}, {}):
        mask_cpu = torch.randn(9, 9, requires_grad=True)
        mask_dev = mask_cpu.detach().to("openreg").requires_grad_()
        if not kwargs:
            kwargs_cpu, kwargs_dev = {"attn_mask": mask_cpu}, \
                {"attn_mask": mask_dev}
        else:
            kwargs_cpu = kwargs_dev = kwargs
        assert torch._fused_sdp_choice(*dev, **kwargs_dev) == \
            torch._fused_sdp_choice(*cpu, **kwargs_cpu)
    expected = F.scaled_dot_product_attention(*cpu, attn_mask=mask_cpu)
    expected.sum().backward()
    out = F.scaled_dot_product_attention(*dev, attn_mask=mask_dev)
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(mask_dev.grad.cpu(), mask_cpu.grad)


@pytest.mark.parametrize("is_causal", [False, True])
def test_the_overrideable_backward_gives_the_bias_gradient_of_the_math_route(
        is_causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    bias = torch.randn(2, 1, 6, 6)  # broadcast over the heads
    cpu = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    # The math route takes no mask with is_causal: the causal mask joins the
    # bias (its gradient is the bias's, zero where the mask hides a key).
    causal = torch.zeros(6, 6).masked_fill(
        torch.ones(6, 6, dtype=torch.bool).tril().logical_not(),
        float("-inf")) if is_causal else torch.zeros(6, 6)
    with sdpa_kernel(SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(
            *cpu[:3], attn_mask=cpu[3] + causal)
    grad_out = torch.randn_like(expected)
    expected.backward(grad_out)
    dev = [t.to("openreg") for t in (q, k, v, bias)]
    forward = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *dev[:3], attn_bias=dev[3], is_causal=is_causal)
    grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad_out.to("openreg"), *dev, [True] * 4, *forward[:6],
        dropout_p=0.0, is_causal=is_causal, philox_seed=forward[6],
        philox_offset=forward[7])
    torch.testing.assert_close(forward[0].cpu(), expected.detach())
    for got, want in zip(grads, cpu):
        torch.testing.assert_close(got.cpu(), want.grad)
    # Results have the layout the op's Meta kernel declares (what
    # torch.compile's generated code asserts): a contiguous logsumexp.
    meta = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *[t.to("meta") for t in (q, k, v, bias)], is_causal=is_causal)
    for got, declared in zip(forward[:2], meta[:2]):
        assert (got.shape, got.stride()) == (declared.shape,
                                             declared.stride())


def test_sdpa_math_backend_still_selectable():
    with sdpa_kernel(SDPBackend.MATH), OpRecorder() as recorder:
        out = F.scaled_dot_product_attention(*sdpa_inputs("openreg"))
    assert FLASH_FOR_CPU not in recorder.ops and OVERRIDEABLE not in \
        recorder.ops
    with sdpa_kernel(SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(*sdpa_inputs("cpu"))
    torch.testing.assert_close(out.detach().cpu(), expected.detach())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
