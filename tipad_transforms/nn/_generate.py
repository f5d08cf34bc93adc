"""Text generation with an RWKV model: the prompt in one call, then one token at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["generate", "sample_logits"]


def sample_logits(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``logits`` ``(B, V)`` (any float dtype): ``(B,)`` int64.

    ``temperature == 0``: greedy (the arg max, no randomness). Otherwise the softmax of
    ``logits / temperature`` (in float32) restricted to its nucleus: the most probable tokens
    whose probabilities add up to at least ``top_p`` (``top_p = 1``: all tokens), drawn with
    ``generator`` (on the generator's device; ``None``: torch's global one). The result is on
    ``logits``' device. Raises ``ValueError`` for a negative temperature, ``top_p`` outside
    ``(0, 1]`` or ``logits`` not 2-D.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a (B, V) tensor, got {shape}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1:
        sorted_probs, order = probs.sort(-1, descending=True)
        # Keep a token while the mass before it is still short of top_p: the top one always.
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    device = probs.device if generator is None else generator.device
    token = torch.multinomial(probs.to(device), 1, generator=generator)[:, 0]
    return token.to(logits.device)


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

    ``model``: an ``RWKV7`` or ``RWKV4`` (anything with ``model(idx, state) -> (logits,
    new_state)``). ``prompt``: ``(B, T)`` int64 token ids, or a list of ids for ``B = 1``, with
    ``T >= 1``; it runs in one parallel call, then each new token is fed alone with the state
    carried, so a step costs the same whatever the length so far. ``state``: where the prompt
    starts (``None``: the zero state; e.g. a tuned initial state); it is not modified.
    Sampling as ``sample_logits`` (``temperature=0``: greedy); the same ``generator`` seed gives
    the same tokens. Returns the new tokens ``(B, max_new_tokens)`` int64 on the prompt's
    device.
    """
    if isinstance(prompt, torch.Tensor):
        idx = prompt
    else:
        idx = torch.tensor([list(prompt)], dtype=torch.int64)
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"prompt must be (B, T) token ids with T >= 1, got {tuple(idx.shape)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    logits, state = model(idx, state)
    out = idx.new_empty(idx.shape[0], max_new_tokens)
    for i in range(max_new_tokens):
        token = sample_logits(
            logits[:, -1], temperature=temperature, top_p=top_p, generator=generator
        )
        out[:, i] = token
        if i + 1 < max_new_tokens:
            logits, state = model(token[:, None], state)
    return out
