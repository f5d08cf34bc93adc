"""Text generation with an RWKV model: the prompt in one call, then one token at a time."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import torch
from torch import nn

from .._checks import check_generator, check_tensor
from ._common import allocation_failure
from ._models import _RWKV
from ._recurrent import Recurrent

__all__ = ["generate", "sample_logits"]


def _check_sampling(temperature: object, top_p: object, generator: object) -> tuple[float, float]:
    """``(temperature, top_p)`` as floats, else a TypeError/ValueError naming the argument."""
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    t, p = float(temperature), float(top_p)  # type: ignore[arg-type]
    if not 0 <= t < math.inf:  # NaN fails both
        raise ValueError(f"temperature must be >= 0 and finite, got {temperature!r}")
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    check_generator(generator)
    return t, p


def sample_logits(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``logits`` ``(B, V)`` (any real dtype; ``V >= 1``): ``(B,)`` int64
    on ``logits``' device.

    ``temperature == 0``: greedy (the arg max). Otherwise the softmax of ``logits /
    temperature`` (in float32) cut to its nucleus, the most probable tokens whose probabilities
    add up to at least ``top_p``, drawn with ``generator`` (on its device; ``None``: torch's
    global one); ``-inf`` logits are never drawn. Raises ``TypeError`` / ``ValueError`` naming
    a wrong argument (docs/rwkv.md lists them), NaN logits, or (when sampling) a row with no
    probability to draw from (``+inf`` or only ``-inf``).
    """
    t, p = _check_sampling(temperature, top_p, generator)
    logits = check_tensor("logits", logits)
    if logits.is_complex() or logits.dtype == torch.bool:
        raise TypeError(f"logits must be a real (float or int) tensor, got {logits.dtype}")
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise ValueError(f"logits must be a (B, V) tensor with V >= 1, got {tuple(logits.shape)}")
    values = not logits.is_meta  # meta tensors have shapes only
    if values and logits.is_floating_point() and bool(torch.isnan(logits).any()):
        raise ValueError("logits hold NaN: no token can be chosen")
    if t == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / t, dim=-1)
    if values:
        bad = torch.isnan(probs).any(-1).nonzero()
        if bad.numel():
            raise ValueError(
                f"logits row {int(bad[0, 0])} gives no probabilities to draw from (+inf, or "
                "only -inf)"
            )
    if p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        # Keep a token while the mass before it is still short of top_p: the top one always.
        drop = sorted_probs.cumsum(-1) - sorted_probs >= p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    if not values:
        return torch.multinomial(probs, 1)[:, 0]
    device = probs.device if generator is None else generator.device
    token = torch.multinomial(probs.to(device), 1, generator=generator)[:, 0]
    return token.to(logits.device)


def _prompt(prompt: object, model: object) -> torch.Tensor:
    """``prompt`` as ``(B, T)`` token ids, else a TypeError/ValueError naming it."""
    if isinstance(prompt, torch.Tensor):
        check_tensor("prompt", prompt)
        if prompt.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"prompt must hold int64 (or int32) token ids, got {prompt.dtype}")
        idx = prompt
    elif isinstance(prompt, Sequence) and not isinstance(prompt, str | bytes):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            kinds = sorted({type(i).__name__ for i in prompt if not isinstance(i, int)} or {"bool"})
            raise TypeError(f"prompt must be a list of int token ids, got items of {kinds}")
        # A list goes to the model's device (a module's parameters, a snapshot's tensors).
        device = None
        if isinstance(model, Recurrent):
            device = model.device
        elif isinstance(model, nn.Module):
            device = next((q.device for q in model.parameters()), None)
        try:
            idx = torch.tensor([list(prompt)], dtype=torch.int64, device=device)
        except (OverflowError, RuntimeError, ValueError, TypeError) as e:
            raise ValueError(f"prompt holds a token id that is not an int64: {e}") from e
    else:
        raise TypeError(
            f"prompt must be a (B, T) tensor or a list of token ids, got {type(prompt).__name__}"
        )
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"prompt must be (B, T) token ids with T >= 1, got {tuple(idx.shape)}")
    return idx


def _logits_and_state(out: object) -> tuple[torch.Tensor, Any]:
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise TypeError(
            "model(idx, state) must return (logits, new_state), as RWKV7 and RWKV4 do; got "
            f"{type(out).__name__}"
        )
    return out[0], out[1]


@torch.no_grad()
def generate(
    model: Callable[..., Any],
    prompt: torch.Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    state: Any = None,
) -> torch.Tensor:
    """Continue ``prompt`` by ``max_new_tokens`` tokens with an RWKV model in RNN mode.

    ``model``: an ``RWKV7`` or ``RWKV4``, run through its recurrent form (``model.recurrent()``,
    built for this call: to generate repeatedly from the same weights, build it once and pass
    it instead), or anything else called as ``model(idx, state) -> (logits, new_state)`` (a
    ``Recurrent``, say). ``prompt``: ``(B, T)`` int64 (or int32) token ids, or a list of ids
    for ``B = 1`` (made on the model's device), with ``T >= 1``; it runs in one parallel call,
    then each new token is fed alone with the state carried, so a step costs the same whatever
    the length so far. ``state``: where the prompt starts (``None``: the zero state; e.g. a
    tuned initial state); it is not modified. Sampling as ``sample_logits``
    (``temperature=0``: greedy); the same ``generator`` seed gives the same tokens. Returns the
    new tokens ``(B, max_new_tokens)`` int64 on the prompt's device.

    Raises ``TypeError`` / ``ValueError`` naming a wrong argument before the model runs.
    """
    if not callable(model):
        raise TypeError(f"model must be callable as model(idx, state), got {type(model).__name__}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    _check_sampling(temperature, top_p, generator)
    idx = _prompt(prompt, model)
    try:
        out = idx.new_empty(idx.shape[0], max_new_tokens, dtype=torch.int64)
    except (RuntimeError, MemoryError, TypeError) as e:
        if isinstance(e, RuntimeError) and not allocation_failure(e):
            raise
        raise ValueError(
            f"max_new_tokens={max_new_tokens} is too many: the output cannot be allocated"
        ) from e
    step = model.recurrent() if isinstance(model, _RWKV) else model
    logits, state = _logits_and_state(step(idx, state))
    for i in range(max_new_tokens):
        token = sample_logits(
            logits[:, -1], temperature=temperature, top_p=top_p, generator=generator
        )
        out[:, i] = token
        if i + 1 < max_new_tokens:
            logits, state = _logits_and_state(step(token[:, None], state))
    return out
