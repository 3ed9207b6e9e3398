"""Graph capture and replay (docs/GRAPHS.md): torch.accelerator.Graph and
torch.openreg.graph record what the capturing stream would run, and each
replay runs it in the daemon as one command; pools, CUDA's capture rules,
graph-safe random numbers, faults inside replays, multi-stream capture,
make_graphed_callables, and a graph freed with its client."""

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch.openreg import faults

from daemon_fixture import module_daemon, python_env
from float_corners import arithmetic_steps, awkward_values, same_bits

DAEMON, setup_module, teardown_module = module_daemon(
    devices=2, memory_per_device="1GiB")

NOT_PERMITTED = "operation not permitted when stream is capturing"


def warm_up(function, *args):
    """Runs `function` on a side stream first, as CUDA graphs require, so
    that every op signature is known before capture."""
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        for _ in range(2):
            function(*args)
    torch.openreg.current_stream().wait_stream(side)
    torch.openreg.synchronize()


def capture(function, *args, **graph_kwargs):
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph, **graph_kwargs):
        out = function(*args)
    return graph, out


def daemon_graphs(device=0):
    return torch.openreg.daemon_stats()["devices"][device].get("graphs", 0)


def test_an_elementwise_chain_replayed_equals_eager_and_nothing_runs_at_capture():
    static = torch.randn(1000, device="openreg")

    def chain(x):
        for _ in range(20):
            x = x * 1.01 + 0.5
        return x.relu()

    warm_up(chain, static)
    graph, out = capture(chain, static)
    out.zero_()  # nothing ran at capture: the replay fills it
    torch.openreg.synchronize()
    for value in (torch.randn(1000), torch.randn(1000)):
        static.copy_(value)
        graph.replay()
        torch.testing.assert_close(out.cpu(), chain(value))


def test_matmuls_reductions_and_in_place_updates_of_static_inputs_replay_as_eager():
    a = torch.randn(64, 32, device="openreg")
    b = torch.randn(32, 16, device="openreg")
    accumulator = torch.zeros(16, device="openreg")

    def step(a, b, accumulator):
        product = a @ b
        accumulator.add_(product.sum(0))
        return product.softmax(-1).mean(), product.amax(1)

    warm_up(step, a, b, accumulator.clone())
    accumulator.zero_()
    graph, (mean, amax) = capture(step, a, b, accumulator)
    a_cpu, b_cpu = a.cpu(), b.cpu()
    expected_accumulator = torch.zeros(16)
    for _ in range(3):
        graph.replay()
        product = a_cpu @ b_cpu
        expected_accumulator += product.sum(0)
    torch.testing.assert_close(accumulator.cpu(), expected_accumulator)
    torch.testing.assert_close(mean.cpu(), product.softmax(-1).mean())
    torch.testing.assert_close(amax.cpu(), product.amax(1))


def test_torch_accelerator_graph_captures_the_current_stream():
    x = torch.ones(8, device="openreg")
    side = torch.openreg.Stream()
    graph = torch.accelerator.Graph()
    with torch.openreg.stream(side), graph:
        x.mul_(3)
    assert torch.equal(x.cpu(), torch.ones(8))
    graph.replay()
    graph.replay()
    assert torch.equal(x.cpu(), torch.full((8,), 9.0))


def test_a_training_step_with_capturable_adam_replayed_n_times_equals_n_eager_steps():
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to("openreg")
    model.load_state_dict(model_cpu.state_dict())
    optimizer_cpu = torch.optim.Adam(model_cpu.parameters(), lr=0.01)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    inputs = [torch.randn(8, 16) for _ in range(6)]
    targets = [torch.randn(8, 4) for _ in range(6)]
    static_input = torch.zeros(8, 16, device="openreg")
    static_target = torch.zeros(8, 4, device="openreg")

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(static_input), static_target)
        loss.backward()
        optimizer.step()
        return loss

    # Warm-up steps change the weights: run them on copies' state, then
    # restore, so the replayed steps start where the CPU model does.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    warm_up(step)
    model.load_state_dict(state)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    warm_up(step)  # the fresh optimizer's state, allocated outside capture
    model.load_state_dict(state)
    for group_state in optimizer.state.values():
        for key, value in group_state.items():
            value.zero_()
    graph = torch.openreg.OpenRegGraph()
    optimizer.zero_grad(set_to_none=False)
    with torch.openreg.graph(graph):
        static_loss = step()
    model.load_state_dict(state)
    for group_state in optimizer.state.values():
        for value in group_state.values():
            value.zero_()
    for x, y in zip(inputs, targets):
        static_input.copy_(x)
        static_target.copy_(y)
        graph.replay()
        optimizer_cpu.zero_grad()
        loss_cpu = torch.nn.functional.mse_loss(model_cpu(x), y)
        loss_cpu.backward()
        optimizer_cpu.step()
        torch.testing.assert_close(static_loss.cpu(), loss_cpu.detach(),
                                   rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(model.parameters(), model_cpu.parameters()):
        torch.testing.assert_close(mine.detach().cpu(), theirs.detach(),
                                   rtol=1e-5, atol=1e-6)


def test_graphs_given_one_pool_share_it_and_replay_in_capture_order():
    x = torch.arange(4.0, device="openreg")
    pool = torch.openreg.graph_pool_handle()
    warm_up(lambda: (x + 1) * 2)
    first, doubled = capture(lambda: (x + 1) * 2, pool=pool)
    second, shifted = capture(lambda: doubled - 3, pool=pool)
    assert first.pool() == second.pool() == pool
    first.replay()
    second.replay()
    assert torch.equal(shifted.cpu(), (torch.arange(4.0) + 1) * 2 - 3)
    x.fill_(10)
    first.replay()
    second.replay()
    assert torch.equal(shifted.cpu(), torch.full((4,), 19.0))


def test_a_graphs_private_pool_is_kept_while_the_graph_lives():
    x = torch.ones(1 << 16, device="openreg")
    warm_up(lambda: x * 2)
    graph, out = capture(lambda: x * 2)
    del out  # its block returns to the graph's pool, not to the cache
    torch.openreg.empty_cache()
    other = torch.full((1 << 16,), 7.0, device="openreg")
    graph.replay()  # writes the pool's block, never `other`
    assert torch.equal(other.cpu(), torch.full((1 << 16,), 7.0))


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_reading_a_captured_result_on_the_host_is_refused_in_every_mode(mode):
    x = torch.ones(4, device="openreg")
    warm_up(lambda: x.sum())
    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match=NOT_PERMITTED):
        with torch.openreg.graph(graph, capture_error_mode=mode):
            x.sum().item()
    assert not torch.openreg.is_current_stream_capturing()
    assert torch.equal((x + 1).cpu(), torch.full((4,), 2.0))  # still usable


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_synchronizing_the_device_while_capturing_is_refused_in_strict_modes(
        mode):
    x = torch.ones(4, device="openreg")
    warm_up(lambda: x * 2)
    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match=NOT_PERMITTED) as raised:
        with torch.openreg.graph(graph, capture_error_mode=mode):
            x * 2
            torch.openreg.synchronize()
    assert mode in str(raised.value)


def test_relaxed_capture_allows_synchronize_and_allocations_outside_the_pool():
    x = torch.ones(4, device="openreg")
    warm_up(lambda: x * 2)
    side = torch.openreg.Stream()
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph, capture_error_mode="relaxed"):
        y = x * 2
        torch.openreg.synchronize()  # waits for the ring; nothing captured ran
        with torch.openreg.stream(side):
            outside = torch.empty(16 << 20, device="openreg")  # a new segment
    graph.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 2.0))
    assert outside.numel() == 16 << 20


def test_an_allocation_outside_the_pool_under_global_capture_is_refused():
    x = torch.ones(4, device="openreg")
    warm_up(lambda: x * 2)
    side = torch.openreg.Stream()  # not capturing: its memory is not the pool's
    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match=NOT_PERMITTED):
        with torch.openreg.graph(graph):
            x * 2
            with torch.openreg.stream(side):
                torch.empty(16 << 20, device="openreg")  # a new segment


def test_a_copy_from_pageable_memory_is_refused_and_from_pinned_memory_recorded():
    device_buffer = torch.zeros(16, device="openreg")
    warm_up(lambda: device_buffer.add_(1))
    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match=NOT_PERMITTED):
        with torch.openreg.graph(graph):
            device_buffer.copy_(torch.ones(16), non_blocking=True)
    pinned = torch.ones(16).pin_memory("openreg")
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        device_buffer.copy_(pinned, non_blocking=True)
        device_buffer.mul_(2)
    pinned.fill_(5)  # read at replay, as CUDA reads pinned memory then
    graph.replay()
    assert torch.equal(device_buffer.cpu(), torch.full((16,), 10.0))


def test_capturing_on_the_default_stream_is_refused():
    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        graph.capture_begin()


def test_is_current_stream_capturing_and_a_graph_replayed_on_another_stream():
    x = torch.zeros(4, device="openreg")
    warm_up(lambda: x.add_(1))
    x.zero_()
    graph = torch.openreg.OpenRegGraph()
    assert not torch.openreg.is_current_stream_capturing()
    with torch.openreg.graph(graph):
        assert torch.openreg.is_current_stream_capturing()
        x.add_(1)
    assert not torch.openreg.is_current_stream_capturing()
    other = torch.openreg.Stream()
    done = torch.openreg.Event()
    with torch.openreg.stream(other):
        graph.replay()
        done.record()
    torch.openreg.current_stream().wait_event(done)
    assert torch.equal(x.cpu(), torch.ones(4))


def test_a_forked_stream_joins_the_capture_and_must_be_joined_back():
    x = torch.ones(4, device="openreg")
    side = torch.openreg.Stream()
    warm_up(lambda: (x * 2, x + 3))
    graph = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(graph):
        side.wait_stream(torch.openreg.current_stream())  # joins
        with torch.openreg.stream(side):
            assert torch.openreg.is_current_stream_capturing()
            b = x + 3
        a = x * 2
        torch.openreg.current_stream().wait_stream(side)  # joined back
    graph.replay()
    torch.openreg.synchronize()
    assert torch.equal((a + b).cpu(), torch.full((4,), 6.0))

    graph = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="unjoined"):
        with torch.openreg.graph(graph):
            side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                x + 3  # never waited for by the capturing stream


def test_dropout_under_replay_draws_new_numbers_with_cpus_statistics():
    ones = torch.ones(200_000, device="openreg")
    warm_up(lambda: torch.nn.functional.dropout(ones, 0.3))
    graph, out = capture(lambda: torch.nn.functional.dropout(ones, 0.3))
    graph.replay()
    first = out.cpu()
    graph.replay()
    second = out.cpu()
    assert not torch.equal(first, second)
    for sample in (first, second):
        kept = (sample != 0).float().mean().item()
        assert abs(kept - 0.7) < 0.01, kept
        assert torch.allclose(sample[sample != 0],
                              torch.tensor(1 / 0.7), rtol=1e-6)
    # The generator advanced past both replays: an eager draw is new too.
    assert not torch.equal(torch.nn.functional.dropout(ones, 0.3).cpu(),
                           second)


def test_replays_draw_what_the_same_seed_gives_for_the_same_generator_position():
    ones = torch.ones(1000, device="openreg")
    warm_up(lambda: torch.rand_like(ones))
    torch.openreg.manual_seed(123)
    graph, out = capture(lambda: torch.rand_like(ones))
    graph.replay()
    first = out.cpu()
    torch.openreg.manual_seed(123)
    graph.replay()
    assert torch.equal(out.cpu(), first)


def test_a_fault_armed_for_an_op_fires_inside_a_replayed_graph_at_that_op():
    x = torch.arange(8, dtype=torch.float32, device="openreg")
    warm_up(lambda: (x + 1) * 2)
    graph, out = capture(lambda: (x + 1) * 2)
    since = len(faults.log())
    with faults.inject(faults.corrupt_output(bits=[30], element=5),
                       op="aten::mul", nth=1):
        graph.replay()
        torch.openreg.synchronize()
    [record] = faults.log(since)
    assert record.command == "aten::mul.Tensor"
    result = out.cpu()
    expected = (torch.arange(8.0) + 1) * 2
    bits = expected[5:6].view(torch.int32) ^ (1 << 30)
    assert torch.equal(result[5:6], bits.view(torch.float32))
    mask = torch.arange(8) != 5
    assert torch.equal(result[mask], expected[mask])
    graph.replay()  # the fault fired once
    assert torch.equal(out.cpu(), expected)


def test_a_kernel_error_inside_a_replay_names_the_graph_and_its_command():
    index = torch.tensor([0, 1], device="openreg")
    source = torch.arange(4.0, device="openreg")
    warm_up(lambda: source[index])
    graph, _ = capture(lambda: source[index])
    index.fill_(99)
    with pytest.raises(IndexError, match="in the replay of graph"):
        graph.replay()
        torch.openreg.synchronize()


def graph_launches(device=0):
    """(decoded, reused): recorded launches replays decoded, and those they
    ran as an earlier replay decoded them."""
    stats = torch.openreg.daemon_stats()["devices"][device]
    return (int(stats.get("graph_launches_decoded", 0)),
            int(stats.get("graph_launches_reused", 0)))


def test_replays_run_their_launches_as_the_first_replay_decoded_them():
    x = torch.randn(1000, device="openreg")

    def chain():
        return (x * 2 + 1).relu()

    warm_up(chain)
    graph, out = capture(chain)
    decoded, reused = graph_launches()
    for _ in range(3):
        graph.replay()
    torch.openreg.synchronize()
    launches = graph_launches()[0] - decoded
    assert launches == 3  # mul, add, relu: decoded once
    assert graph_launches()[1] - reused == 2 * launches
    assert torch.equal(out.cpu(), chain().cpu())


def pointwise_launches(device=0):
    """Reused launches a replay ran as a plain loop instead of ATen."""
    stats = torch.openreg.daemon_stats()["devices"][device]
    return int(stats.get("graph_launches_pointwise", 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("flush_denormal", [False, True])
def test_small_arithmetic_replays_as_loops_with_the_bits_of_cpu_eager(
        dtype, flush_denormal):
    """Replays run add, sub, mul, div, neg, reciprocal and zero_ on small
    contiguous float tensors as plain loops (kernels/pointwise_kernel.h):
    every result, NaNs, infinities, signed zeros and denormals included,
    has CPU eager's bits, under the client's flush-denormal setting as
    well. (Of two NaN operands ATen itself returns one in its vector lanes
    and the other in its scalar tail; these values never meet two NaNs.)"""
    host_x = awkward_values(dtype)
    host_y = awkward_values(dtype).flip(0)
    host_s = torch.tensor(-1.5, dtype=dtype)

    previous = torch.set_flush_denormal(flush_denormal)
    try:
        x, y, s = (host.to("openreg") for host in (host_x, host_y, host_s))
        warm_up(arithmetic_steps, x, y, s)
        graph, outs = capture(arithmetic_steps, x, y, s)
        before = pointwise_launches()
        for _ in range(3):
            graph.replay()
        torch.openreg.synchronize()
        # Under the same setting.
        expected = arithmetic_steps(host_x, host_y, host_s)
    finally:
        torch.set_flush_denormal(previous)
    assert pointwise_launches() - before == 2 * 17  # all but the first
    for out, cpu in zip(outs, expected):
        assert same_bits(out.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_out_and_foreach_arithmetic_replays_as_loops_with_cpus_bits(dtype):
    """out= launches replay as loops too, with CPU eager's bits; so do
    foreach ops, which a capture records per tensor (one launch per list
    outside a capture: foreach_ops.h); a foreach op's `number * tensor`
    reaches the daemon as mul.out with the number first (IEEE addition and
    multiplication commute)."""
    host_x = awkward_values(dtype)
    host_y = awkward_values(dtype).flip(0)

    def steps(x, y, outs):
        torch.mul(x, 1.0001, out=outs[0])
        torch.add(x, y, out=outs[1])
        torch.mul(x, y, out=outs[2])
        torch._foreach_mul_([outs[3]], 0.999)  # mul.out(0.999, t, out=t)
        torch._foreach_add_([outs[4]], 0.5)
        return outs

    x, y = host_x.to("openreg"), host_y.to("openreg")
    device_outs = [host_x.clone().to("openreg") for _ in range(5)]
    host_outs = [host_x.clone() for _ in range(5)]
    warm_up(steps, x, y, device_outs)
    for out, host in zip(device_outs, host_outs):
        out.copy_(host)
    graph, _ = capture(steps, x, y, device_outs)
    before = pointwise_launches()
    for _ in range(3):
        graph.replay()
        steps(host_x, host_y, host_outs)
    torch.openreg.synchronize()
    assert pointwise_launches() - before == 2 * 5  # all but the first
    for out, cpu in zip(device_outs, host_outs):
        assert same_bits(out.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_number_to_a_0_dim_power_replays_as_a_loop_with_cpus_bits(dtype):
    """pow(number, 0-dim tensor), capturable Adam's bias corrections (beta
    ** step), replays as std::pow in the type, as ATen's scalar lane
    computes it: CPU eager's bits for every exponent, corners included."""
    bases = (0.9, 0.999, 2, -1.5, 1.0, 0.0, float("inf"), float("nan"))
    step = torch.tensor(1.0, dtype=dtype, device="openreg")

    def powers(exponent):
        return [torch.pow(base, exponent) for base in bases]

    warm_up(powers, step)
    graph, outs = capture(powers, step)
    exponents = awkward_values(dtype, count=300).tolist() + [
        1.0, 2.0, 3.0, 0.5, -1.0, 127.0, 1e6, 1e-40]
    before = pointwise_launches()
    for exponent in exponents:
        step.fill_(exponent)
        graph.replay()
        expected = powers(torch.tensor(exponent, dtype=dtype))
        for base, out, cpu in zip(bases, outs, expected):
            assert same_bits(out.cpu(), cpu), (base, exponent)
    # Every replay but the first, which decodes the launches.
    assert (pointwise_launches() - before ==
            len(bases) * (len(exponents) - 1))


def test_what_a_loop_cannot_match_bit_for_bit_replays_through_aten():
    """An alpha other than 1, broadcasting, a strided operand, an integer
    type, a tensor above ATen's grain size and an op whose ATen kernel
    approximates (sqrt) run through ATen on every replay, and still equal
    CPU eager."""
    host = torch.randn(64, 64)
    large = torch.randn(40000)

    def steps(x, row, ints, big):
        return (torch.add(x, x, alpha=2), x * row, x.t() * x,
                ints * 3, big * 2, x.abs().sqrt())

    args = (host.to("openreg"), host[0].to("openreg"),
            torch.arange(10).to("openreg"), large.to("openreg"))
    warm_up(steps, *args)
    graph, outs = capture(steps, *args)
    before = pointwise_launches()
    for _ in range(2):
        graph.replay()
    torch.openreg.synchronize()
    assert pointwise_launches() == before
    expected = steps(host, host[0], torch.arange(10), large)
    for out, cpu in zip(outs, expected):
        assert torch.equal(out.cpu(), cpu)


def test_a_free_makes_the_next_replay_decode_again_and_pins_nothing():
    """The decoded launches hold no memory: a free the client makes while
    the graph lives returns it, and a replay that reads freed memory
    fails naming it rather than reading what is there now."""
    size = 4 << 20  # each in its own segment: empty_cache frees it
    x = torch.randn(size, device="openreg")
    y = torch.randn(size, device="openreg")
    warm_up(torch.add, x, y)
    graph, out = capture(torch.add, x, y)
    graph.replay()
    torch.openreg.synchronize()
    unrelated = torch.empty(size, device="openreg")
    del unrelated
    torch.openreg.empty_cache()
    torch.openreg.synchronize()
    decoded, reused = graph_launches()
    graph.replay()
    torch.openreg.synchronize()
    assert graph_launches() == (decoded + 1, reused)  # decoded again
    assert torch.equal(out.cpu(), x.cpu() + y.cpu())

    def allocated():
        return int(torch.openreg.daemon_stats()["devices"][0]
                   ["allocated_bytes"])

    before = allocated()
    del y
    torch.openreg.empty_cache()
    torch.openreg.synchronize()  # a free is a command of its stream
    assert before - allocated() >= size * 4
    with pytest.raises(ValueError, match="was already freed .*in the "
                       "replay of graph"):
        graph.replay()
        torch.openreg.synchronize()


def test_make_graphed_callables_on_an_mlp_trains_as_the_eager_module():
    torch.manual_seed(1)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 1))
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                 torch.nn.Linear(16, 1)).to("openreg")
    module.load_state_dict(eager.state_dict())
    sample = torch.randn(4, 8, device="openreg", requires_grad=True)
    graphed = torch.openreg.make_graphed_callables(module, (sample,))
    for _ in range(3):
        # As with CUDA graphs, the backward graph's outputs are static
        # buffers: gradients are used before the next replay, and set to
        # None between steps (AccumulateGrad then takes them as they are).
        module.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
        x = torch.randn(4, 8)
        out = graphed(x.to("openreg").requires_grad_())
        out.sum().backward()
        expected = eager(x)
        expected.sum().backward()
        torch.testing.assert_close(out.detach().cpu(), expected.detach())
        for mine, theirs in zip(module.parameters(), eager.parameters()):
            torch.testing.assert_close(mine.grad.cpu(), theirs.grad)


def test_greedy_decoding_with_the_decode_step_captured_matches_eager():
    torch.manual_seed(2)
    vocab, width = 50, 32
    embedding = torch.nn.Embedding(vocab, width).to("openreg")
    layer = torch.nn.Linear(width, width).to("openreg")
    head = torch.nn.Linear(width, vocab).to("openreg")
    state = torch.zeros(1, width, device="openreg")
    token = torch.zeros(1, dtype=torch.long, device="openreg")

    def decode_step():
        hidden = torch.tanh(layer(embedding(token)) + state)
        state.copy_(hidden)
        token.copy_(head(hidden).argmax(-1))

    def eager_decode(steps):
        state.zero_()
        token.zero_()
        tokens = []
        for _ in range(steps):
            decode_step()
            tokens.append(token.clone())
        return torch.cat(tokens).cpu()

    with torch.no_grad():
        expected = eager_decode(16)
        warm_up(decode_step)
        graph = torch.openreg.OpenRegGraph()
        with torch.openreg.graph(graph):
            decode_step()
        state.zero_()
        token.zero_()
        tokens = []
        for _ in range(16):
            graph.replay()
            tokens.append(token.clone())
        assert torch.equal(torch.cat(tokens).cpu(), expected)


def test_reset_frees_the_daemons_graph_and_replay_then_refuses():
    x = torch.ones(4, device="openreg")
    warm_up(lambda: x * 2)
    before = daemon_graphs()
    graph, _ = capture(lambda: x * 2)
    assert daemon_graphs() == before + 1
    graph.reset()
    assert daemon_graphs() == before
    with pytest.raises(RuntimeError, match="nothing was captured"):
        graph.replay()


def test_debug_dump_writes_the_recorded_commands(tmp_path):
    x = torch.ones(4, device="openreg")
    warm_up(lambda: (x + 1).relu())
    graph, _ = capture(lambda: (x + 1).relu())
    graph.debug_dump(str(tmp_path / "graph.txt"))
    text = (tmp_path / "graph.txt").read_text()
    assert "2 recorded commands" in text
    # relu runs as clamp_min(0) on openreg, as the daemon records it.
    assert "aten::add.Tensor" in text and "aten::clamp_min" in text


def test_a_graph_is_freed_when_its_client_is_killed():
    before = daemon_graphs()
    script = textwrap.dedent("""
        import os, signal, sys, torch
        x = torch.ones(4, device="openreg")
        side = torch.openreg.Stream()
        with torch.openreg.stream(side):
            x * 2
        torch.openreg.synchronize()
        graph = torch.openreg.OpenRegGraph()
        with torch.openreg.graph(graph):
            x * 2
        print("captured", flush=True)
        sys.stdin.readline()
    """)
    child = subprocess.Popen([sys.executable, "-c", script],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=python_env())
    try:
        assert child.stdout.readline().strip() == "captured"
        assert daemon_graphs() == before + 1
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    for _ in range(100):  # the daemon notices the closed socket
        if daemon_graphs() == before:
            break
        time.sleep(0.1)
    assert daemon_graphs() == before


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                       os.pardir, "examples", "graph_replay.py")


def test_the_example_replays_training_steps_with_eagers_losses():
    done = subprocess.run(
        [sys.executable, EXAMPLE, "12"],
        env=python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                       OPENREG_AUTOSPAWN="0"),
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "graph_replay: OK" in done.stdout
    assert "replayed loss" in done.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
