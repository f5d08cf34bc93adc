"""RNN mode of ``RWKV4``: one token through every layer on tensors prepared once.

A one-token step is all fixed cost: about 30 small ops a layer, where each module call,
attribute read (``nn.Module.__getattr__``: ~1.5 us), helper and reshape adds microseconds.
``RWKV4.forward`` takes this path for an eager one-token step with no graph to record: the
layers run on ``(B, C)`` rows over a ``Plan`` made once per model, whose tensors are views of
the parameters (the linear maps' transposes for ``x @ W.T``, the token mixes flattened) and,
for the widening maps (``out > in``: the channel mix's ``key``), their row-major ``(in, out)``
copies (``_common.rows_weight``), the layout a one-row product reads fastest. The module
path's ops on the same values in the same order (the copies' products round as that layout's
do).

Views share the parameters' memory, so in-place value updates (``load_state_dict``, an
optimizer step, ``torch.no_grad()`` edits) show at once; a copied weight's in-place version
is a guard (such an update makes a new plan, and new copies). Everything else that could change what
the modules compute is a guard, checked on every step in a few C-level passes: a parameter,
child or module dict replaced or deleted (``load_state_dict(assign=True)``, surgery), a block
or an ``ln0`` added, a parameter's storage or layout changed (``.to()``, ``.data =``,
``swap_tensors``, ``set_``, an in-place transpose), a class swapped (parametrizations), a hook
or an instance ``forward`` on any module inside, a parameter requiring grad while grad is on.
A failed guard sends the step down the module path, and the next eager step makes a new plan.
Old storage a replaced parameter leaves is held until then (``.to()`` and ``load_state_dict``
drop the plan at once).
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter, contains, getitem, is_
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import wkv
from ._common import check_tuple, inplace_version, plain, rows_weight, widening
from ._rwkv4 import (
    CHANNEL_MIX_MAPS,
    TIME_MIX_MAPS,
    BlockState,
    ChannelMixState,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
    TimeMixState,
    _mixer,
)

__all__ = ["PLAN_ATTRIBUTE", "Plan", "forget", "plan_for", "step"]

# Forward hooks only: a step without a graph fires no backward hook on the module path either.
_HOOKS = ("_forward_hooks", "_forward_pre_hooks")
_data_ptr = torch.Tensor.data_ptr
_numel = torch.Tensor.numel
_contiguous = torch.Tensor.is_contiguous
_requires_grad = attrgetter("requires_grad")


class _Norm(NamedTuple):
    module: nn.LayerNorm  # its normalized_shape and eps are read on every step
    weight: torch.Tensor
    bias: torch.Tensor


class _Layer(NamedTuple):
    """One block's tensors as the step uses them: ``*_t`` are the linear maps' weights as
    ``(in, out)`` (views of the transposes; row-major copies for widening maps), ``mix_*``
    ``(C,)`` views of the token mixes."""

    ln0: _Norm | None
    ln1: _Norm
    ln2: _Norm
    att: RWKVTimeMix  # for its state check
    ffn: RWKVChannelMix
    time_decay: torch.Tensor
    time_first: torch.Tensor
    att_mix_k: torch.Tensor
    att_mix_v: torch.Tensor
    att_mix_r: torch.Tensor
    att_key_t: torch.Tensor
    att_value_t: torch.Tensor
    att_receptance_t: torch.Tensor
    att_output_t: torch.Tensor
    ffn_mix_k: torch.Tensor
    ffn_mix_r: torch.Tensor
    ffn_key_t: torch.Tensor
    ffn_receptance_t: torch.Tensor
    ffn_value_t: torch.Tensor


class Plan:
    """The layers of ``blocks`` (an ``nn.ModuleList``) prepared for ``step``, and the guards
    that say whether they still stand for the modules.

    ``layers`` is None where a plan cannot stand for the blocks: a block, mixer, linear map or
    layer norm of another class (a subclass included), a linear map with a bias, a layer norm
    without weights, a parameter that is not a plain ``nn.Parameter``. Such a plan is kept
    anyway, for its guards: it is made again only when the modules change.
    """

    def __init__(self, blocks: nn.ModuleList) -> None:
        copied: list[torch.Tensor] = []  # the weights the layers hold copies of
        layers = [_layer(block, copied) for block in blocks]
        self.layers: list[_Layer] | None = None
        if all(layer is not None for layer in layers):
            self.layers = cast(list[_Layer], layers)
        self.blocks = blocks
        modules = [m for block in blocks for m in block.modules()]
        # Identity guards, one (dict, key, object) edge each: every child, parameter and
        # buffer of the blocks' module tree (a deleted key fails the lookup), and the very
        # dicts (parameters, forward hooks, children) each module holds.
        tables = [blocks._modules] + [
            t for m in modules for t in (m._modules, m._parameters, m._buffers)
        ]
        edges = [(t, k, v) for t in tables for k, v in t.items()]
        held = [(m.__dict__, name) for m in modules for name in ("_parameters", *_HOOKS)]
        held += [(m.__dict__, "_modules") for m in modules if m._modules]  # not the leaves'
        edges += [(table, name, table[name]) for table, name in held]
        self._dicts, self._keys, self._objects = (
            list(column) for column in zip(*edges, strict=True)
        )
        # A block added, or an ln0 given to a block: their children's number.
        self._counted = [blocks._modules] + [block._modules for block in blocks]
        self._counts = list(map(len, self._counted))
        self._modules = modules
        self._types = list(map(type, modules))
        self._instances = [m.__dict__ for m in modules]  # a forward set on an instance
        self._hooks = tuple(getattr(m, name) for m in modules for name in _HOOKS)
        self._tensors = [p for m in modules for p in m._parameters.values() if p is not None]
        self._tensor_types = list(map(type, self._tensors))
        # Storage and layout (.data =, .to(), swap_tensors, set_(), an in-place transpose):
        # pointer, element count and contiguity, which strides would only refine at 3x the cost.
        self._ptrs = list(map(_data_ptr, self._tensors))
        self._numels = list(map(_numel, self._tensors))
        self._contiguous = list(map(_contiguous, self._tensors))
        # Values, where the plan holds a copy instead of a view: the in-place version.
        self._copied = copied
        self._versions = list(map(inplace_version, copied))

    def fresh(self) -> bool:
        """Whether the modules are still those the plan was made of: no module, parameter,
        buffer or module dict replaced or deleted, no block or ``ln0`` added, no class
        swapped, no parameter's storage or layout changed, no copied weight changed in place.
        (Other children or parameters added are not used by the modules' forward.)"""
        try:
            same = all(map(is_, map(getitem, self._dicts, self._keys), self._objects))
        except KeyError:  # deleted
            return False
        return (
            same
            and list(map(len, self._counted)) == self._counts
            and all(map(is_, map(type, self._modules), self._types))
            and all(map(is_, map(type, self._tensors), self._tensor_types))
            and list(map(_data_ptr, self._tensors)) == self._ptrs
            and list(map(_numel, self._tensors)) == self._numels
            and list(map(_contiguous, self._tensors)) == self._contiguous
            and list(map(inplace_version, self._copied)) == self._versions
        )

    def usable(self) -> bool:
        """Whether ``step`` may stand for the modules' calls now: a plan was possible, no
        hook on any module inside (nor a global one), no ``forward`` set on an instance, no
        parameter requiring grad while grad is on. Call on a fresh plan."""
        return (
            self.layers is not None
            and not any(self._hooks)
            and not any(map(contains, self._instances, repeat("forward")))
            and plain()
            and not (torch.is_grad_enabled() and any(map(_requires_grad, self._tensors)))
        )


def _layer(block: nn.Module, copied: list[torch.Tensor]) -> _Layer | None:
    """``block``'s tensors as the step uses them, or None where a plan cannot stand for it.
    Appends to ``copied`` the weights whose row-major copies it holds."""
    if type(block) is not RWKVBlock:
        return None
    att, ffn = block._modules.get("att"), block._modules.get("ffn")
    if type(att) is not RWKVTimeMix or type(ffn) is not RWKVChannelMix:
        return None
    maps = [att._modules.get(n) for n in TIME_MIX_MAPS]
    maps += [ffn._modules.get(n) for n in CHANNEL_MIX_MAPS]
    if any(type(m) is not nn.Linear or m.bias is not None for m in maps):
        return None
    linears = cast(list[nn.Linear], maps)
    norms: list[_Norm | None] = []
    for name in ("ln0", "ln1", "ln2"):
        ln = block._modules.get(name)
        if ln is None and name == "ln0":
            norms.append(None)
            continue
        if type(ln) is not nn.LayerNorm or ln.weight is None or ln.bias is None:
            return None
        norms.append(_Norm(ln, ln.weight.detach(), ln.bias.detach()))
    params: list[object] = [*att._parameters.values(), *ffn._parameters.values()]
    params += [m.weight for m in linears]
    if any(type(p) is not nn.Parameter for p in params):
        return None
    owners = [(att, name) for name in TIME_MIX_MAPS] + [(ffn, name) for name in CHANNEL_MIX_MAPS]
    transposed = []
    for (owner, name), m in zip(owners, linears, strict=True):
        if widening(m):  # the copy the block's own step reads too (one copy per weight)
            rows = rows_weight(owner, name, m.weight)
            if rows.data_ptr() != m.weight.data_ptr():  # a copy, not a view (guarded)
                copied.append(m.weight)
            transposed.append(rows)
        else:
            transposed.append(m.weight.detach().t())
    key, value, receptance, output, ffn_key, ffn_receptance, ffn_value = transposed
    return _Layer(
        norms[0], norms[1], norms[2], att, ffn,  # type: ignore[arg-type]
        time_decay=att.time_decay.detach(),
        time_first=att.time_first.detach(),
        att_mix_k=att.time_mix_k.detach().view(-1),
        att_mix_v=att.time_mix_v.detach().view(-1),
        att_mix_r=att.time_mix_r.detach().view(-1),
        att_key_t=key,
        att_value_t=value,
        att_receptance_t=receptance,
        att_output_t=output,
        ffn_mix_k=ffn.time_mix_k.detach().view(-1),
        ffn_mix_r=ffn.time_mix_r.detach().view(-1),
        ffn_key_t=ffn_key,
        ffn_receptance_t=ffn_receptance,
        ffn_value_t=ffn_value,
    )  # fmt: skip


# The plan lives on the model (an instance attribute, left out of pickles and deep copies by
# _RWKV.__getstate__): a reference cycle the collector frees with the model. (A weak-key table
# would keep a model alive forever once anything in its blocks, a hook's closure say, refers
# back to it.)
PLAN_ATTRIBUTE = "_rnn_plan"


def plan_for(model: nn.Module, blocks: nn.ModuleList) -> Plan | None:
    """``model``'s plan over ``blocks`` if ``step`` may stand for their calls now, else None
    (the module path). Made again when the modules changed."""
    plan = model.__dict__.get(PLAN_ATTRIBUTE)
    if plan is None or plan.blocks is not blocks or not plan.fresh():
        plan = model.__dict__[PLAN_ATTRIBUTE] = Plan(blocks)
    return plan if plan.usable() else None


def forget(model: nn.Module) -> None:
    """Drop ``model``'s plan, whose views would otherwise hold the old storage after
    ``.to()`` or an ``assign=True`` load until the next step."""
    model.__dict__.pop(PLAN_ATTRIBUTE, None)


def _norm(n: _Norm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, n.module.normalized_shape, n.weight, n.bias, n.module.eps)


def step(plan: Plan, x: torch.Tensor, states: list[Any]) -> tuple[torch.Tensor, list[BlockState]]:
    """One token's embeddings ``x`` ``(B, 1, C)`` through every layer from ``states`` (one
    ``BlockState`` per layer, checked as the blocks check them); returns the output rows
    ``(B, C)`` and the new states. The blocks' ops in the same order, on ``(B, C)`` rows."""
    like, x = x, x.squeeze(1)
    assert plan.layers is not None
    new_states = []
    for layer, state in zip(plan.layers, states, strict=True):
        check_tuple(state, 2, "BlockState")
        shift_att, aa_bb_pp = layer.att._check_state(state[0], like)
        (shift_ffn,) = layer.ffn._check_state(state[1], like)
        if layer.ln0 is not None:
            x = _norm(layer.ln0, x)

        # Time mix: output(sigmoid(r) * wkv(k, v)), k v r from the token mixed with the last.
        xa = _norm(layer.ln1, x)
        mix = _mixer(xa, shift_att if shift_att.dtype == xa.dtype else shift_att.to(xa.dtype))
        k = torch.mm(mix(layer.att_mix_k), layer.att_key_t).unsqueeze(1)
        v = torch.mm(mix(layer.att_mix_v), layer.att_value_t).unsqueeze(1)
        r = torch.mm(mix(layer.att_mix_r), layer.att_receptance_t)
        y, aa_bb_pp = wkv(layer.time_decay, layer.time_first, k, v, aa_bb_pp)
        x = x + torch.mm(torch.sigmoid(r) * y.squeeze(1), layer.att_output_t)

        # Channel mix: sigmoid(r) * value(relu(key(xk)) ** 2).
        xf = _norm(layer.ln2, x)
        mix = _mixer(xf, shift_ffn if shift_ffn.dtype == xf.dtype else shift_ffn.to(xf.dtype))
        k = torch.square(torch.relu(torch.mm(mix(layer.ffn_mix_k), layer.ffn_key_t)))
        r = torch.mm(mix(layer.ffn_mix_r), layer.ffn_receptance_t)
        x = x + torch.sigmoid(r) * torch.mm(k, layer.ffn_value_t)
        new_states.append(BlockState(TimeMixState(xa, aa_bb_pp), ChannelMixState(xf)))
    return x, new_states
