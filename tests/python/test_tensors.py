"""Tensors on openreg:0 and openreg:1 computed by the daemon, compared with
CPU results. One daemon (2 devices) serves the whole module."""

import sys

import pytest
import torch

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def test_device_registered_and_counted():
    assert torch._C._get_privateuse1_backend_name() == "openreg"
    assert torch.openreg.is_available()
    assert torch.openreg.device_count() == 2
    assert torch.openreg.current_device() == 0


@pytest.mark.parametrize("index", [0, 1])
def test_host_device_round_trip(index):
    cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    device = cpu.to(f"openreg:{index}")
    assert device.device == torch.device("openreg", index)
    assert device.is_openreg
    torch.testing.assert_close(device.cpu(), cpu)


def test_all_copy_directions():
    cpu = torch.randn(1000, 33)
    d0 = cpu.to("openreg:0")                       # host -> device
    d0_copy = d0.clone()                           # device -> device
    d1 = d0.to("openreg:1")                        # device 0 -> device 1
    d0_back = d1.to("openreg:0")                   # device 1 -> device 0
    for tensor in (d0, d0_copy, d1, d0_back):
        torch.testing.assert_close(tensor.cpu(), cpu)  # device -> host
    assert d1.device.index == 1 and d0_back.device.index == 0


def test_large_copy_spans_many_staging_chunks():
    cpu = torch.randn(5_000_000)  # 20 MB: several 4 MiB staging chunks
    torch.testing.assert_close(cpu.to("openreg").cpu(), cpu)


def test_non_contiguous_and_dtype_converting_copies():
    cpu = torch.randn(8, 10)
    device = cpu.to("openreg")
    torch.testing.assert_close(device.t().cpu(), cpu.t())
    torch.testing.assert_close(device[:, ::3].cpu(), cpu[:, ::3])
    target = torch.zeros(10, 8, device="openreg")
    target.copy_(cpu.t())
    torch.testing.assert_close(target.cpu(), cpu.t())
    torch.testing.assert_close(device.to(torch.float64).cpu(), cpu.double())
    host_half = torch.empty(8, 10, dtype=torch.float16)
    host_half.copy_(device)
    torch.testing.assert_close(host_half, cpu.half())


@pytest.mark.parametrize("index", [0, 1])
def test_arithmetic_matches_cpu(index):
    a_cpu = torch.randn(64, 32)
    b_cpu = torch.randn(64, 32)
    a = a_cpu.to(f"openreg:{index}")
    b = b_cpu.to(f"openreg:{index}")
    torch.testing.assert_close((a + b).cpu(), a_cpu + b_cpu)
    torch.testing.assert_close((a * b - 3).cpu(), a_cpu * b_cpu - 3)
    torch.testing.assert_close((a / (b.abs() + 1)).cpu(), a_cpu / (b_cpu.abs() + 1))
    torch.testing.assert_close(torch.exp(a).cpu(), torch.exp(a_cpu))
    torch.testing.assert_close(torch.where(a > 0, a, b).cpu(),
                               torch.where(a_cpu > 0, a_cpu, b_cpu))
    torch.testing.assert_close((a + 2.5).cpu(), a_cpu + 2.5)
    torch.testing.assert_close((a * torch.tensor(3.0)).cpu(), a_cpu * 3.0)


def test_reductions_match_cpu():
    cpu = torch.randn(17, 23, 5)
    device = cpu.to("openreg:1")
    torch.testing.assert_close(device.sum().cpu(), cpu.sum())
    torch.testing.assert_close(device.mean(dim=1).cpu(), cpu.mean(dim=1))
    torch.testing.assert_close(device.amax(dim=(0, 2)).cpu(), cpu.amax(dim=(0, 2)))
    values, indices = device.max(dim=2)
    expected_values, expected_indices = cpu.max(dim=2)
    torch.testing.assert_close(values.cpu(), expected_values)
    assert torch.equal(indices.cpu(), expected_indices)
    torch.testing.assert_close(device.std(dim=0).cpu(), cpu.std(dim=0))
    torch.testing.assert_close(torch.softmax(device, dim=-1).cpu(),
                               torch.softmax(cpu, dim=-1))


def test_matmul_matches_cpu():
    a_cpu = torch.randn(37, 64)
    b_cpu = torch.randn(64, 19)
    a = a_cpu.to("openreg")
    b = b_cpu.to("openreg")
    torch.testing.assert_close((a @ b).cpu(), a_cpu @ b_cpu)
    batch_cpu = torch.randn(4, 8, 16)
    torch.testing.assert_close(torch.bmm(batch_cpu.to("openreg"),
                                         batch_cpu.transpose(1, 2).to("openreg")).cpu(),
                               torch.bmm(batch_cpu, batch_cpu.transpose(1, 2)))
    linear = torch.nn.functional.linear(a, b.t())
    torch.testing.assert_close(linear.cpu(), a_cpu @ b_cpu)


def test_normalizations_run_cpus_own_kernel_in_one_launch():
    """layer_norm and group_norm: CPU runs a kernel of its own, other
    backends get a decomposition (kernels/decomposed_cpu_ops.h); openreg
    runs CPU's kernel in the daemon, forward and backward, with its bits."""
    torch.manual_seed(0)
    x = torch.randn(8, 16, 64, requires_grad=True)
    images = torch.randn(4, 8, 5, 5, requires_grad=True)
    weight, bias = torch.randn(64), torch.randn(64)
    group_weight, group_bias = torch.randn(8), torch.randn(8)

    def run(device):
        inputs = [t.detach().to(device).requires_grad_()
                  for t in (x, images)]
        out = torch.nn.functional.layer_norm(
            inputs[0], (64,), weight.to(device), bias.to(device))
        grouped = torch.nn.functional.group_norm(
            inputs[1], 4, group_weight.to(device), group_bias.to(device))
        (out.square().sum() + grouped.square().sum()).backward()
        return [t.cpu() for t in (out, grouped, inputs[0].grad,
                                  inputs[1].grad)]

    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        on_device = run("openreg")
    ops = {op["op"]: op["count"] for op in costs.ops}
    for name in ("aten::native_layer_norm", "aten::native_group_norm",
                 "aten::native_layer_norm_backward",
                 "aten::native_group_norm_backward"):
        assert ops.get(name) == 1, (name, ops)
    assert "aten::native_batch_norm" not in ops, ops
    for got, expected in zip(on_device, run("cpu")):
        assert torch.equal(got, expected)


def test_views_share_memory_with_their_base():
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.to("openreg")
    view = base[1:3, ::2]
    assert view._base is base or view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    view.mul_(-1)
    base_cpu[1:3, ::2].mul_(-1)
    torch.testing.assert_close(base.cpu(), base_cpu)
    torch.testing.assert_close(base.view(6, 4).cpu(), base_cpu.view(6, 4))
    torch.testing.assert_close(base.t().contiguous().cpu(), base_cpu.t().contiguous())
    torch.testing.assert_close(base.unsqueeze(0).expand(2, 4, 6).cpu(),
                               base_cpu.unsqueeze(0).expand(2, 4, 6))
    chunks = base.split(2, dim=1)
    for chunk, expected in zip(chunks, base_cpu.split(2, dim=1)):
        torch.testing.assert_close(chunk.cpu(), expected)


def test_in_place_ops_and_out_variants():
    cpu = torch.randn(10, 10)
    device = cpu.to("openreg")
    device.add_(1).mul_(2).clamp_(min=-1, max=3)
    cpu.add_(1).mul_(2).clamp_(min=-1, max=3)
    torch.testing.assert_close(device.cpu(), cpu)
    out = torch.empty(0, device="openreg")  # resized by the op
    torch.add(device, device, out=out)
    torch.testing.assert_close(out.cpu(), cpu + cpu)
    zeros = torch.zeros(3, 4, device="openreg")
    ones = torch.ones(3, 4, device="openreg:1")
    full = torch.full((2, 2), 7.0, device="openreg")
    assert zeros.cpu().eq(0).all() and ones.cpu().eq(1).all()
    assert full.cpu().eq(7).all() and ones.device.index == 1


def test_data_dependent_shapes_run_synchronously():
    cpu = torch.tensor([0.0, 1.5, 0.0, -2.0, 3.0])
    device = cpu.to("openreg")
    assert torch.equal(torch.nonzero(device).cpu(), torch.nonzero(cpu))
    torch.testing.assert_close(device[device > 0].cpu(), cpu[cpu > 0])
    torch.testing.assert_close(torch.unique(device).cpu(), torch.unique(cpu))


def test_item_tolist_and_comparisons():
    cpu = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    device = cpu.to("openreg")
    assert device[1, 0].item() == 3.25
    assert device.sum().item() == pytest.approx(cpu.sum().item())
    assert device.tolist() == cpu.tolist()
    assert torch.equal(device.cpu(), cpu)
    assert (device > 0).cpu().tolist() == (cpu > 0).tolist()
    assert torch.allclose(device.cpu(), cpu)
    assert int(torch.tensor(7, device="openreg")) == 7


ITEM_DTYPES = [
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex32,
    torch.complex64, torch.complex128, torch.float8_e5m2,
    torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float8_e4m3fnuz,
    torch.float8_e8m0fnu,
]


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", ITEM_DTYPES, ids=str)
def test_item_gives_cpus_python_value_for_every_dtype(dtype):
    # .item() reads the element into a local of its C++ type (as CUDA); the
    # Python value and its type must be CPU's for every dtype.
    for value in (1.5, -3.0, 0.0, 7.0):
        cpu = torch.tensor([value, 2.0]).to(dtype)
        for device in ("openreg:0", "openreg:1"):
            got, want = cpu.to(device)[0].item(), cpu[0].item()
            assert type(got) is type(want)
            assert got == want or (got != got and want != want)  # NaN


def test_item_of_a_quantized_tensor_dequantizes_as_cpu():
    cpu = torch.quantize_per_tensor(torch.tensor([1.0, 2.3]), 0.1, 0,
                                    torch.qint8)
    assert cpu.to("openreg")[1].item() == cpu[1].item()


def test_printing_shows_device_and_values():
    device = torch.tensor([1.0, 2.5, -3.0], device="openreg:1")
    text = repr(device)
    assert "openreg:1" in text
    assert "2.5000" in text and "-3.0000" in text
    assert "openreg" in str(torch.zeros(2, 2, device="openreg"))


def test_integer_bool_and_half_dtypes():
    ints = torch.arange(10, dtype=torch.int64)
    torch.testing.assert_close((ints.to("openreg") * 3 // 2).cpu(), ints * 3 // 2)
    bools = ints.to("openreg") % 2 == 0
    assert bools.dtype == torch.bool and bools.cpu().tolist() == (ints % 2 == 0).tolist()
    halves = torch.randn(16).half()
    torch.testing.assert_close((halves.to("openreg") * 2).cpu(), halves * 2)


def test_invalid_device_index_is_a_clear_error():
    # The phrase of PyTorch's reference backend, with openreg's detail.
    with pytest.raises(RuntimeError, match="The device index is out of range: "
                       "device 7 of a daemon with 2 openreg devices"):
        torch.empty(3, device="openreg:7")
    with pytest.raises(RuntimeError,
                       match="The device index is out of range: device 9"):
        torch.openreg.set_device(9)
    assert torch.openreg.current_device() == 0


def test_mixing_devices_raises_pytorch_error():
    a = torch.ones(3, device="openreg:0")
    b = torch.ones(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)


def test_device_context_and_set_device():
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        assert torch.empty(2, device="openreg").device.index == 1
    assert torch.openreg.current_device() == 0
    torch.openreg.set_device(1)
    try:
        assert torch.zeros(1, device="openreg").device.index == 1
    finally:
        torch.openreg.set_device(0)


def test_an_op_runs_on_its_tensors_device_and_leaves_the_current_one():
    # The fallback switches devices only when the tensors' device is not
    # the current one; either way the caller's device is unchanged after.
    on_other = torch.arange(4.0).to("openreg:1")
    with torch.openreg.device(0):
        result = on_other * 2 + 1
        assert result.device.index == 1
        assert torch.openreg.current_device() == 0
        with pytest.raises(RuntimeError):
            on_other + torch.ones(5, device="openreg:1")  # shapes mismatch
        assert torch.openreg.current_device() == 0
    with torch.openreg.device(1):
        on_current = torch.arange(4.0, device="openreg") + 1
        assert on_current.device.index == 1
        assert torch.openreg.current_device() == 1
    torch.testing.assert_close(result.cpu(), torch.arange(4.0) * 2 + 1)
    torch.testing.assert_close(on_current.cpu(), torch.arange(4.0) + 1)


def test_kernel_counters_show_ops_ran_on_their_device():
    before = {d["device"]: d for d in torch.openreg.daemon_stats()["devices"]}
    x = torch.randn(100, 100).to("openreg:1")
    for _ in range(5):
        x = x * 1.01 + 0.5
    torch.openreg.synchronize(1)
    after = {d["device"]: d for d in torch.openreg.daemon_stats()["devices"]}
    assert after[1]["kernels_executed"] >= before[1]["kernels_executed"] + 10
    assert after[0]["kernels_executed"] == before[0]["kernels_executed"]


def test_freed_source_of_a_queued_cross_device_copy_is_not_reused_early():
    busy = torch.randn(700, 700, device="openreg:1")
    for _ in range(6):  # keeps openreg:1's stream busy for a while
        busy = busy @ busy / 700
    expected = torch.arange(1 << 18, dtype=torch.float32)
    source = expected.to("openreg:0")
    torch.openreg.synchronize(0)
    copied = source.to("openreg:1")  # queued behind the matmuls
    del source  # its free must wait for openreg:1's queued copy
    reuse = torch.full((1 << 18,), 7.0, device="openreg:0")
    torch.testing.assert_close(copied.cpu(), expected)
    assert reuse[0].item() == 7.0


def test_device_properties_and_memory_info():
    props = torch.openreg.get_device_properties(1)
    assert props.total_memory == 2 * 1024**3
    assert "openreg" in torch.openreg.get_device_name(0)
    free, total = torch.openreg.mem_get_info(0)
    assert total == 2 * 1024**3 and 0 < free <= total


def test_synchronize_reports_async_kernel_errors():
    # A shape error is caught before launch by the Meta kernel...
    with pytest.raises(RuntimeError, match="size of tensor"):
        torch.ones(3, device="openreg") + torch.ones(4, device="openreg")
    # ...and the device stays usable afterwards.
    assert torch.ones(2, device="openreg").sum().item() == 2.0



# (operation on x = arange(6), y = zeros(1); whether the result's values
# are defined: resize_ leaves new elements uninitialized on every device).
_METADATA_OPERATIONS = {
    "set_storage_offset_size_without_strides":
        (lambda x, y: y.set_(x.untyped_storage(), 0, (2, 2)), True),
    "set_storage_with_offset_without_strides":
        (lambda x, y: y.set_(x.untyped_storage(), 1, (3,)), True),
    "set_storage_with_strides":
        (lambda x, y: y.set_(x.untyped_storage(), 0, (2, 2), (1, 2)), True),
    "set_tensor": (lambda x, y: y.set_(x), True),
    "set_whole_storage": (lambda x, y: y.set_(x.untyped_storage()), True),
    "as_strided_with_offset": (lambda x, y: x.as_strided((2, 2), (1, 2), 1),
                               True),
    "as_strided_zero_stride": (lambda x, y: x.as_strided((3,), (0,)), True),
    "resize_grows": (lambda x, y: y.resize_(3, 2), False),
    "resize_to_empty": (lambda x, y: y.resize_(0), True),
    "view_of_offset_slice": (lambda x, y: x[1:].view(5), True),
}


@pytest.mark.parametrize("name", sorted(_METADATA_OPERATIONS))
def test_set_as_strided_and_resize_match_cpu(name):
    operation, values_defined = _METADATA_OPERATIONS[name]

    def run(device):
        x = torch.arange(6.0, device=device)
        y = torch.zeros(1, device=device)
        result = operation(x, y)
        return (tuple(result.shape), result.stride(), result.storage_offset(),
                result.cpu().tolist() if values_defined else None)

    assert run("openreg") == run("cpu")


def test_accelerator_device_capability_lists_the_supported_dtypes():
    capability = torch.accelerator.get_device_capability("openreg:0")
    dtypes = set(capability["supported_dtypes"])
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                  torch.complex64, torch.complex32, torch.int64, torch.uint8,
                  torch.bool):
        assert dtype in dtypes, dtype
    # Per-tensor affine quantized tensors (test_quantized.py); not the
    # sub-byte ones.
    for dtype in (torch.qint8, torch.quint8, torch.qint32):
        assert dtype in dtypes, dtype
    assert torch.quint4x2 not in dtypes and torch.quint2x4 not in dtypes
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.accelerator.get_device_capability("openreg:5")

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
