"""One GPU per process, and a random stream per rank.

Taichi's CUDA backend runs on device 0 of the visible devices only, so torchrun's usual
``torch.cuda.set_device(local_rank)`` leaves every rank but one on the torch route. As Taichi's
docs advise, ``bind_device`` makes each process see exactly its own GPU, as ``cuda:0`` for
torch, NCCL and Taichi alike, by narrowing ``CUDA_VISIBLE_DEVICES`` before CUDA starts.
"""

from __future__ import annotations

import hashlib
import os
from itertools import takewhile

import torch

from ._compat import torch as ctorch

__all__ = ["bind_device", "local_rank", "rank_generator", "visible_devices"]

VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_devices(value: str | None) -> list[str] | None:
    """The entries (indices or ``GPU-``/``MIG-`` UUIDs) of a ``CUDA_VISIBLE_DEVICES`` value;
    None when unset. As in CUDA, the list ends at the first entry that is neither (``-1``, a
    typo, SLURM's ``NoDevFiles``); an empty value hides every device (``[]``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"value must be a str or None, got {type(value).__name__}")
    entries = (raw.strip() for raw in value.split(","))
    return list(takewhile(lambda e: e.isdigit() or e.startswith(("GPU-", "MIG-")), entries))


def local_rank(index: int | None = None) -> int:
    """``index`` if given, else the ``LOCAL_RANK`` a launcher set (torchrun, Ray Train, SLURM
    wrappers), else 0 (a process without a launcher is the node's only one). ValueError /
    TypeError naming the argument (or ``LOCAL_RANK``) when it is not an int >= 0."""
    return _rank(index, "index", "LOCAL_RANK")


def _rank(value: int | None, name: str, env: str) -> int:
    """``value`` checked as a rank named ``name``; None: the environment variable ``env`` (0
    where unset)."""
    if value is None:
        raw = os.environ.get(env, "0")
        if not raw.strip().isdigit():
            raise ValueError(f"{env} must be an integer >= 0, got {raw!r}")
        return int(raw)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value}")
    return value


def _too_late(visible: str | None, count: int, want: str) -> RuntimeError:
    return RuntimeError(
        f"CUDA already started in this process with {count} devices visible "
        f"({VISIBLE}={visible!r}), so it can no longer be narrowed to this rank's GPU ({want}). "
        "Call tipad_transforms.distributed.bind_device() first thing in the process, before any "
        "torch.cuda call (is_available, device_count, set_device, .cuda()) or any library that "
        f"makes one; or start each process with {VISIBLE} set to its one GPU. Under Ray Train, "
        "set TRAIN_ENABLE_SHARE_CUDA_VISIBLE_DEVICES=0 so that each worker sees its own GPU only"
    )


# The last bind_device's (rank, CUDA_VISIBLE_DEVICES as it left it, device): a repeat's answer.
_bound: tuple[int, str | None, torch.device] | None = None


def bind_device(index: int | None = None) -> torch.device:
    """Make this process see one GPU, its rank's, as ``cuda:0``; return the device to use.

    Call it first thing in every process (before anything asks torch about CUDA), then use the
    returned device everywhere (model, ``DeviceLoader``, ``GPUCollate``, NCCL) and never
    ``torch.cuda.set_device``. The rank's GPU is entry ``index`` (default: ``LOCAL_RANK``, else
    0) of the visible devices: of ``CUDA_VISIBLE_DEVICES`` if a scheduler narrowed it (indices or
    UUIDs, kept as written), else of the machine's GPUs; ``os.environ[CUDA_VISIBLE_DEVICES]``
    (inherited by child processes) is set to that one entry. A process whose
    ``CUDA_VISIBLE_DEVICES`` names one device is bound already (a Ray actor with
    ``num_gpus=1``, SLURM's ``--gpus-per-task=1``) and kept unless ``index`` is given. A repeat
    for the same rank, with ``CUDA_VISIBLE_DEVICES`` as the first call left it, is a no-op.
    Works under ``torchrun``, ``torch.multiprocessing.spawn`` (pass the process index),
    SLURM-style launchers that export ``LOCAL_RANK``, Ray Train, and without a GPU.

    Returns:
        ``torch.device("cuda", 0)`` when CUDA sees the bound GPU, else ``torch.device("cpu")``
        (no GPU, no driver, or a CPU build of torch).

    Raises:
        TypeError / ValueError: ``index`` (or ``LOCAL_RANK``) negative, not an int, or beyond
            the visible devices (the message names them).
        RuntimeError: CUDA already started in this process with other devices visible: torch
            initialised CUDA, or a device query started the CUDA runtime (which reads
            ``CUDA_VISIBLE_DEVICES`` once): ``torch.cuda.is_available()`` does, unless
            ``PYTORCH_NVML_BASED_CUDA_CHECK=1``. The message says what to do instead.
    """
    global _bound
    explicit = index is not None
    rank = local_rank(index)
    before = os.environ.get(VISIBLE)
    if _bound is not None and _bound[:2] == (rank, before):
        return _bound[2]  # a repeat: this process is bound to this rank's GPU already
    device = _bind(rank, explicit, before)
    _bound = (rank, os.environ.get(VISIBLE), device)
    return device


def _bind(rank: int, explicit: bool, before: str | None) -> torch.device:
    visible = visible_devices(before)
    if visible is not None and len(visible) == 1 and not explicit:
        want = visible[0]
    elif visible is not None:
        if rank >= len(visible):
            raise ValueError(
                f"local rank {rank} has no GPU: {VISIBLE}={before!r} names {len(visible)} "
                f"device(s) {visible}; run at most {len(visible)} processes per node (or widen "
                f"{VISIBLE})"
            )
        want = visible[rank]
    else:
        physical = ctorch.nvml_device_count()  # never starts CUDA; -1 without NVML
        if physical > 0 and rank >= physical:
            raise ValueError(
                f"local rank {rank} has no GPU: this machine has {physical}; run at most "
                f"{physical} processes per node"
            )
        want = str(rank)
    if torch.cuda.is_initialized():
        # Too late to narrow: acceptable only if CUDA sees one device, this rank's.
        count = torch.cuda.device_count()
        if count > 1 or (count == 1 and before != want):
            raise _too_late(before, count, want)
        return torch.device("cuda", 0) if count == 1 else torch.device("cpu")
    os.environ[VISIBLE] = want
    # Starts the CUDA runtime, which reads CUDA_VISIBLE_DEVICES once: a runtime started before
    # this call still counts every device.
    count = ctorch.cuda_device_count()
    if count > 1:  # leave the environment as it was
        if before is None:
            del os.environ[VISIBLE]
        else:
            os.environ[VISIBLE] = before
        raise _too_late(before, count, want)
    return torch.device("cuda", 0) if count == 1 else torch.device("cpu")


def rank_generator(seed: int, rank: int | None = None) -> torch.Generator:
    """A CPU ``torch.Generator`` of its own for ``rank`` (default: this process's rank).

    The seed is a hash of ``(seed, rank)``, so ranks draw different augmentation parameters and
    a run with the same ``seed`` draws them again. Give one to ``PadCollate(generator=...)``,
    ``BrickPad(generator=...)`` and ``DataLoader(generator=...)`` (each its own: pass
    ``rank_generator(seed + k)`` for the ``k``-th). ``rank`` defaults to
    ``torch.distributed.get_rank()`` when a process group is up, else ``RANK``, else 0.

    The generator pickles as any ``torch.Generator``; ``PadCollate`` sends it to ``spawn`` and
    ``forkserver`` DataLoader workers as its state's bytes.

    Raises:
        TypeError: ``seed`` not an int, ``rank`` not an int or None.
        ValueError: ``rank`` (or ``RANK``) negative or not a number.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if rank is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        rank = torch.distributed.get_rank()
    rank = _rank(rank, "rank", "RANK")
    digest = hashlib.blake2b(f"{seed}/{rank}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
