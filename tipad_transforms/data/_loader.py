"""``DeviceLoader`` (timm's ``PrefetchLoader``, Lightning's ``on_after_batch_transfer``) and
``worker_context``: the device stage of a pipeline, and workers that run the kernels."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

import torch

from .._checks import check_flag, check_int
from .._compat.cpython import main_path
from ._device import Transforms, apply_transforms, check_device, check_transforms
from ._tree import iter_tensors, to_device

_PRELOAD = "tipad_transforms.backends.preload"


def worker_context(method: str = "forkserver") -> BaseContext:
    """A ``multiprocessing_context`` for DataLoader workers that run the Taichi kernels.

    ``"forkserver"``: the server imports your main module, torch, torchvision, the padding
    modules and Taichi (uninitialised: fork safe) once, and every worker forked from it skips
    those imports. This sets the process's forkserver preload list (``"__main__"`` and this
    package's preload module, which imports the main module itself: CPython before the gh-126631
    fix never gives the server its path) and ``TIPAD_FORKSERVER_MAIN``, so call it before the
    first forkserver worker starts. ``"spawn"``: the plain spawn context. Pair either with
    ``persistent_workers=True``. ValueError for another method (``fork`` workers of a process
    that ran a kernel cannot run it); docs/data-loading.md has the details.
    """
    if method == "forkserver":
        from ..backends.taichi import FORKSERVER_MAIN_ENV

        path = main_path()
        if path:
            os.environ[FORKSERVER_MAIN_ENV] = path
        multiprocessing.set_forkserver_preload(["__main__", _PRELOAD])
    elif method != "spawn":
        raise ValueError(f"method must be 'forkserver' or 'spawn', got {method!r}")
    return multiprocessing.get_context(method)


_END = object()


def _record(tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """Tell the caching allocator that ``stream`` uses ``tensor`` (one place, for tests)."""
    tensor.record_stream(stream)


class DeviceLoader:
    """Wrap a DataLoader: yield its batches on ``device``, with ``transforms`` applied there.

    Every tensor of a batch is moved to ``device`` (through tuples, lists and dicts; tv_tensors
    keep their metadata), then the transforms run in order. A v2 transform gets the whole batch
    with the image batch (the batch itself, else the first ``tv_tensors.Image``, a dict's
    ``"image"``, the first plain tensor) as a ``tv_tensors.Image``, so boxes, keypoints, masks
    and ``Regions`` follow as torchvision moves them and labels pass through; any other callable
    gets the image batch alone. A v2 transform draws once per batch; ``PerSample(t)`` per sample.

    On CUDA with ``prefetch=True``, batch ``k + 1`` is copied on a side stream (asynchronous
    with ``pin_memory=True``) before batch ``k`` is handed out; the consumer's current stream
    waits for the copy and records every yielded tensor, and the transforms run on it. On the
    CPU (or ``prefetch=False``) batches are moved and transformed one at a time.

    Args:
        loader: any iterable of batches, usually a ``torch.utils.data.DataLoader``.
        device: where the batches go (``"cuda"``, ``"cuda:0"``, ``"cpu"``, a torch.device).
        transforms: None, a callable or a sequence of callables.
        prefetch: copy the next batch while the current one is used (CUDA only).

    ``len()``, ``dataset``, ``sampler`` and ``batch_size`` are the loader's; every ``iter()`` is
    a new epoch; ``set_epoch(e)`` reaches the sampler (a ``DistributedSampler``); leaving the
    loop early (``break``, an exception) drops the loader's iterator at once, which stops its
    (non-persistent) workers.

    Raises:
        TypeError / ValueError: naming the argument. While iterating: what the transforms
            raise, and ``ValueError`` naming the regions for a transform they cannot follow.
        RuntimeError: a CUDA device on a machine without CUDA.

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader
        >>> from tipad_transforms import BrickPad
        >>> from tipad_transforms.data import DeviceLoader, PadCollate
        >>> data = [torch.zeros(3, 20 + i, 24, dtype=torch.uint8) for i in range(4)]
        >>> loader = DataLoader(data, batch_size=2, collate_fn=PadCollate(return_regions=True))
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> batches = DeviceLoader(loader, device, BrickPad(4, random_offset=True))
        >>> [tuple(images.shape) for images, regions in batches]
        [(2, 3, 29, 32), (2, 3, 31, 32)]
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: torch.device | str,
        transforms: Transforms = None,
        prefetch: bool = True,
    ) -> None:
        if not isinstance(loader, Iterable):
            raise TypeError(f"loader must be iterable (a DataLoader), got {type(loader).__name__}")
        self.loader = loader
        self.device = check_device(device, available=True)
        self.transforms = check_transforms(transforms)
        self.prefetch = check_flag(prefetch, "prefetch")

    def __len__(self) -> int:
        if not hasattr(self.loader, "__len__"):
            raise TypeError(
                f"len() of a DeviceLoader is its loader's, and a {type(self.loader).__name__} "
                "has no length (a DataLoader, a list, any Sized loader has one)"
            )
        return len(self.loader)  # type: ignore[arg-type]

    @property
    def dataset(self) -> Any:
        return getattr(self.loader, "dataset", None)

    @property
    def sampler(self) -> Any:
        return getattr(self.loader, "sampler", None)

    @property
    def batch_size(self) -> Any:
        return getattr(self.loader, "batch_size", None)

    def set_epoch(self, epoch: int) -> None:
        """Pass ``epoch`` to the loader's ``set_epoch``, or else to its sampler and batch sampler
        (no-op where none has one); TypeError / ValueError for a non-int or negative epoch."""
        check_int(epoch, "epoch", minimum=0)
        own = getattr(self.loader, "set_epoch", None)
        if callable(own):
            own(epoch)
            return
        batch_sampler = getattr(self.loader, "batch_sampler", None)
        targets = (self.sampler, batch_sampler, getattr(batch_sampler, "sampler", None))
        for target in {id(t): t for t in targets}.values():  # each sampler once
            set_epoch = getattr(target, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        if self.prefetch and self.device.type == "cuda":
            return self._prefetched()
        return self._plain()

    def _plain(self) -> Iterator[Any]:
        batches = iter(self.loader)
        try:
            for batch in batches:  # (the device batch is not kept while the caller runs)
                yield apply_transforms(
                    to_device(batch, self.device, non_blocking=True), self.transforms
                )
        finally:
            # Drop the iterator now (not when this generator is collected): a DataLoader's
            # iterator shuts its worker processes down when it goes away.
            del batches

    def _prefetched(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(device=self.device)
        batches = iter(self.loader)
        try:
            pending = self._copy(next(batches, _END), stream)
            while pending is not _END:
                current = torch.cuda.current_stream(self.device)
                # The consumer's stream waits for the copy; the memory, allocated on the side
                # stream, must not be reused before the consumer's work on it is done.
                current.wait_stream(stream)
                for t in iter_tensors(pending):
                    _record(t, current)
                batch, pending = pending, None
                pending = self._copy(next(batches, _END), stream)
                yield apply_transforms(batch, self.transforms)
        finally:
            del batches

    def _copy(self, batch: Any, stream: torch.cuda.Stream) -> Any:
        if batch is _END:
            return _END
        with torch.cuda.stream(stream):
            return to_device(batch, self.device, non_blocking=True)

    def __repr__(self) -> str:
        t = f", transforms={list(self.transforms)!r}" if self.transforms else ""
        return (
            f"DeviceLoader({type(self.loader).__name__}, device={str(self.device)!r}{t}, "
            f"prefetch={self.prefetch})"
        )
