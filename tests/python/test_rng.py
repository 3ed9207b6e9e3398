"""Random numbers on openreg: per-device default generators that live in
the client as (seed, offset), so results are reproducible per seed whatever
the daemon's state (also across a daemon restart)."""

import inspect
import sys

import pytest
import torch
import torch.nn.functional as F

from daemon_fixture import Daemon, module_daemon, run_python

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def draws(device="openreg:0"):
    """One call of every kind of random op, in a fixed order, as CPU
    tensors. Self-contained: child processes run its source verbatim."""
    import torch
    import torch.nn.functional as F
    ones = torch.ones(64, device=device)
    results = {
        "rand": torch.rand(64, device=device),
        "randn": torch.randn(64, device=device),
        "randint": torch.randint(0, 1000, (64,), device=device),
        "normal_": torch.empty(64, device=device).normal_(2.0, 3.0),
        "uniform_": torch.empty(64, device=device).uniform_(-1.0, 1.0),
        "bernoulli": torch.bernoulli(torch.full((64,), 0.5, device=device)),
        "multinomial": torch.multinomial(ones, 16),
        "randperm": torch.randperm(64, device=device),
        "dropout": F.dropout(ones, 0.5, training=True),
    }
    return {name: tensor.cpu() for name, tensor in results.items()}


def assert_same_draws(first, second):
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_same_seed_same_results_for_every_random_op():
    torch.manual_seed(1234)
    first = draws()
    torch.manual_seed(1234)
    second = draws()
    assert_same_draws(first, second)


def test_different_seeds_differ():
    torch.manual_seed(1)
    first = draws()
    torch.manual_seed(2)
    second = draws()
    for name in first:
        assert not torch.equal(first[name], second[name]), name


def test_successive_calls_differ():
    torch.manual_seed(7)
    first = draws()
    second = draws()
    for name in first:
        assert not torch.equal(first[name], second[name]), name


def test_same_seed_reproduces_across_daemon_restart(tmp_path):
    """Two fresh daemons (and this module's busy one) give the same numbers:
    nothing of the daemon's own generator state leaks into the results."""
    torch.manual_seed(99)
    expected = draws()
    for run in range(2):
        output = tmp_path / f"run{run}.pt"
        code = inspect.getsource(draws) + f'''
import torch
torch.manual_seed(99)
torch.save(draws(), {str(output)!r})
'''
        with Daemon(devices=2) as daemon:
            child = run_python(code, daemon.env())
            assert child.returncode == 0, child.stderr
        assert_same_draws(expected, torch.load(output))


def test_rng_state_round_trip():
    torch.openreg.manual_seed(5)
    torch.rand(10, device="openreg")
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.numel() == 16  # seed and offset, as CUDA's Philox state
    first = draws()
    torch.openreg.set_rng_state(state)
    assert_same_draws(first, draws())
    # The state is a snapshot, not a view of the generator.
    assert not torch.equal(state, torch.openreg.get_rng_state())


def test_rng_state_all_round_trip_and_fork_rng():
    states = torch.openreg.get_rng_state_all()
    assert len(states) == torch.openreg.device_count() == 2
    first = [draws("openreg:0"), draws("openreg:1")]
    torch.openreg.set_rng_state_all(states)
    assert_same_draws(first[0], draws("openreg:0"))
    assert_same_draws(first[1], draws("openreg:1"))

    before = torch.openreg.get_rng_state(0)
    with torch.random.fork_rng(devices=[0], device_type="openreg"):
        inside = torch.rand(8, device="openreg").cpu()
    assert torch.equal(torch.openreg.get_rng_state(0), before)
    assert torch.equal(torch.rand(8, device="openreg").cpu(), inside)


def test_initial_seed_and_seed():
    torch.openreg.manual_seed(123)
    assert torch.openreg.initial_seed() == 123
    torch.manual_seed(456)  # seeds every device through the device module
    assert torch.openreg.initial_seed() == 456
    with torch.openreg.device(1):
        assert torch.openreg.initial_seed() == 456
    torch.openreg.seed()
    assert torch.openreg.initial_seed() != 456
    torch.openreg.seed_all()
    assert (torch.openreg.default_generators[0].initial_seed() ==
            torch.openreg.default_generators[1].initial_seed())


def test_explicit_generator():
    generator = torch.Generator(device="openreg")
    assert generator.device == torch.device("openreg", 0)
    generator.manual_seed(42)
    first = torch.randn(32, device="openreg", generator=generator).cpu()
    generator.manual_seed(42)
    default_before = torch.openreg.get_rng_state()
    second = torch.randn(32, device="openreg", generator=generator).cpu()
    assert torch.equal(first, second)
    # An explicit generator leaves the default one untouched.
    assert torch.equal(torch.openreg.get_rng_state(), default_before)
    # ... and is independent of it: same seed, same stream.
    torch.openreg.manual_seed(42)
    assert torch.equal(torch.randn(32, device="openreg").cpu(), first)

    other = torch.Generator(device="openreg").manual_seed(42)
    permuted = torch.randperm(50, device="openreg", generator=other).cpu()
    assert sorted(permuted.tolist()) == list(range(50))

    state = generator.get_state()
    after_state = torch.rand(5, device="openreg", generator=generator).cpu()
    generator.set_state(state)
    replayed = torch.rand(5, device="openreg", generator=generator).cpu()
    assert torch.equal(replayed, after_state)


def test_cpu_generator_is_rejected_as_on_cuda():
    with pytest.raises(RuntimeError, match="device type for generator"):
        torch.rand(4, device="openreg", generator=torch.Generator())


def test_devices_have_independent_generators():
    torch.manual_seed(11)
    on_device0 = torch.rand(16, device="openreg:0").cpu()
    torch.manual_seed(11)
    state0 = torch.openreg.get_rng_state(0)
    for _ in range(3):
        torch.rand(16, device="openreg:1")  # advances device 1 only
    assert torch.equal(torch.openreg.get_rng_state(0), state0)
    assert torch.equal(torch.rand(16, device="openreg:0").cpu(), on_device0)

    with torch.openreg.device(1):
        torch.openreg.manual_seed(77)  # the current device only
    assert torch.openreg.default_generators[1].initial_seed() == 77
    assert torch.openreg.default_generators[0].initial_seed() == 11


def test_distributions_are_sane():
    torch.manual_seed(2024)
    normal = torch.randn(200_000, device="openreg").cpu()
    assert abs(normal.mean().item()) < 0.01
    assert abs(normal.std().item() - 1.0) < 0.01

    uniform = torch.rand(200_000, device="openreg").cpu()
    assert uniform.min().item() >= 0.0 and uniform.max().item() < 1.0
    assert abs(uniform.mean().item() - 0.5) < 0.01

    shifted = torch.empty(200_000, device="openreg").normal_(3.0, 0.5).cpu()
    assert abs(shifted.mean().item() - 3.0) < 0.01
    assert abs(shifted.std().item() - 0.5) < 0.01

    coins = torch.bernoulli(torch.full((200_000,), 0.3, device="openreg"))
    assert abs(coins.cpu().mean().item() - 0.3) < 0.01

    integers = torch.randint(3, 9, (100_000,), device="openreg").cpu()
    assert set(integers.unique().tolist()) == set(range(3, 9))

    kept = F.dropout(torch.ones(200_000, device="openreg"), 0.25,
                     training=True).cpu()
    scale = torch.tensor(1.0 / 0.75).item()  # 1 / (1 - p) in float32
    assert set(kept.unique().tolist()) <= {0.0, scale}
    assert abs((kept == 0).float().mean().item() - 0.25) < 0.01

    weights = torch.tensor([0.0, 1.0, 3.0], device="openreg")
    picks = torch.multinomial(weights, 40_000, replacement=True).cpu()
    assert (picks != 0).all()
    assert abs((picks == 2).float().mean().item() - 0.75) < 0.02


def test_seeding_needs_no_daemon():
    """torch.manual_seed seeds openreg without connecting (so scripts that
    seed first and never touch the device work without a daemon)."""
    code = '''
import torch
torch.manual_seed(31)
assert not torch.openreg.is_initialized()
assert torch.openreg.default_generators[0].initial_seed() == 31
assert torch.openreg.default_generators[5].initial_seed() == 31
print("ok")
'''
    env = DAEMON.env(OPENREG_DAEMON_SOCKET="/tmp/openreg-no-such-daemon.sock")
    child = run_python(code, env)
    assert child.returncode == 0, child.stderr
    assert "ok" in child.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
