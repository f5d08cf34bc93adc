"""The recurrent form of an RWKV model (``Recurrent``): a snapshot of its weights laid out for
one-token steps, running the layers' math functions (the ones their ``forward`` runs) without
module calls. docs/rwkv.md ("The recurrent form") says what it holds and why.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from .._compat.torch import global_module_hooks, module_hooks
from ._common import check_idx, check_states

if TYPE_CHECKING:
    from ._models import _RWKV

__all__ = ["Recurrent", "snapshot"]

S = TypeVar("S", bound=tuple)


class _Snapshot:
    """A layer's snapshot: the parts its math reads (``_recurrent``) under the module's names,
    called as the module is with a state, ``(x, [v_first,] state)``."""

    def __init__(self, module: Any) -> None:
        for name in type(module)._recurrent:
            setattr(self, name, snapshot(getattr(module, name)))
        self._math = type(module)._math
        self._check = module._check_state

    def __call__(self, x: torch.Tensor, *args: Any) -> Any:
        return self._math(self, x, *args[:-1], self._check(args[-1], x))


def _plain(m: nn.Module) -> bool:
    """Whether calling ``m`` runs its class's ``forward`` alone: no hooks (on it or global), no
    ``forward`` on the instance."""
    return not module_hooks(m) and "forward" not in vars(m) and not global_module_hooks()


def _detached(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


def _linear(m: nn.Linear) -> Any:
    weight = m.weight.detach()
    if m.out_features > m.in_features:
        weight = weight.t().contiguous().t()  # row-major (in, out) underneath; a view if so
    return partial(F.linear, weight=weight, bias=_detached(m.bias))


def snapshot(part: Any) -> Any:
    """``part`` of a module as the step uses it: a tensor detached, a plain ``nn.Linear`` /
    ``LayerNorm`` / ``GroupNorm`` / ``Embedding`` as a ``partial`` of its functional form
    (a widening ``Linear`` through a row-major copy of its weight), a layer of this package as
    a ``_Snapshot``; anything else as is."""
    if isinstance(part, torch.Tensor):
        return part.detach()
    if not isinstance(part, nn.Module) or not _plain(part):
        return part
    kind = type(part)
    if kind is nn.Linear:
        return _linear(cast(nn.Linear, part))
    if kind is nn.LayerNorm:
        n = cast(nn.LayerNorm, part)
        return partial(F.layer_norm, normalized_shape=n.normalized_shape,
                       weight=_detached(n.weight), bias=_detached(n.bias), eps=n.eps)  # fmt: skip
    if kind is nn.GroupNorm:
        g = cast(nn.GroupNorm, part)
        return partial(F.group_norm, num_groups=g.num_groups,
                       weight=_detached(g.weight), bias=_detached(g.bias), eps=g.eps)  # fmt: skip
    if kind is nn.Embedding and cast(nn.Embedding, part).max_norm is None:
        return partial(F.embedding, weight=cast(nn.Embedding, part).weight.detach())
    # One of this package's layers, not a user's subclass of one (whose code may read more).
    if hasattr(kind, "_recurrent") and kind.__module__.startswith(f"{__package__}."):
        return _Snapshot(part)
    return part


def _call(block: Any, *args: Any) -> Any:
    return block(*args)


class Recurrent(Generic[S]):
    """An RWKV model's recurrent form, for generation: ``model.recurrent()``.

    ``rec(idx, state=None)`` -> ``(logits, new_state)``: ``model(idx, state)``'s logits and
    states (to float rounding) with the same checks and errors, without module calls. ``idx``
    ``(B, T)`` int64 (or int32) token ids, any ``T`` (one token per call is what it is for);
    ``state`` a list of block states (``None``: the zero state), never modified.

    A snapshot of the model's weights: detached views of most (no gradient reaches the model)
    and row-major copies of the widening linear maps (``out > in``: the channel mixes' ``key``,
    the ``head``; the layout a one-row product streams fastest, costing their memory again).
    It checks nothing per step: after the model's weights or structure change (an optimizer
    step, ``load_state_dict``, ``.to()``, a hook added), call ``rebuild()``. Modules that are
    not plain when it is built (another class, hooks, a ``forward`` set on the instance) are
    called as modules. ``rec.emb``, ``rec.blocks``, ``rec.ln_out``, ``rec.head`` are the parts
    it calls, under the model's names (``rec.blocks[1].att.key``).
    """

    def __init__(self, model: _RWKV[S]) -> None:
        self.model = model
        self.rebuild()

    def rebuild(self) -> Recurrent[S]:
        """Take the snapshot again from the model's current weights; returns ``self``."""
        model = self.model
        weight = model.emb.weight
        self._vocab_size, self._device, self._dtype = model.vocab_size, weight.device, weight.dtype
        self._block_modules: list[Any] = list(model.blocks)
        self._layers = type(model)._layers
        self.emb = snapshot(model.emb)
        self.blocks = [snapshot(block) for block in self._block_modules]
        self.ln_out = snapshot(model.ln_out)
        self.head = snapshot(model.head)
        return self

    @property
    def device(self) -> torch.device:
        """The device of the snapshot's tensors (the model's when it was taken)."""
        return self._device

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> list[S]:
        """As the model's ``init_state``, on the snapshot's device and dtype by default."""
        device = self._device if device is None else device
        dtype = self._dtype if dtype is None else dtype
        return [
            block.init_state(batch_size, device=device, dtype=dtype)
            for block in self._block_modules
        ]

    def __call__(
        self, idx: torch.Tensor, state: list[S] | None = None
    ) -> tuple[torch.Tensor, list[S]]:
        x = self.emb(check_idx(idx, self._vocab_size, self._device))
        states = check_states(state, len(self.blocks), x, self.init_state)
        x, new_state = self._layers(_call, self.blocks, x, states)
        return self.head(self.ln_out(x)), new_state  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Recurrent({type(self.model).__name__}, {len(self.blocks)} layers)"
