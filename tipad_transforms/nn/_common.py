"""What every RWKV layer family shares: argument checks, token shift, the "no state" sentinel."""

from __future__ import annotations

import enum
from operator import itemgetter
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module

from ..ops._common import check_float
from ..ops._route import eager


class Stateless(enum.Enum):
    """The default of a layer's ``state`` argument: "no state given".

    ``m(x)`` returns ``y`` alone; ``m(x, None)`` starts from the zero state and returns
    ``(y, new_state)`` (RWKV users' habit: ``y, state = block(x, None)``). ``None`` cannot be
    the default because it already means "start from zeros".
    """

    STATELESS = enum.auto()


STATELESS = Stateless.STATELESS


def check_size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_layer(layer_id: object, n_layer: int) -> int:
    check_size("n_layer", n_layer)
    if isinstance(layer_id, bool) or not isinstance(layer_id, int) or not 0 <= layer_id < n_layer:
        raise ValueError(f"layer_id must be an int in [0, n_layer={n_layer}), got {layer_id!r}")
    return layer_id


def channel_ramp(n_embd: int) -> torch.Tensor:
    """``ddd[i] = i / n_embd`` as ``(1, 1, n_embd)`` float64: the base of the token-mix inits."""
    return (torch.arange(n_embd, dtype=torch.float64) / n_embd).view(1, 1, n_embd)


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a recurrence's state for inputs of ``dtype`` (half precision loses it)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_x(x: object, n_embd: int) -> torch.Tensor:
    x = check_float("x", x)
    if x.dim() != 3 or x.shape[2] != n_embd:
        raise ValueError(f"x must be (B, T, n_embd={n_embd}), got shape {tuple(x.shape)}")
    return x


def check_part(name: str, t: object, shape: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(
            f"{name} must be {shape} for x of shape {tuple(x.shape)}, got {tuple(t.shape)} "
            "(a state from another batch size or layer width?)"
        )
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device}, x on {x.device}")
    return t


def check_tuple(state: object, length: int, kind: str) -> tuple:
    if not isinstance(state, tuple) or len(state) != length:
        raise TypeError(f"state must be a {kind}, got {type(state).__name__}")
    return state


def shifted(x: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
    """``x`` one step later in time: ``xx[:, t] = x[:, t-1]``, ``xx[:, 0] = prev`` (or zeros)."""
    # unsqueeze, not [:, None], and no .to() to the same dtype: 1.3 us instead of 3.4 (each
    # index or .to() costs 1.4-2 us), on a one-token step that is all fixed cost.
    if prev is None:
        first = x.new_zeros(x.shape[0], 1, x.shape[2])
    else:
        first = (prev if prev.dtype == x.dtype else prev.to(x.dtype)).unsqueeze(1)
    if x.shape[1] == 1:  # a one-token step: the previous token itself, no copy
        return first
    return torch.cat([first, x[:, :-1]], dim=1)


def last(x: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """The shift state after ``x``: its last token, or ``prev`` for an empty sequence."""
    return x.select(1, -1) if x.shape[1] else prev  # select: cheaper than x[:, -1]


def plain(*modules: nn.Module) -> bool:
    """Whether calling ``modules``' ``forward`` directly (or their functional form) is what
    ``module(x)`` would do: no hooks on them or global ones, no ``forward`` set on an instance
    (as accelerate's hooks do), no TorchScript tracing."""
    if (
        _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or _module._global_backward_pre_hooks
        or torch._C._get_tracing_state() is not None
    ):
        return False
    for m in modules:
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
            return False
        if "forward" in m.__dict__:
            return False
    return True


def fast_step(x: torch.Tensor, block: nn.Module, mixers: tuple[tuple[nn.Module, type], ...],
              norms: tuple[nn.Module | None, ...]) -> bool:  # fmt: skip
    """Whether a stateful call of ``block`` on ``x`` may take the eager inference path.

    That path calls each mixer's step and ``F.linear`` / ``F.layer_norm`` with the children's
    own weights, skipping ``nn.Module.__call__`` (a one-token step is all fixed cost). It may
    when nothing needs a graph (``ops._route.eager``: grad off, or no input or parameter
    requiring it), each mixer is exactly of its class with plain ``nn.Linear`` (or
    ``nn.GroupNorm``) children, the
    ``norms`` are plain ``nn.LayerNorm`` (or None), and no module involved has hooks.
    """
    if not eager(x):
        return False
    if torch.is_grad_enabled() and any(p.requires_grad for p in block.parameters()):
        return False
    involved: list[nn.Module] = [block]
    for m in norms:
        if m is not None:
            if type(m) is not nn.LayerNorm:
                return False
            involved.append(m)
    for mixer, cls in mixers:
        if type(mixer) is not cls:
            return False
        involved.append(mixer)
        for child in mixer._modules.values():
            if child is None or type(child) not in (nn.Linear, nn.GroupNorm):
                return False
            involved.append(child)
    return plain(*involved)


# A one-token step is all fixed cost, and ``nn.Module.__getattr__`` costs ~1.5 us a read (a
# failed ordinary lookup, then a Python call): the hot paths read parameters and children
# from the modules' own dicts, in one C call each. Same objects as ``m.weight``.
WEIGHT_BIAS = itemgetter("weight", "bias")


class _Attributes:
    """A module's attributes as a mapping (``read``'s fallback)."""

    __slots__ = ("module",)

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __getitem__(self, name: str) -> object:
        return getattr(self.module, name)


def read(names: itemgetter, m: nn.Module) -> Any:
    """``names`` (an ``itemgetter``) of ``m``'s parameters: from ``m._parameters`` in one C
    call, or from its attributes where that dict lacks them (a ``DataParallel`` replica keeps
    its weights as plain tensor attributes)."""
    try:
        return names(m._parameters)
    except KeyError:
        return names(_Attributes(m))


def linear(m: nn.Module, x: torch.Tensor, fast: bool) -> torch.Tensor:
    """``m(x)``, as ``F.linear`` on the fast path (``m`` is then a plain ``nn.Linear``)."""
    if fast:
        return torch.nn.functional.linear(x, *read(WEIGHT_BIAS, m))
    return m(x)


def layer_norm(m: nn.Module, x: torch.Tensor, fast: bool) -> torch.Tensor:
    """``m(x)``, as ``F.layer_norm`` on the fast path (``m`` a plain ``nn.LayerNorm``)."""
    if fast:
        weight, bias = read(WEIGHT_BIAS, m)
        return torch.nn.functional.layer_norm(
            x,
            m.normalized_shape,  # type: ignore[arg-type]
            weight,
            bias,
            m.eps,  # type: ignore[arg-type]
        )
    return m(x)


def generation_layout(layer: nn.Linear) -> nn.Linear:
    """Store ``layer.weight`` ``(out, in)`` as the transpose of a row-major ``(in, out)`` tensor
    when ``out > in``; returns ``layer``.

    Same shape, values, name and autograd behaviour; only the strides change. A one-row input
    (one-token generation) then reads the weight as ``x @ W.t()`` over contiguous rows, which
    BLAS streams at memory speed, where ``F.linear`` on the row-major weight computes ``out``
    short dot products: a 4x-wide feed-forward key map costs ~1.5x more that way (measured on
    this package's CPU benchmark machine). BlinkDL's ``rwkv`` package stores every weight
    transposed for the same reason; for ``out < in`` the row-major layout is the faster one.
    ``load_state_dict``, ``.to()`` and optimizers keep the layout; ``safetensors`` wants
    ``.contiguous()`` tensors.
    """
    w = layer.weight
    if layer.out_features > layer.in_features and w.is_contiguous():
        layer.weight = nn.Parameter(w.detach().t().contiguous().t(), requires_grad=w.requires_grad)
    return layer


def group_norm(m: nn.Module, x: torch.Tensor, fast: bool) -> torch.Tensor:
    """``m(x)``, as ``F.group_norm`` on the fast path (``m`` a plain ``nn.GroupNorm``)."""
    if fast:
        weight, bias = read(WEIGHT_BIAS, m)
        return torch.nn.functional.group_norm(
            x,
            m.num_groups,  # type: ignore[arg-type]
            weight,
            bias,
            m.eps,  # type: ignore[arg-type]
        )
    return m(x)
