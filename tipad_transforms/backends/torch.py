"""The torch backend: every family's ``reference.py``, plain torch ops on any device.

It never refuses: it serves what the Taichi backend cannot (a forked worker, ``cuda:1``, a
launch too large to index) and padding's warm-up. Its results are the kernels' (bit for bit
for padding, to float rounding for the RWKV operators): padding's as bulk copies on the CPU
where a form applies, else by index maps; the RWKV operators' with full-size temporaries.
"""

from __future__ import annotations

from . import Backend

__all__ = ["TORCH", "TorchBackend"]


class TorchBackend(Backend):
    """Runs ``ops/<family>/reference.py``."""

    name = "torch"
    module = "reference"


#: The torch backend of this process.
TORCH = TorchBackend()
