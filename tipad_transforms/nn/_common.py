"""What every RWKV layer family shares: argument checks, token shift, the "no state" sentinel."""

from __future__ import annotations

import enum

import torch

from ..ops._common import check_float


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
    first = x.new_zeros(x.shape[0], 1, x.shape[2]) if prev is None else prev.to(x.dtype)[:, None]
    if x.shape[1] == 1:  # a one-token step: the previous token itself, no copy
        return first
    return torch.cat([first, x[:, :-1]], dim=1)


def last(x: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """The shift state after ``x``: its last token, or ``prev`` for an empty sequence."""
    return x[:, -1] if x.shape[1] else prev
