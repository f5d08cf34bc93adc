"""Random draws: parameters as data, drawn per batch (Kornia's parameter generators), different
per DataLoader worker and epoch (``worker_generator``), and generators that pickle into spawned
workers (``GeneratorsPickleAsBytes``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import get_worker_info

__all__ = ["GeneratorState", "GeneratorsPickleAsBytes", "uniform", "worker_generator"]


@dataclass(frozen=True)
class GeneratorState:
    """A ``torch.Generator`` as plain data (its device and its state's bytes), for pickling.

    A DataLoader pickles its ``collate_fn`` (and a Dataset its transforms) into each
    ``spawn``/``forkserver`` worker. torch pickles a generator's state as a *tensor*, sent through
    shared memory, which a spawned process fails to map ("unable to resize file"): the worker
    dies before its first batch. As bytes, the worker's copy starts in the parent's state, so its
    draws are those a ``fork`` worker would make.
    """

    device: str
    state: bytes

    @classmethod
    def of(cls, generator: torch.Generator) -> GeneratorState:
        # get_state() is a CPU uint8 tensor whatever the generator's device.
        return cls(str(generator.device), generator.get_state().numpy().tobytes())

    def restore(self) -> torch.Generator:
        generator = torch.Generator(self.device)
        generator.set_state(torch.frombuffer(bytearray(self.state), dtype=torch.uint8))
        return generator


class GeneratorsPickleAsBytes:
    """Pickles the ``torch.Generator`` attributes of an object as ``GeneratorState``: what
    every holder of a user's generator (a collate function, a transform) needs to reach a
    spawned worker. Works beside ``nn.Module``'s own pickling (it calls the next class's)."""

    def __getstate__(self) -> dict[str, Any]:
        parent = getattr(super(), "__getstate__", None)
        state = dict(parent() if parent is not None else self.__dict__)
        return {
            k: GeneratorState.of(v) if isinstance(v, torch.Generator) else v
            for k, v in state.items()
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {k: v.restore() if isinstance(v, GeneratorState) else v for k, v in state.items()}
        parent = getattr(super(), "__setstate__", None)
        if parent is not None:
            parent(state)
        else:
            self.__dict__.update(state)


# Derived generators by (id of the user's generator, worker seed). Each entry holds the user's
# generator, so its id cannot be reused by another object while the entry exists.
_derived: dict[tuple[int, int], tuple[torch.Generator, torch.Generator]] = {}
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio): spreads consecutive seeds


def worker_generator(generator: torch.Generator | None) -> torch.Generator | None:
    """The generator to draw from in this process: ``generator`` itself outside a DataLoader
    worker; in one, a generator derived from it and the worker's seed, which the DataLoader
    draws per worker and epoch (each worker holds a copy of the user's generator and would
    replay its stream). ``None`` stays ``None``: torch's global RNG, seeded per worker."""
    if generator is None:
        return None
    info = get_worker_info()
    if info is None:
        return generator
    key = (id(generator), int(info.seed))
    hit = _derived.get(key)
    if hit is not None and hit[0] is generator:
        return hit[1]
    # The copy's state is the same in every worker: one draw from it, mixed with the worker's
    # seed, gives each worker its own stream that still depends on the user's seed.
    base = int(torch.randint(0, 2**62, (), generator=generator, device=generator.device))
    derived = torch.Generator(generator.device)
    derived.manual_seed((base ^ (int(info.seed) * _MIX)) % 2**63)
    if len(_derived) >= 64:
        _derived.clear()
    _derived[key] = (generator, derived)
    return derived


def uniform(generator: torch.Generator | None, high: torch.Tensor) -> torch.Tensor:
    """One uniform draw in ``[0, high)`` per element of ``high`` (an int64 tensor of values
    >= 1), as an int64 tensor of ``high``'s shape on the generator's device (the CPU for None),
    drawn from ``worker_generator(generator)``: the one sampler of every random parameter.

    62-bit draws reduced modulo ``high``, so one call draws for a whole batch whatever its
    bounds: the bias is below ``high / 2**62`` (under ``2**-31`` for any canvas or tile).
    """
    generator = worker_generator(generator)
    device = generator.device if generator is not None else torch.device("cpu")
    draws = torch.randint(0, 2**62, high.shape, generator=generator, device=device)
    return draws % high.to(device)
