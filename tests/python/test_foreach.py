"""ATen's foreach ops on openreg (torch_backend/kernels/foreach_ops.h): one
launch per call whatever the list's length, run in the daemon as CPU eager
runs them (CPU's bits), and misuse raised at the call."""

import sys

import pytest
import torch

from daemon_fixture import process_daemon
from intra_op_threads import GRAIN_SIZE, num_threads

# Before torch.testing._internal, whose import asks whether openreg is
# available (which connects).
DAEMON = process_daemon(devices=1)

from torch.testing._internal import common_methods_invocations as cmi  # noqa: E402,E501

FOREACH_OPS = (cmi.foreach_unary_op_db + cmi.foreach_binary_op_db +
               cmi.foreach_pointwise_op_db + cmi.foreach_reduce_op_db +
               cmi.foreach_other_op_db)


def launches(run):
    """(op name, count, synchronous launches) of what `run` launched,
    after one warm-up call (a signature's first launch is checked)."""
    run()
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        run()
    return {op["op"]: (op["count"], op["synchronous"]) for op in costs.ops}


def to_device(value):
    if isinstance(value, torch.Tensor):
        return value.to("openreg")
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v) for v in value)
    return value


def flat_tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flat_tensors(v)]
    return []


def bitwise_equal(actual, expected):
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    actual = actual.cpu()
    same = actual == expected
    if expected.is_floating_point() or expected.is_complex():
        same |= actual.isnan() & expected.isnan()
    return bool(same.all())


def run_both(function, sample):
    """`function` on the sample on CPU and on openreg: (error type or
    None, results and inputs after the call) for each."""
    outcomes = []
    for device in ("cpu", "openreg"):
        inputs = [sample.input, *sample.args]
        inputs = [to_device(v) if device == "openreg" else
                  (v.clone() if isinstance(v, torch.Tensor) else
                   [t.clone() for t in v] if isinstance(v, list) and v
                   and isinstance(v[0], torch.Tensor) else v)
                  for v in inputs]
        try:
            result = function(*inputs, **sample.kwargs)
        except Exception as error:  # compared between the two devices
            outcomes.append((type(error), []))
            continue
        outcomes.append((None, flat_tensors(result) + flat_tensors(inputs)))
    return outcomes


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_every_foreach_op_of_pytorchs_op_db_equals_cpu_bitwise(dtype):
    """PyTorch's own samples of every foreach op (functional and in place):
    openreg's results, and the inputs an in-place variant wrote, are CPU
    eager's bit for bit; a call CPU refuses is refused too."""
    compared, refused = 0, 0
    for info in FOREACH_OPS:
        if dtype not in info.supported_dtypes("cpu"):
            continue
        for sample in info.sample_inputs("cpu", dtype,
                                         num_input_tensors=[1, 4]):
            for function in (info.method_variant, info.inplace_variant):
                if function is None:
                    continue
                (cpu_error, cpu_out), (dev_error, dev_out) = run_both(
                    function, sample)
                assert cpu_error == dev_error, (info.name, sample,
                                                cpu_error, dev_error)
                if cpu_error is not None:
                    refused += 1
                    continue
                assert len(cpu_out) == len(dev_out), info.name
                for expected, actual in zip(cpu_out, dev_out):
                    assert bitwise_equal(actual, expected), (info.name,
                                                             sample)
                compared += 1
    assert compared > (150 if dtype == torch.float32 else 50), compared


def test_a_foreach_op_is_one_launch_whatever_the_lists_length():
    tensors = [torch.randn(16, device="openreg") for _ in range(40)]
    others = [torch.randn(16, device="openreg") for _ in range(40)]
    seen = launches(lambda: (torch._foreach_mul_(tensors, 0.5),
                             torch._foreach_add_(tensors, others, alpha=2),
                             torch._foreach_sqrt([t.abs() for t in others])))
    assert seen["aten::_foreach_mul_.Scalar"] == (1, 0), seen
    assert seen["aten::_foreach_add_.List"] == (1, 0), seen
    assert seen["aten::_foreach_sqrt"] == (1, 0), seen
    assert not any(name in seen for name in ("aten::mul_.Scalar",
                                             "aten::sqrt")), seen


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9,
                                   nesterov=True),
    lambda params: torch.optim.Adam(params, lr=1e-2, amsgrad=True),
], ids=["AdamW", "SGD-nesterov", "Adam-amsgrad"])
def test_an_optimizers_multi_tensor_step_equals_cpus_in_a_few_launches(
        make_optimizer):
    """openreg is a foreach device, as CUDA is: an optimizer takes its
    multi-tensor path there. Its parameters are CPU's multi-tensor step's
    bit for bit; its step is a few launches however many parameters, none
    of them checked once warm (Adam's step sizes change at every step: the
    Meta-result cache keys them by sign and binary exponent)."""
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(
        *[torch.nn.Linear(16, 16) for _ in range(12)])
    device_model = torch.nn.Sequential(
        *[torch.nn.Linear(16, 16) for _ in range(12)]).to("openreg")
    device_model.load_state_dict(cpu_model.state_dict())
    cpu_optimizer = make_optimizer(cpu_model.parameters())
    cpu_optimizer.defaults["foreach"] = True
    for group in cpu_optimizer.param_groups:
        group["foreach"] = True  # CPU's default is the per-tensor loop
    device_optimizer = make_optimizer(device_model.parameters())
    x = torch.randn(8, 16)

    def step(model, optimizer, inputs):
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(3):
        step(cpu_model, cpu_optimizer, x)
        step(device_model, device_optimizer, x.to("openreg"))
    for expected, actual in zip(cpu_model.parameters(),
                                device_model.parameters()):
        assert bitwise_equal(actual.detach(), expected.detach())

    # Steps 21-30: Adam's step sizes change at every step, but within one
    # binary exponent (the class the cache keys them by), which the first
    # 20 steps met.
    for _ in range(17):
        device_optimizer.step()
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for _ in range(10):
            device_optimizer.step()
    parameters = len(list(device_model.parameters()))
    assert costs.commands() <= 10 * 12 < 10 * parameters * 2, costs.table()
    assert costs.synchronous_launches() == 0, costs.table()


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.AdamW(params, lr=1e-2, fused=True),
    lambda params: torch.optim.Adam(params, lr=1e-2, amsgrad=True,
                                    fused=True),
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True),
    lambda params: torch.optim.Adagrad(params, lr=0.1, fused=True),
], ids=["AdamW", "Adam-amsgrad", "SGD", "Adagrad"])
def test_a_fused_optimizers_step_is_one_launch_of_cpus_fused_kernel(
        make_optimizer):
    """openreg is a fused-optimizer device too (torch.optim lists the
    PrivateUse1 backend): `fused=True` runs CPU's fused kernel in the
    daemon, one launch for every parameter, with CPU's bits, and none of
    its launches waits for the daemon once warm, under a learning-rate
    schedule too."""
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(
        *[torch.nn.Linear(16, 16) for _ in range(6)])
    device_model = torch.nn.Sequential(
        *[torch.nn.Linear(16, 16) for _ in range(6)]).to("openreg")
    device_model.load_state_dict(cpu_model.state_dict())
    cpu_optimizer = make_optimizer(cpu_model.parameters())
    device_optimizer = make_optimizer(device_model.parameters())
    x = torch.randn(8, 16)
    for _ in range(3):
        for model, optimizer, inputs in (
                (cpu_model, cpu_optimizer, x),
                (device_model, device_optimizer, x.to("openreg"))):
            optimizer.zero_grad()
            model(inputs).square().mean().backward()
            optimizer.step()
    for expected, actual in zip(cpu_model.parameters(),
                                device_model.parameters()):
        assert bitwise_equal(actual.detach(), expected.detach())
    # A schedule changes the learning rate at every step; 0.1 or 0.01 times
    # 0.99**n stays within one binary exponent (the class the cache keys
    # it by) for n <= 24, so once step 1 is checked, none waits.
    schedule = torch.optim.lr_scheduler.ExponentialLR(device_optimizer, 0.99)
    device_optimizer.step()
    schedule.step()
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        for _ in range(10):
            device_optimizer.step()
            schedule.step()
    fused = [op for op in costs.ops if op["op"].startswith("aten::_fused_")]
    assert len(fused) == 1 and fused[0]["count"] == 10, costs.table()
    assert costs.synchronous_launches() == 0, costs.table()


def test_a_list_longer_than_one_launch_goes_in_chunks_with_cpus_results():
    """A launch must fit its stream's ring: 3,000 parameters in one launch
    were refused ("exceeds the stream ring's limit"). Lists go in chunks
    of 256, as CUDA's multi_tensor_apply splits them; a functional op's
    results come back in order; a fused step's unused state lists (empty)
    go with every chunk."""
    count = 3000
    generator = torch.Generator().manual_seed(0)
    lists = [[torch.randn(4, generator=generator) for _ in range(count)]
             for _ in range(5)]
    params, grads, exp_avgs, exp_avg_sqs, divisors = lists
    divisors = [d.abs() + 1 for d in divisors]
    steps = [torch.tensor(float(i % 7 + 1)) for i in range(count)]
    weights = [0.5 + i / count for i in range(count)]
    device = {name: [t.to("openreg") for t in tensors] for name, tensors in
              [("params", params), ("grads", grads), ("exp_avgs", exp_avgs),
               ("exp_avg_sqs", exp_avg_sqs), ("divisors", divisors),
               ("steps", steps)]}

    def run(p, g, m, v, d, s):
        torch._foreach_addcdiv_(p, g, d, weights)
        roots = torch._foreach_sqrt(d)
        torch._fused_adamw_(p, g, m, v, [], s, lr=1e-2, beta1=0.9,
                            beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False)
        return roots

    expected = run(params, grads, exp_avgs, exp_avg_sqs, divisors, steps)
    torch.openreg.synchronize()
    with torch.openreg.command_costs() as costs:
        actual = run(*device.values())
        torch.openreg.synchronize()
    launches = {op["op"]: op["count"] for op in costs.ops}
    assert launches == {"aten::_foreach_addcdiv_.ScalarList": 12,
                        "aten::_foreach_sqrt": 12,
                        "aten::_fused_adamw_": 12}, launches
    assert len(actual) == count
    for got, want in zip([*actual, *device["params"], *device["exp_avgs"]],
                         [*expected, *params, *exp_avgs]):
        assert bitwise_equal(got, want)


def test_an_op_too_large_for_one_launch_is_refused_at_the_call():
    """What is not chunked (a `cat` of 20,000 tensors) is refused at its
    call, saying what to do, and the stream goes on."""
    pieces = [torch.ones(1, device="openreg")] * 20000
    with pytest.raises(ValueError, match="exceeds the stream ring's limit.*"
                       "split it into calls over fewer"):
        torch.cat(pieces)
    halves = [torch.cat(pieces[:2000]), torch.cat(pieces[2000:4000])]
    assert torch.cat(halves).sum().item() == 4000


def test_a_foreach_op_whose_lists_overlap_is_refused_at_the_call():
    """A signature first launched without overlap is cached; the same
    signature whose written list partly overlaps another argument is a
    new key (the cache keys lists' aliasing), so CPU's refusal comes at
    the call and the stream goes on."""
    base = torch.arange(20.0, device="openreg")
    apart = torch.arange(20.0, device="openreg")
    torch._foreach_mul_([apart[1:11]], [base[0:10]])
    torch.openreg.synchronize()
    cpu_base = torch.arange(20.0)
    with pytest.raises(RuntimeError) as on_cpu:
        torch._foreach_mul_([cpu_base[1:11]], [cpu_base[0:10]])
    with pytest.raises(RuntimeError) as on_device:
        torch._foreach_mul_([base[1:11]], [base[0:10]])
    assert "unsupported operation" in str(on_cpu.value)
    assert "unsupported operation" in str(on_device.value)
    assert torch.equal(base.cpu(), cpu_base)
    assert torch.equal((base + 1).cpu(), cpu_base + 1)


def test_a_foreach_list_across_devices_is_refused_at_the_call():
    on_device = [torch.ones(2, device="openreg")]
    with pytest.raises(RuntimeError, match="same device"):
        torch._foreach_add_(on_device, [torch.ones(2)])


def test_pointwise_foreach_ops_run_on_one_thread_the_norm_keeps_the_count():
    """launch_threads.h: a foreach op of a pointwise op gives the same bits
    on one thread at any size; `_foreach_norm` of large tensors (a
    reduction) keeps the client's count."""
    large = [torch.randn(4 * GRAIN_SIZE, device="openreg") for _ in range(3)]
    with num_threads(2):
        large_copy = [t.clone() for t in large]
        large_copy[0].cpu()

        def run():
            torch._foreach_addcmul_(large_copy, large, large, value=0.5)
            torch._foreach_max(large)
            return torch._foreach_norm(large)

        run()
        torch.openreg.synchronize()
        with torch.openreg.command_costs() as costs:
            norms = run()
    threads = {op["op"]: op["kernel_threads"] for op in costs.ops}
    assert threads == {"aten::_foreach_addcmul_.Scalar": 1,
                       "aten::_foreach_max": 2,
                       "aten::_foreach_norm.Scalar": 2}, threads
    with num_threads(2):
        expected = torch._foreach_norm([t.cpu() for t in large])
    for actual, wanted in zip(norms, expected):
        assert bitwise_equal(actual, wanted)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
