"""A new shape's output metadata from ATen's C++ Meta kernels
(torch_backend/kernels/cpp_meta_kernels.h): torch 2.13 puts Python Meta
kernels over them, which openreg ran at every Meta-cache miss (87 us for
an add against 8 us now, and the first op of a process imported the whole
compiler stack). The outputs keep CPU's shapes, strides, dtypes and
values."""

import sys

import pytest
import torch
from torch_openreg import _C

from daemon_fixture import process_daemon, run_python

DAEMON = process_daemon(devices=1)
aten = torch.ops.aten


def test_every_listed_op_has_its_cpp_meta_kernel_in_use():
    # A signature that no longer fits its schema (another torch) drops out
    # of the table silently, so the table's size is checked here.
    in_use = set(_C._cpp_meta_kernel_ops())
    assert len(in_use) == 113
    assert {"aten::_fused_sgd_", "aten::_fused_adagrad_.tensor_lr",
            "aten::add.Tensor", "aten::mul_.Tensor", "aten::addmm",
            "aten::native_layer_norm", "aten::native_layer_norm_backward",
            "aten::embedding_dense_backward", "aten::cat",
            "aten::_softmax", "aten::sum.dim_IntList",
            "aten::index.Tensor"} <= in_use


def test_the_first_ops_of_a_process_import_no_compiler_stack():
    result = run_python(
        "import sys, torch\n"
        "x = torch.randn(1000).to('openreg')\n"
        "y = torch.exp((x + x) * x).sum(0).item()\n"
        "print('torch._dynamo' in sys.modules, 'sympy' in sys.modules)\n",
        DAEMON.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False", "False"]


def inputs(length):
    """Tensors whose last size is `length`, laid out as the Meta kernel
    must follow: contiguous, channels_last, permuted, expanded, ints, a
    broadcast row."""
    torch.manual_seed(length)
    base = torch.randn(2, 3, 5, length)
    return {
        "base": base,
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "permuted": torch.randn(2, 5, length, 3).permute(0, 3, 1, 2),
        "expanded": torch.randn(1, 3, 1, length).expand(2, 3, 5, length),
        "ints": torch.randint(-5, 5, (2, 3, 5, length)),
        "row": torch.randn(length),
        "vector": torch.randn(length),
        "left": torch.randn(4, 5),
        "right": torch.randn(5, length),
    }


def attention_and_gradient(base):
    """Causal SDPA on (batch, heads, length, dim) views, as a transformer
    block makes them, and the gradient through it (openreg's fused route:
    CPU's flash attention and its backward)."""
    leaf = base.detach().clone().requires_grad_()
    sequence = leaf.transpose(2, 3)
    out = torch.nn.functional.scaled_dot_product_attention(
        sequence, sequence, sequence, is_causal=True)
    (gradient,) = torch.autograd.grad(out.sum(), leaf)
    return [out.detach(), gradient]


def layer_norm_gradients(base, weight, bias):
    """The gradients of a layer norm's input, weight and bias, as a
    training step takes them."""
    leaves = [tensor.detach().clone().requires_grad_()
              for tensor in (base, weight, bias)]
    out = torch.nn.functional.layer_norm(leaves[0], [base.shape[-1]],
                                         leaves[1], leaves[2])
    return list(torch.autograd.grad((out * base).sum(), leaves))


def layer_norm_input_gradient(base, weight):
    """native_layer_norm_backward with only the input's gradient asked
    for: the others come back undefined (None)."""
    length = base.shape[-1]
    _, mean, rstd = aten.native_layer_norm(base, [length], weight, None, 1e-5)
    return list(aten.native_layer_norm_backward(
        base * 2, base, [length], mean, rstd, weight, None,
        [True, False, False]))


def embedding_gradient(indices, weight):
    leaf = weight.detach().clone().requires_grad_()
    out = torch.nn.functional.embedding(indices.remainder(weight.shape[0]),
                                        leaf)
    return list(torch.autograd.grad((out * out).sum(), [leaf]))


CASES = {
    "add broadcast": lambda t: torch.add(t["base"], t["row"], alpha=2),
    "add channels_last": lambda t: t["channels_last"] + t["base"],
    "mul permuted": lambda t: t["permuted"] * t["permuted"],
    "mul expanded": lambda t: t["expanded"] * 3,
    "div ints": lambda t: t["ints"] / 3,
    "div floor": lambda t: torch.div(t["ints"], 2, rounding_mode="floor"),
    "ints times float": lambda t: t["ints"] * t["base"],
    "compare": lambda t: t["channels_last"] > t["row"],
    "in place": lambda t: t["permuted"].clone().mul_(t["row"]),
    "exp channels_last": lambda t: torch.exp(t["channels_last"]),
    "sum keepdim": lambda t: t["channels_last"].sum((1, 3), keepdim=True),
    "mean dtype": lambda t: t["permuted"].mean(1, dtype=torch.float64),
    "softmax": lambda t: torch.softmax(t["permuted"], -1),
    "addmm": lambda t: torch.addmm(t["vector"], t["left"], t["right"]),
    "clamp": lambda t: t["permuted"].clamp(-0.5, 0.5),
    "pow": lambda t: t["channels_last"] ** 2,
    "where": lambda t: torch.where(t["base"] > 0, t["base"], t["row"]),
    "cat along the new length": lambda t: torch.cat(
        [t["base"], t["channels_last"]], 3),
    "cat with a legacy 1-D empty": lambda t: torch.cat(
        [t["base"], t["base"].new_empty(0)], 1),
    "cat ints and floats": lambda t: torch.cat([t["ints"], t["base"]], 0),
    "max_pool2d channels_last": lambda t: aten.max_pool2d_with_indices(
        t["channels_last"], [2, 2]),
    "max_pool2d backward": lambda t: aten.max_pool2d_with_indices_backward(
        aten.max_pool2d_with_indices(t["permuted"], [2, 2])[0],
        t["permuted"], [2, 2], [2, 2], [0, 0], [1, 1], False,
        aten.max_pool2d_with_indices(t["permuted"], [2, 2])[1]),
    "attention and its gradient": lambda t: attention_and_gradient(t["base"]),
    "layer_norm": lambda t: torch.native_layer_norm(
        t["base"], [t["row"].shape[0]], t["row"], t["vector"], 1e-5),
    "layer_norm over 2 dims, channels_last": lambda t: torch.native_layer_norm(
        t["channels_last"], [5, t["row"].shape[0]], None, None, 1e-5),
    "layer_norm bfloat16 with float weights": lambda t:
        torch.native_layer_norm(t["permuted"].bfloat16(), [t["row"].shape[0]],
                                t["row"], None, 1e-5),
    "layer_norm backward": lambda t: layer_norm_gradients(
        t["permuted"], t["row"], t["vector"]),
    "layer_norm backward, the input's gradient only": lambda t:
        layer_norm_input_gradient(t["channels_last"], t["row"]),
    "embedding backward": lambda t: embedding_gradient(t["ints"], t["right"]),
}


@pytest.mark.parametrize("name", CASES)
def test_new_shapes_get_cpus_shapes_strides_dtypes_and_values(name):
    # Each length a new signature (a Meta-cache miss), as in a decode whose
    # sequence grows.
    for length in (7, 8, 9):
        cpu_inputs = inputs(length)
        expected = CASES[name](cpu_inputs)
        actual = CASES[name]({key: tensor.to("openreg")
                              for key, tensor in cpu_inputs.items()})
        if isinstance(expected, torch.Tensor):
            expected, actual = [expected], [actual]
        assert len(actual) == len(expected)
        for result, reference in zip(actual, expected):
            if reference is None:  # a gradient not asked for
                assert result is None
                continue
            assert result.shape == reference.shape
            assert result.stride() == reference.stride()
            assert result.dtype == reference.dtype
            torch.testing.assert_close(result.cpu(), reference, rtol=0,
                                       atol=0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
