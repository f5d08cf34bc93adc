"""Fixtures of the nn tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from torch import nn


@pytest.fixture
def module_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The class names of the modules called while it is active (``nn.Module.__call__``)."""
    calls: list[str] = []
    real = nn.Module.__call__

    def counting(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        calls.append(type(self).__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__call__", counting)
    yield calls
