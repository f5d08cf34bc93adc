"""``tipad demo``'s timing table moved to :mod:`tipad_transforms.cli.timing`; this name stays
only until ``tests/test_warmup.py`` imports it from there."""

from .cli.timing import time_paddings

__all__ = ["time_paddings"]
