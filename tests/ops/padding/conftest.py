"""Fixtures shared by the padding family's tests."""

from __future__ import annotations

import pytest

from tipad_transforms.ops.padding import copies as pad_copies


@pytest.fixture(params=["borders", "whole"])
def border_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the copies write a border shared by every canvas: around the windows
    (``copies.borders``: both thresholds 0) or over whole canvases (``BORDERS_MIN_BYTES``
    above any test's canvas)."""
    around = request.param == "borders"
    monkeypatch.setattr(pad_copies, "BORDERS_MIN_BYTES", 0 if around else 1 << 62)
    monkeypatch.setattr(pad_copies, "BORDERS_MIN_ROW_BYTES", 0)
    return str(request.param)
