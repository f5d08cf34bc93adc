"""The 0.6 import path of ``check_mode`` and ``parse_padding``, kept for ``transforms.py`` and
``data/`` until they import them from ``_checks``: delete then."""

from ._checks import check_mode, parse_padding

__all__ = ["check_mode", "parse_padding"]
