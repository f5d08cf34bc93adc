"""Random draws inside DataLoader workers: different per worker and epoch, replayable by seed.

A ``torch.Generator`` held by a transform or collate function is copied into every worker
process with it, so each worker would replay the same stream and all workers would draw the
same "random" offsets. In a worker, draws therefore come from a generator derived from the
user's one (its state at the time the worker got its copy) and the worker's seed, which the
DataLoader draws per worker and per epoch from its own generator (or torch's global RNG): the
draws differ between workers and epochs, and a run with the same seeds repeats them exactly.
Outside a worker the user's generator is used as it is.
"""

from __future__ import annotations

import torch
from torch.utils.data import get_worker_info

__all__ = ["worker_generator"]

# Derived generators by (id of the user's generator, worker seed). Each entry holds the user's
# generator, so its id cannot be reused by another object while the entry exists.
_derived: dict[tuple[int, int], tuple[torch.Generator, torch.Generator]] = {}
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio): spreads consecutive seeds


def worker_generator(generator: torch.Generator | None) -> torch.Generator | None:
    """The generator to draw from in this process: ``generator`` itself outside a worker.

    ``None`` stays ``None`` (torch's global RNG, which the DataLoader already seeds per worker).
    """
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
