"""The 0.6 import path of the warm-up switches, kept for ``_timing_table.py`` until it imports
them from ``tipad_transforms.backends.warmup``: delete then."""

from ..backends.warmup import no_warmup, set_warmup

__all__ = ["no_warmup", "set_warmup"]
