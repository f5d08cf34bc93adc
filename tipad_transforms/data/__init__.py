"""Data loading: collate variable-size samples onto textured canvases (``PadCollate``, in
workers; ``GPUCollate``, on the device; ``RayPadBatch``, for Ray Data), move and augment batches
on the device (``DeviceLoader``, ``PerSample``), and know where each real image lies
(``Regions``). Ray is optional (``pip install 'tipad_transforms[ray]'``)."""

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
