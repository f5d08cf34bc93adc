"""The RWKV forward ops' autograd (``ops._common.register_state_autograd``), shared by ``wkv``
and ``wkv7``: what autograd hands their backward."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import profile

from tipad_transforms.ops import wkv, wkv7


def _loss_and_saved(family: str) -> tuple[torch.Tensor, int]:
    """A loss through one op call with a state (so all three outputs exist) and the number of
    elements of the states the op saved for its backward."""
    gen = torch.Generator().manual_seed(0)
    if family == "wkv":
        b, t, c = 2, 5, 3
        decay, first = torch.randn(c, generator=gen), torch.randn(c, generator=gen)
        k, v = (torch.randn(b, t, c, generator=gen, requires_grad=True) for _ in range(2))
        state = torch.randn(b, 3, c, generator=gen)
        y, _new_state = wkv(decay, first, k, v, state)
        return y.sum(), 3 * b * (t + 1) * c
    b, t, h, n = 1, 40, 1, 4
    r, w, k, v, a, bb = (torch.randn(b, t, h, n, generator=gen) for _ in range(6))
    w = (-torch.rand(b, t, h, n, generator=gen)).requires_grad_()
    y, _new_state = wkv7(r, w, k, v, a, bb, torch.zeros(b, h, n, n))
    return y.sum(), b * h * (-(-t // 32) + 1) * n * n  # a checkpoint per 32 steps, the last


@pytest.mark.parametrize("family", ["wkv", "wkv7"])
def test_backward_is_not_handed_zeros_for_the_saved_states(family: str) -> None:
    # The saved states are an output of the forward op, so autograd would materialize a zero
    # gradient for them (a fill as large as the states, every call) unless told not to.
    loss, saved = _loss_and_saved(family)
    with profile(record_shapes=True) as prof:
        loss.backward()
    fills = [
        (e.name, e.input_shapes)
        for e in prof.events()
        if e.name in ("aten::fill_", "aten::zero_", "aten::zeros_like", "aten::zeros")
        and any(shape and torch.Size(shape).numel() >= saved for shape in e.input_shapes)
    ]
    assert not fills, fills
