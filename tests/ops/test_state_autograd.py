"""The RWKV forward ops' autograd (``ops._common.register_state_autograd``), shared by ``wkv``
and ``wkv7``: what autograd hands their backward."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import profile

from tipad_transforms.ops import wkv, wkv7


def _call(family: str) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, int]:
    """One op call with a state (so all three of the op's outputs exist): the leaves that need
    gradients, ``y``, the new state, and the number of elements of the states the op saved for
    its backward."""
    gen = torch.Generator().manual_seed(0)
    if family == "wkv":
        b, t, c = 2, 5, 3
        decay, first = torch.randn(c, generator=gen), torch.randn(c, generator=gen)
        k, v = (torch.randn(b, t, c, generator=gen, requires_grad=True) for _ in range(2))
        state = torch.randn(b, 3, c, generator=gen).requires_grad_()
        y, new_state = wkv(decay, first, k, v, state)
        return [k, v, state], y, new_state, 3 * b * (t + 1) * c
    b, t, h, n = 1, 40, 1, 4
    r, k, v, a, bb = (torch.randn(b, t, h, n, generator=gen) for _ in range(5))
    w = (-torch.rand(b, t, h, n, generator=gen)).requires_grad_()  # log-decays <= 0
    state = torch.randn(b, h, n, n, generator=gen).requires_grad_()
    y, new_state = wkv7(r, w, k.requires_grad_(), v, a, bb, state)
    return [w, k, state], y, new_state, b * h * (-(-t // 32) + 1) * n * n  # a slot per 32 steps


@pytest.mark.parametrize("family", ["wkv", "wkv7"])
def test_backward_is_not_handed_zeros_for_the_saved_states(family: str) -> None:
    # The saved states are an output of the forward op, so autograd would materialize a zero
    # gradient for them (a fill as large as the states, every call) unless told not to.
    _leaves, y, _new_state, saved = _call(family)
    with profile(record_shapes=True) as prof:
        y.sum().backward()
    fills = [
        (e.name, e.input_shapes)
        for e in prof.events()
        if e.name in ("aten::fill_", "aten::zero_", "aten::zeros_like", "aten::zeros")
        and any(shape and torch.Size(shape).numel() >= saved for shape in e.input_shapes)
    ]
    assert not fills, fills


@pytest.mark.parametrize("used", ["y", "state"])
@pytest.mark.parametrize("family", ["wkv", "wkv7"])
def test_a_loss_on_one_output_gets_the_gradients_of_zeros_for_the_other(
    family: str, used: str
) -> None:
    # The unused output's gradient reaches the backward as None (not materialized), which it
    # replaces with zeros itself: the same bits as autograd handed explicit zeros.
    leaves, y, new_state, _saved = _call(family)
    out, other = (y, new_state) if used == "y" else (new_state, y)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, leaves, grad, retain_graph=True)
    want = torch.autograd.grad((out, other), leaves, (grad, torch.zeros_like(other)))
    for g, w in zip(got, want, strict=True):
        assert g.abs().sum() > 0
        torch.testing.assert_close(g, w, rtol=0, atol=0)
