"""Data loading: collate variable-size samples onto textured canvases, augment on the device.

* ``PadCollate``: ``collate_fn`` that pads every image of a batch to one size (batch maximum,
  fixed, or rounded up to a multiple) with the brick wall, any texture or a standard mode, at a
  per-sample placement, in one kernel launch; shifts boxes/keypoints, pads masks and, asked,
  returns where each real image lies (``Regions``). Runs in DataLoader workers.
* ``GPUCollate``: the same, building the batch on a CUDA device (``num_workers=0``).
* ``DeviceLoader``: wraps a DataLoader, copies batches to the device ahead of use on a side
  stream and applies batch transforms there.
* ``PerSample``: a v2 transform applied to each sample of a batch on its own (a random draw
  per sample, as Kornia draws; torchvision draws once per call).
* ``Regions``: where each real image lies in its canvas; moves with every geometric v2
  transform as ``BoundingBoxes`` do.
* ``RayPadBatch``: ``PadCollate`` as a batch callable for ``ray.data.Dataset.map_batches``
  (CPU or GPU actors; random draws from a seed and each row's key). Ray itself is optional
  (``pip install 'tipad_transforms[ray]'``).
"""

from ._collate import GPUCollate, PadCollate
from ._device import PerSample
from ._loader import DeviceLoader, worker_context
from ._ray import RayPadBatch
from ._regions import Regions

__all__ = [
    "DeviceLoader",
    "GPUCollate",
    "PadCollate",
    "PerSample",
    "RayPadBatch",
    "Regions",
    "worker_context",
]
