"""Misuse is refused at its own call, as on CPU and CUDA.

Each case is a call that CPU rejects. On openreg it must raise at the call
itself (before any synchronization), with CPU's exception class and CPU's
message first, and the next op must be clean. The table is run
device-generically (instantiate_device_type_tests): the CPU variant checks
that the case really is a misuse, the openreg variant compares with it.

Many of these checks are missing from torch 2.13's Meta kernels (dtype
support, dim wrapping, casts into in-place results, index dtypes): openreg
checks the first launch of every op signature with the real kernel."""

import re
import sys

import pytest
import torch

from daemon_fixture import process_daemon

DAEMON = process_daemon(devices=1)

from torch.testing._internal.common_device_type import (  # noqa: E402
    instantiate_device_type_tests)
from torch.testing._internal.common_utils import (  # noqa: E402
    TestCase, parametrize)


def t(device, *shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device=device)


def i64(device, values):
    return torch.tensor(values, dtype=torch.int64, device=device)


CASES = {
    # shapes
    "add_broadcast_mismatch": lambda d: t(d, 3) + t(d, 4),
    "mm_inner_mismatch": lambda d: torch.mm(t(d, 2, 3), t(d, 4, 2)),
    "matmul_vector_mismatch": lambda d: torch.matmul(t(d, 3), t(d, 4)),
    "cat_shape_mismatch": lambda d: torch.cat([t(d, 2, 3), t(d, 2, 4)]),
    "stack_shape_mismatch": lambda d: torch.stack([t(d, 2), t(d, 3)]),
    "view_incompatible": lambda d: t(d, 2, 3).view(4),
    "reshape_bad_numel": lambda d: t(d, 2, 3).reshape(5),
    "expand_bad_size": lambda d: t(d, 2, 3).expand(3, 3),
    "linear_weight_mismatch": lambda d: torch.nn.functional.linear(
        t(d, 2, 3), t(d, 4, 5)),
    "conv2d_channels_mismatch": lambda d: torch.nn.functional.conv2d(
        t(d, 1, 3, 5, 5), t(d, 2, 4, 3, 3)),
    "layer_norm_shape_mismatch": lambda d: torch.nn.functional.layer_norm(
        t(d, 2, 3), (4,)),
    "tensordot_dims_mismatch": lambda d: torch.tensordot(
        t(d, 2, 3), t(d, 4, 5), dims=([1], [0])),
    "repeat_too_few_dims": lambda d: t(d, 2, 3).repeat(2),
    "pad_odd_length": lambda d: torch.nn.functional.pad(t(d, 2, 3), (1,)),
    "zeros_negative_size": lambda d: torch.zeros(-1, device=d),
    # dims
    "cat_dim_out_of_range": lambda d: torch.cat([t(d, 2), t(d, 2)], dim=3),
    "sum_dim_out_of_range": lambda d: t(d, 2, 3).sum(5),
    "flip_dim_out_of_range": lambda d: torch.flip(t(d, 3, 3), [5]),
    "transpose_dim_out_of_range": lambda d: t(d, 2, 3).transpose(0, 4),
    "permute_wrong_length": lambda d: t(d, 2, 3).permute(0),
    "softmax_dim_out_of_range": lambda d: torch.softmax(t(d, 2, 3), 4),
    "cumsum_dim_out_of_range": lambda d: torch.cumsum(t(d, 2, 3), 3),
    "sort_dim_out_of_range": lambda d: torch.sort(t(d, 2, 3), 3),
    "argmax_dim_out_of_range": lambda d: torch.argmax(t(d, 2, 3), 3),
    "unsqueeze_dim_out_of_range": lambda d: t(d, 2).unsqueeze(5),
    "squeeze_dim_out_of_range": lambda d: t(d, 2).squeeze(3),
    "index_fill_dim_out_of_range": lambda d: t(d, 3).index_fill(
        3, i64(d, [0]), 1.0),
    "index_select_dim_out_of_range": lambda d: t(d, 3).index_select(
        2, i64(d, [0])),
    "narrow_out_of_range": lambda d: t(d, 3).narrow(0, 2, 5),
    "select_index_out_of_range": lambda d: t(d, 3).select(0, 7),
    "topk_k_too_large": lambda d: torch.topk(t(d, 3), 5),
    "kthvalue_k_out_of_range": lambda d: torch.kthvalue(t(d, 3), 9),
    "chunk_zero": lambda d: t(d, 4).chunk(0),
    "split_negative_size": lambda d: t(d, 4).split(-1),
    # dtypes and casting rules
    "out_wrong_dtype": lambda d: torch.add(
        t(d, 3), 1.5, out=torch.empty(3, dtype=torch.int64, device=d)),
    "inplace_float_into_long": lambda d: t(d, 3, dtype=torch.int64).add_(1.5),
    "inplace_float_into_bool": lambda d: t(d, 3, dtype=torch.bool).mul_(1.5),
    "bool_add_float_alpha": lambda d: torch.add(
        t(d, 3, dtype=torch.bool), t(d, 3, dtype=torch.bool), alpha=1.1),
    "int_add_float_alpha": lambda d: torch.add(
        t(d, 3, dtype=torch.int64), t(d, 3, dtype=torch.int64), alpha=1.5),
    "bool_subtraction": lambda d: t(d, 3, dtype=torch.bool) - t(
        d, 3, dtype=torch.bool),
    "bool_negation": lambda d: -t(d, 3, dtype=torch.bool),
    "bitwise_and_float": lambda d: torch.bitwise_and(t(d, 3), t(d, 3)),
    "addcdiv_integer": lambda d: torch.addcdiv(
        t(d, 3, dtype=torch.int64), t(d, 3, dtype=torch.int64),
        t(d, 3, dtype=torch.int64)),
    "mean_of_integers": lambda d: t(d, 3, dtype=torch.int64).mean(),
    "lerp_dtype_mismatch": lambda d: torch.lerp(
        t(d, 3), t(d, 3, dtype=torch.float64), 0.5),
    "where_float_condition": lambda d: torch.where(t(d, 3), t(d, 3), t(d, 3)),
    "cross_entropy_float_target": lambda d: torch.nn.functional.cross_entropy(
        t(d, 2, 3), t(d, 2)),
    # index dtypes and empty-index rules
    "index_select_float_index": lambda d: t(d, 3).index_select(0, t(d, 1)),
    "gather_float_index": lambda d: torch.gather(t(d, 3), 0, t(d, 2)),
    "scatter_float_index": lambda d: t(d, 3).scatter(0, t(d, 2), 1.0),
    "embedding_float_indices": lambda d: torch.nn.functional.embedding(
        t(d, 2), t(d, 3, 4)),
    "index_with_float_tensor": lambda d: t(d, 3)[t(d, 1)],
    "masked_fill_float_mask": lambda d: t(d, 3).masked_fill(t(d, 3), 0.0),
    # scalar arguments
    "arange_zero_step": lambda d: torch.arange(0, 3, 0, device=d),
    "linspace_negative_steps": lambda d: torch.linspace(0, 1, -1, device=d),
    "clamp_without_bounds": lambda d: torch.clamp(t(d, 3)),
    "div_bad_rounding_mode": lambda d: torch.div(
        t(d, 3), t(d, 3), rounding_mode="nearest"),
    "dropout_probability_above_one": lambda d: torch.nn.functional.dropout(
        t(d, 3), p=1.5),
    "max_pool_kernel_too_large": lambda d: torch.nn.functional.max_pool2d(
        t(d, 1, 1, 2, 2), 5),
    "einsum_bad_equation": lambda d: torch.einsum("ij,jk->il", t(d, 2, 3),
                                                  t(d, 3, 4)),
    # checks CPU's kernels make and torch 2.13's Meta kernels do not
    "inplace_addcmul_float_into_long": lambda d: t(
        d, 3, dtype=torch.int64).addcmul_(t(d, 3), t(d, 3)),
    "argsort_dim_out_of_range": lambda d: torch.argsort(t(d, 2, 3), 3),
    "log_softmax_dim_out_of_range": lambda d: torch.log_softmax(
        t(d, 2, 3), 4),
    "bitwise_not_float": lambda d: torch.bitwise_not(t(d, 3)),
    "left_shift_bool": lambda d: torch.bitwise_left_shift(
        t(d, 3, dtype=torch.bool), t(d, 3, dtype=torch.bool)),
    "gcd_float": lambda d: torch.gcd(t(d, 3), t(d, 3)),
    "remainder_bool": lambda d: torch.remainder(
        t(d, 3, dtype=torch.bool), t(d, 3, dtype=torch.bool)),
    "abs_bool": lambda d: torch.abs(t(d, 3, dtype=torch.bool)),
    "histc_integer": lambda d: torch.histc(t(d, 3, dtype=torch.int64)),
    "mm_bool": lambda d: torch.mm(t(d, 2, 2, dtype=torch.bool),
                                  t(d, 2, 2, dtype=torch.bool)),
    "mm_dtype_mismatch": lambda d: torch.mm(
        t(d, 2, 2), t(d, 2, 2, dtype=torch.float64)),
    "sort_complex": lambda d: torch.sort(t(d, 3, dtype=torch.complex64)),
    "max_complex": lambda d: torch.max(t(d, 3, dtype=torch.complex64)),
    "cumsum_into_bool_out": lambda d: torch.cumsum(
        t(d, 3), 0, out=torch.empty(3, dtype=torch.bool, device=d)),
    "index_add_float_index": lambda d: torch.index_add(
        t(d, 3), 0, t(d, 1), t(d, 1)),
    "index_copy_float_index": lambda d: torch.index_copy(
        t(d, 3), 0, t(d, 1), t(d, 1)),
    "index_fill_float_index": lambda d: torch.index_fill(
        t(d, 3), 0, t(d, 1), 1.0),
    "put_float_index": lambda d: t(d, 3).put_(t(d, 1), t(d, 1)),
    "index_put_float_index": lambda d: t(d, 3).index_put_((t(d, 1),),
                                                          t(d, 1)),
    "argmax_over_65_dims": lambda d: torch.ones([1] * 65, device=d).argmax(0),
}

def _without_type_names(message):
    """Legacy tensor type names name the device ("torch.FloatTensor" on CPU,
    "torch.cuda.FloatTensor" on CUDA): they may differ, nothing else."""
    return re.sub(r"torch\.(\w+\.)?\w+Tensor|\b\w*(Float|Double|Half|Long|Int|"
                  r"Short|Byte|Char|Bool|BFloat16)Type\b", "<type>", message)


def _drain():
    """Clears an error a failed case left on the stream, so that it cannot
    show up in the next case."""
    try:
        torch.openreg.synchronize()
    except Exception:  # noqa: BLE001 - reported by the failed case
        pass


def _cpu_error(case):
    with pytest.raises(Exception) as caught:
        CASES[case]("cpu")
    return caught.value


class TestMisuseAtTheCall(TestCase):
    @parametrize("case", sorted(CASES))
    def test_misuse_is_refused(self, device, case):
        expected = _cpu_error(case)
        if torch.device(device).type == "cpu":
            return  # the table's reference: _cpu_error checked it raises
        first_line = str(expected).splitlines()[0]
        raised_at_call = None
        try:
            CASES[case](device)
        except Exception as error:  # noqa: BLE001 - compared below
            raised_at_call = error
        try:
            self._check(case, expected, first_line, raised_at_call, device)
        finally:
            _drain()

    def _check(self, case, expected, first_line, raised_at_call, device):
        self.assertIsNotNone(raised_at_call,
                             f"{case} was not refused at the call")
        self.assertIs(type(raised_at_call), type(expected),
                      f"{raised_at_call!r} vs CPU's {expected!r}")
        self.assertTrue(
            _without_type_names(str(raised_at_call)).startswith(
                _without_type_names(first_line)),
            f"{raised_at_call} vs CPU's {first_line}")
        # The next op is clean: nothing was left on the stream.
        torch.openreg.synchronize()
        self.assertEqual((t(device, 2) * 2).cpu(), torch.full((2,), 2.0))


    def test_a_misuse_repeated_is_refused_at_each_call(self, device):
        # A refused signature is never remembered as checked.
        for _ in range(3):
            with self.assertRaisesRegex(NotImplementedError,
                                        "not implemented for 'Float'"):
                torch.bitwise_xor(t(device, 4), t(device, 4))
        self.assertEqual((t(device, 2) * 2).cpu(), torch.full((2,), 2.0))

    def test_a_checked_signature_accepts_valid_calls_after_a_misuse(
            self, device):
        x = t(device, 3, dtype=torch.int64)
        with self.assertRaises(RuntimeError):
            x.mul_(1.5)
        x.mul_(3)  # the same op with an integral scalar is valid
        self.assertEqual(x.cpu(), torch.full((3,), 3, dtype=torch.int64))


instantiate_device_type_tests(TestMisuseAtTheCall, globals())


def test_the_table_is_large_enough():
    assert len(CASES) >= 60


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
