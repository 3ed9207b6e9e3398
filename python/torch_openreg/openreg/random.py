"""Random number generation for openreg devices, shaped like torch.cuda's.

Each device has a default generator that lives in this process as
(seed, offset); every random op carries one draw of it to the daemon, so
results are reproducible per seed whatever the daemon's state. Seeding
never contacts the daemon.
"""

import torch

from torch_openreg import _C

__all__ = [
    "default_generators",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


class _DefaultGenerators:
    """Sequence of the per-device default torch.Generator objects, like
    torch.cuda.default_generators, created on first access."""

    def __init__(self):
        self._generators = {}

    def __len__(self):
        from torch_openreg import openreg

        return openreg.device_count()

    def __getitem__(self, index):
        if not 0 <= index < _C._max_devices:
            raise IndexError(f"openreg device index {index} out of range")
        generator = self._generators.get(index)
        if generator is None:
            generator = _C._get_default_generator(index)
            self._generators[index] = generator
        return generator

    def __iter__(self):
        return (self[index] for index in range(len(self)))


default_generators = _DefaultGenerators()


def _device_index(device):
    from torch_openreg import openreg

    return openreg._index(device)


def _all_seedable_indices():
    # Every index a device can have: seeding all of them needs no daemon,
    # and a device that appears later is seeded too.
    return range(_C._max_devices)


def get_rng_state(device="openreg"):
    """The default generator's state of `device` as a uint8 CPU tensor
    (16 bytes: seed, offset)."""
    return default_generators[_device_index(device)].get_state()


def get_rng_state_all():
    return [generator.get_state() for generator in default_generators]


def set_rng_state(new_state, device="openreg"):
    default_generators[_device_index(device)].set_state(new_state)


def set_rng_state_all(new_states):
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed):
    """Seeds the current device's default generator."""
    default_generators[_device_index(None)].manual_seed(int(seed))


def manual_seed_all(seed):
    """Seeds every device's default generator (torch.manual_seed calls
    this)."""
    seed = int(seed)
    for index in _all_seedable_indices():
        default_generators[index].manual_seed(seed)


def seed():
    """Seeds the current device's default generator nondeterministically."""
    default_generators[_device_index(None)].seed()


def seed_all():
    """Seeds every device with one nondeterministic seed."""
    manual_seed_all(torch.Generator().seed())


def initial_seed():
    """The current device's seed (as set by the last manual_seed)."""
    return default_generators[_device_index(None)].initial_seed()
