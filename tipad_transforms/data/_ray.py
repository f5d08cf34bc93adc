"""``RayPadBatch``: ``PadCollate`` as a batch callable for ``ray.data.Dataset.map_batches``.
Importing this module does not import Ray."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .._checks import check_flag, is_int
from ..distributed import visible_devices
from ._collate import GPUCollate, PadCollate
from ._device import check_device
from ._sampler import keyed_draw

_SAMPLE = re.compile(r"samples\[(\d+)\]")
# PadCollate's arguments that a Ray batch has no use for, and why.
_NOT_FOR_RAY = {
    "generator": "the draws come from seed and each row's key",
    "mask_fill": "a Ray batch holds images only",
    "return_regions": "the regions are always returned, as region_column",
}
_COLLATE_ARGS = [p for p in inspect.signature(PadCollate).parameters if p not in _NOT_FOR_RAY]


class RayPadBatch:
    """Pad a Ray Data batch of variable-size images onto one canvas: ``PadCollate`` for Ray.

    Use as a callable class, ``ds.map_batches(RayPadBatch, fn_constructor_kwargs={"size": 256},
    ...)`` (docs/distributed.md has the recipe). Each call pads a dict of numpy columns:

    >>> import numpy as np
    >>> pad = RayPadBatch(size=16, placement="center", random_offset=False)
    >>> batch = {"image": [np.zeros((10, 12, 3), np.uint8), np.zeros((16, 8, 3), np.uint8)],
    ...          "path": np.array(["a.png", "b.png"])}
    >>> out = pad(batch)
    >>> out["image"].shape, out["region"].tolist()
    ((2, 3, 16, 16), [[3, 2, 10, 12], [0, 4, 16, 8]])

    It pads with the ``PadCollate`` it holds (``collate``), in one launch: the pixels equal
    ``PadCollate``'s for the same samples and parameters (``make_params``), bit for bit.

    Args:
        size: as in ``PadCollate``.
        seed: a row's random placement and lattice offset come from a hash of ``seed`` and its
            key, never the actor's state: a restarted actor or another batching of the rows
            gives the same pixels (with ``size=None`` the canvas is the batch's).
        image_column: the column of ``(h, w, C)`` (``channels_last=True``, what
            ``read_images`` gives), ``(C, h, w)`` or ``(h, w)`` arrays, one dtype and channel
            count per batch.
        key_column: the column that identifies a row (``read_images(..., include_paths=True)``
            gives ``"path"``); needed for random draws, and names the row in errors.
        region_column: the column added for the regions.
        device: ``"cpu"``, or ``"cuda"`` in a GPU actor (``num_gpus=1``: its GPU is ``cuda:0``).
        channels_last: layout of the input images (see ``image_column``).
        **collate: ``PadCollate``'s other arguments; not ``generator``, ``mask_fill`` or
            ``return_regions`` (TypeError).

    Returns (per call): the batch's columns, ``image_column`` replaced by the padded images
    ``(B, C, H, W)`` (numpy, the input dtype) and ``region_column`` ``(B, 4)`` int64 ``(top,
    left, h, w)``.

    Raises:
        TypeError / ValueError at construction, naming the argument; RuntimeError for
        ``device="cuda"`` in a process that sees no GPU or several. At call time, ValueError /
        TypeError naming the row's key (an image unlike the batch's first, larger than
        ``size``, empty, or not an array) or the column (an empty batch, no list or array).
    """

    def __init__(
        self,
        size: int | tuple[int, int] | None = None,
        *,
        seed: int = 0,
        image_column: str = "image",
        key_column: str | None = "path",
        region_column: str = "region",
        device: torch.device | str = "cpu",
        channels_last: bool = True,
        **collate: Any,
    ) -> None:
        if not is_int(seed):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        for name, value in (("image_column", image_column), ("region_column", region_column)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if key_column is not None and not isinstance(key_column, str):
            raise TypeError(f"key_column must be a str or None, got {type(key_column).__name__}")
        if region_column == image_column:
            raise ValueError(
                f"region_column and image_column must differ (the regions would replace the "
                f"images), got {region_column!r} for both"
            )
        if key_column in (image_column, region_column):
            raise ValueError(
                f"key_column must name a column of its own (the rows' paths or ids), got "
                f"{key_column!r}, which is the image or region column"
            )
        for name in collate:
            if name not in _COLLATE_ARGS:
                why = _NOT_FOR_RAY.get(name, "it is no argument of RayPadBatch or PadCollate")
                raise TypeError(
                    f"RayPadBatch() got an unexpected keyword argument {name!r} ({why}); it "
                    f"takes seed, the columns, device, channels_last and PadCollate's "
                    f"{', '.join(_COLLATE_ARGS)}"
                )
        self.device = self._check_cuda(check_device(device))
        self.collate = GPUCollate(device=self.device, size=size, return_regions=True, **collate)
        self.seed = int(seed)
        self.image_column = image_column
        self.key_column = key_column
        self.region_column = region_column
        self.channels_last = check_flag(channels_last, "channels_last")
        if key_column is None and self.collate.sampler.random:
            raise ValueError(
                "key_column=None leaves nothing to draw random placements or offsets from: give "
                "the column that identifies a row (read_images(..., include_paths=True) gives "
                "'path'), or placement='center' with random_offset=False"
            )

    @staticmethod
    def _check_cuda(device: torch.device) -> torch.device:
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda' (the actor's GPU), got {device}")
        if device.type != "cuda":
            return device
        if (device.index or 0) != 0:
            raise ValueError(
                f"device must be 'cuda' (the actor's one GPU, cuda:0), got {device}: ask Ray for "
                "num_gpus=1 per actor instead of picking a GPU"
            )
        visible = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count != 1:
            raise RuntimeError(
                f"device='cuda' needs exactly one visible GPU in this process, found {count} "
                f"(CUDA_VISIBLE_DEVICES={visible}): pass num_gpus=1 to map_batches so that Ray "
                "gives each actor its own GPU, or call tipad_transforms.distributed.bind_device()"
            )
        return torch.device("cuda", 0)

    def make_params(self, keys: Sequence[str], sizes: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """The parameters for rows ``keys`` with images of ``sizes``, in ``PadCollate``'s
        ``make_params`` format (``PadCollate(...)(samples, params=...)`` replays them)."""
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
            raise TypeError(f"keys must be a sequence of row keys, got {type(keys).__name__}")
        if len(keys) == 0 or len(keys) != len(sizes):
            raise ValueError(f"need one key per size, got {len(keys)} keys and {len(sizes)} sizes")
        return self.collate.sampler.sample(sizes, keyed_draw(self.seed, keys))

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Pad one batch (a dict of columns, ``batch_format="numpy"``); see the class."""
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"the batch must be a dict of columns (map_batches(..., batch_format='numpy')), "
                f"got {type(batch).__name__}"
            )
        if self.image_column not in batch:
            raise ValueError(
                f"the batch has no column {self.image_column!r} (columns: {sorted(batch)}): "
                "set image_column"
            )
        column = batch[self.image_column]
        if isinstance(column, (str, bytes)) or not isinstance(column, (Sequence, np.ndarray)):
            raise TypeError(
                f"column {self.image_column!r} must hold one image per row (a list or an "
                f"array), got {type(column).__name__}"
            )
        n = len(column)
        if n == 0:
            raise ValueError(f"got an empty batch: column {self.image_column!r} has no rows")
        keys = self._keys(batch, n)
        images = [self._image(column[i], keys[i]) for i in range(n)]
        sizes = [(int(im.shape[-2]), int(im.shape[-1])) for im in images]
        try:
            params = self.make_params(keys, sizes)
            padded, regions = self.collate(images, params=params)
        except (ValueError, TypeError) as exc:
            raise type(exc)(_SAMPLE.sub(lambda m: f"image {keys[int(m[1])]!r}", str(exc))) from exc
        out = {k: v for k, v in batch.items() if k not in (self.image_column, self.region_column)}
        out[self.image_column] = padded.as_subclass(torch.Tensor).cpu().numpy()
        out[self.region_column] = regions.cpu().numpy()
        return out

    def _keys(self, batch: Mapping[str, Any], n: int) -> list[str]:
        if self.key_column is None:
            return [f"row {i} of the batch" for i in range(n)]
        if self.key_column not in batch:
            raise ValueError(
                f"the batch has no column {self.key_column!r} (columns: {sorted(batch)}): read "
                "with include_paths=True or set key_column"
            )
        keys = [str(k) for k in batch[self.key_column]]
        if len(keys) != n:
            raise ValueError(f"column {self.key_column!r} has {len(keys)} rows, the images {n}")
        return keys

    def _image(self, value: Any, key: str) -> torch.Tensor:
        """One row's image as a ``(C, h, w)`` (or ``(h, w)``) tensor, sharing its memory."""
        if not isinstance(value, np.ndarray):
            raise TypeError(f"image {key!r}: expected a numpy array, got {type(value).__name__}")
        if value.ndim not in (2, 3):
            raise ValueError(
                f"image {key!r}: expected (h, w) or (h, w, C) pixels, got shape {value.shape}"
            )
        if value.dtype.kind not in "biuf":
            raise TypeError(
                f"image {key!r}: pixels must be real numbers (bool, int, uint, float), got "
                f"dtype {value.dtype}"
            )
        image = torch.from_numpy(np.ascontiguousarray(value))
        if image.dim() == 3 and self.channels_last:
            image = image.permute(2, 0, 1)
        return image

    def __repr__(self) -> str:
        parts = self.collate._repr_parts()[1:]
        return (
            f"{type(self).__name__}(device={str(self.device)!r}, {', '.join(parts)}, "
            f"seed={self.seed}, image_column={self.image_column!r}, "
            f"key_column={self.key_column!r})"
        )
