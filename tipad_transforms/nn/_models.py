"""The language models ``RWKV4`` and ``RWKV7``: RWKV-LM's ``RWKV`` (``emb``, ``blocks``,
``ln_out``, ``head``), so the ``.pth`` files RWKV-LM saves load with ``strict=True``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast, overload

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .._checks import FLOATS, check_tensor
from ._common import (
    STATELESS,
    Stateless,
    check_fits,
    check_idx,
    check_size,
    check_states,
    sizes_checked,
)
from ._recurrent import Recurrent
from ._rwkv4 import BlockState, RWKVBlock
from ._rwkv7 import RWKV7Block, RWKV7BlockState, lora_widths

__all__ = ["RWKV4", "RWKV7"]

_Model = TypeVar("_Model", bound="_RWKV[Any]")
S = TypeVar("S", bound=tuple)


class _RWKV(nn.Module, Generic[S]):
    """``emb -> blocks -> ln_out -> head``. The subclasses give a layer's parameter count
    (``per_layer(n_embd)``, for ``check_fits``), make each block (``block(layer_id)``) and say
    how it is called (``_value_residual``). ``emb`` and ``head`` start as RWKV-LM's
    ``generate_init_weight`` makes them: ``emb`` uniform in ``±1e-4`` (``ln0`` rescales it),
    ``head`` orthogonal with gain ``0.5 * sqrt(max(vocab / n_embd, 1))``.
    """

    blocks: nn.ModuleList
    #: Whether each block takes and returns ``v_first`` (RWKV-7's value residual).
    _value_residual: ClassVar[bool] = False
    #: Activation checkpointing (RWKV-LM's ``--grad_cp 1``): set it to True and, with grad on,
    #: each block runs under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``,
    #: keeping only its inputs for the backward, which runs the block's forward again. Same
    #: values and gradients; the memory of one block's activations instead of all of them.
    grad_checkpointing: bool = False

    def __init__(
        self,
        vocab_size: int,
        n_embd: int,
        n_layer: int,
        per_layer: Callable[[int], int],
        block: Callable[[int], nn.Module],
    ) -> None:
        check_size("n_layer", n_layer)
        check_size("vocab_size", vocab_size)
        check_fits(
            f"{type(self).__name__}(vocab_size={vocab_size}, n_embd={n_embd}, n_layer={n_layer})",
            n_layer * per_layer(check_size("n_embd", n_embd)) + 2 * vocab_size * n_embd,
        )
        super().__init__()
        self.vocab_size, self.n_embd = vocab_size, n_embd
        self.emb = nn.Embedding(vocab_size, n_embd)
        self.blocks = nn.ModuleList(block(i) for i in range(n_layer))
        self.ln_out = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        with torch.no_grad():
            nn.init.uniform_(self.emb.weight, -1e-4, 1e-4)
            if not self.head.weight.is_meta:
                gain = 0.5 * math.sqrt(max(vocab_size / n_embd, 1.0))
                nn.init.orthogonal_(self.head.weight, gain=gain)

    @classmethod
    def _layers(
        cls,
        call: Callable[..., Any],
        blocks: Iterable[Any],
        x: torch.Tensor,
        states: list[Any] | None,
    ) -> tuple[torch.Tensor, list[Any] | None]:
        """``x`` through ``blocks``, each called as ``call(block, x, [v_first,] [state])``, with
        ``states`` (one per block) or without (``None``); returns ``x`` and the new states."""
        # RWKV-7's value residual, passed from block to block: [v_first], or nothing (RWKV-4).
        # A block returns x alone, or (x, v_first) where it takes one; a state comes last.
        v: list[Any] = [None] if cls._value_residual else []
        if states is None:
            for block in blocks:
                out = call(block, x, *v)
                x, v = (out[0], out[1:]) if v else (out, v)
            return x, None
        new_states = []
        for block, s in zip(blocks, states, strict=True):
            x, *v, s = call(block, x, *v, s)
            new_states.append(s)
        return x, new_states

    def _block(self, block: nn.Module, *args: Any) -> Any:
        """``block(*args)``, under activation checkpointing when it is on and grad is."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, *args, use_reentrant=False)
        return block(*args)

    @property
    def n_layer(self) -> int:
        return len(self.blocks)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> list[S]:
        """The state before the first token: one block state per layer (a list).

        ``device`` and ``dtype`` (of the shift states; the WKV states are float32, float64 for
        a float64 model) default to the model's.
        """
        return [
            cast(Any, block).init_state(batch_size, device=device, dtype=dtype)
            for block in self.blocks
        ]

    @overload
    def forward(self, idx: torch.Tensor) -> torch.Tensor: ...
    @overload
    def forward(
        self, idx: torch.Tensor, state: Sequence[S] | None
    ) -> tuple[torch.Tensor, list[S]]: ...

    def forward(
        self, idx: torch.Tensor, state: Sequence[S] | Stateless | None = STATELESS
    ) -> torch.Tensor | tuple[torch.Tensor, list[S]]:
        """Logits ``(B, T, vocab_size)`` of ``idx`` ``(B, T)`` int64 (or int32) token ids, in
        the model's dtype (autocast's under ``torch.autocast``); with ``state`` (a list of
        block states, ``model.init_state(B)``; ``None``: that zero state), also the state after
        ``idx``. The state passed in is never modified. Raises ``TypeError`` / ``ValueError``
        naming ``idx`` or ``state``.
        """
        x = self.emb(check_idx(idx, self.vocab_size, self.emb.weight.device))
        states = None
        if state is not STATELESS:
            states = check_states(state, self.n_layer, x, self.init_state)
        x, new_state = self._layers(self._block, self.blocks, x, states)
        logits = self.head(self.ln_out(x))
        return logits if new_state is None else (logits, new_state)

    def recurrent(self) -> Recurrent[S]:
        """This model's recurrent form, for generation one token at a time: a snapshot of its
        weights, to ``rebuild()`` after they change. See ``Recurrent``."""
        return Recurrent(self)

    @classmethod
    def _load(
        cls: type[_Model],
        sd: Mapping[str, torch.Tensor],
        dtype: torch.dtype,
        family: str,
        reads: dict[str, tuple[str, int]],
        marker: dict[str, int] | None = None,
    ) -> _Model:
        """A model holding ``sd``, else a TypeError/ValueError naming the argument or key.

        Its sizes are read from the tensors: ``vocab_size, n_embd`` from ``emb.weight``,
        ``n_layer`` from the ``blocks.N`` keys, the others from ``reads`` (size -> (2-D key,
        dimension)); ``marker`` (key -> rank) names more keys the family's checkpoints have.
        Built on the meta device (no init work, no memory), its keys and shapes compared with
        ``sd``'s, given storage on the tensors' device in ``dtype``, then loaded strictly.
        """
        if not isinstance(sd, Mapping):
            raise TypeError(f"sd must be a state dict (a mapping), got {type(sd).__name__}")
        for key, t in sd.items():
            check_tensor(f"sd[{key!r}]", t)
            if not t.is_floating_point():
                raise TypeError(f"sd[{key!r}] must be a floating point tensor, got {t.dtype}")
            if t.is_meta:
                raise ValueError(f"sd[{key!r}] is a meta tensor: it holds no values to load")
        needed = {"emb.weight": 2, **(marker or {}), **{k: 2 for k, _ in reads.values()}}
        for key, rank in needed.items():
            if key not in sd:
                raise ValueError(f"sd is not an {family} checkpoint: it has no {key!r}")
            if sd[key].dim() != rank:
                raise ValueError(
                    f"sd[{key!r}] must have {rank} dimensions, got shape {tuple(sd[key].shape)}"
                )
        layers = []
        for k in sd:
            if k.startswith("blocks."):
                index = k.split(".")[1]
                if not index.isdigit():
                    raise ValueError(f"sd key {k!r} is not blocks.<layer number>.*")
                layers.append(int(index))
        vocab_size, n_embd = sd["emb.weight"].shape
        sizes: dict[str, Any] = {"vocab_size": vocab_size, "n_embd": n_embd}
        sizes["n_layer"] = 1 + max(layers)
        sizes |= {name: sd[key].shape[dim] for name, (key, dim) in reads.items()}
        if not isinstance(dtype, torch.dtype):
            raise TypeError(
                f"dtype must be a torch.dtype (e.g. torch.float32), got {type(dtype).__name__} "
                f"{dtype!r}"
            )
        if dtype not in FLOATS:
            raise TypeError(f"dtype must be float16, bfloat16, float32 or float64, got {dtype}")
        try:
            with torch.device("meta"):
                model = cls(**sizes)
        except ValueError as e:
            read = ", ".join(f"{k}={v}" for k, v in sizes.items())
            raise ValueError(f"sd's tensors give sizes no {cls.__name__} has ({read}): {e}") from e
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        for key, shape in expected.items():
            if key not in sd:
                raise ValueError(f"sd has no {key!r} (a {cls.__name__} of these sizes needs it)")
            got = tuple(sd[key].shape)
            if got != shape:
                raise ValueError(
                    f"sd[{key!r}] must be {shape} (read from the other tensors), got {got}"
                )
        unexpected = [k for k in sd if k not in expected]
        if unexpected:
            raise ValueError(
                f"sd has keys a {cls.__name__} does not: {unexpected[:5]}"
                + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else "")
            )
        model = model.to_empty(device=sd["emb.weight"].device).to(dtype)
        model.load_state_dict(sd, strict=True)
        return model


class RWKV7(_RWKV[RWKV7BlockState]):
    """An RWKV-7 "Goose" (x070) language model, named like RWKV-LM's x070 checkpoints.

    Args:
        vocab_size, n_embd, n_layer: vocabulary, width, depth (the released 0.1B model:
            65536, 768, 12).
        head_size: ``N`` (64 in the released models); ``n_embd / head_size`` heads.
        dim_ffn: hidden width of the channel mixes, default ``4 * n_embd``.
        w_lora, a_lora, v_lora, g_lora: LoRA widths, default ``lora_widths(n_embd)``.

    Call ``model(idx)`` -> logits or ``model(idx, state)`` -> ``(logits, new_state)``, ``state``
    a list of ``RWKV7BlockState``: see ``forward``. A sequence run whole, in chunks or one token
    at a time gives the same logits to float rounding, not the same bits (docs/rwkv.md states
    the bound). For generation, ``model.recurrent()`` runs the same calls on a snapshot of the
    weights laid out for one-token steps. Under ``torch.autocast`` (bfloat16 or float16) the
    linear maps run in the autocast dtype, the WKV-7 recurrence and its state in float32.
    """

    _value_residual = True

    @sizes_checked
    def __init__(
        self,
        vocab_size: int,
        n_embd: int,
        n_layer: int,
        *,
        head_size: int = 64,
        dim_ffn: int | None = None,
        w_lora: int | None = None,
        a_lora: int | None = None,
        v_lora: int | None = None,
        g_lora: int | None = None,
    ) -> None:
        def per_layer(c: int) -> int:
            f = c * 4 if dim_ffn is None else check_size("dim_ffn", dim_ffn)
            loras = sum(lora_widths(c).values())  # the default widths, for an estimate
            return 4 * c * c + 2 * c * f + 2 * c * loras + 24 * c

        super().__init__(vocab_size, n_embd, n_layer, per_layer, lambda i: RWKV7Block(
            n_embd, i, n_layer, head_size=head_size, dim_ffn=dim_ffn,
            w_lora=w_lora, a_lora=a_lora, v_lora=v_lora, g_lora=g_lora,
        ))  # fmt: skip

    @classmethod
    def from_state_dict(
        cls, sd: Mapping[str, torch.Tensor], *, dtype: torch.dtype = torch.float32
    ) -> RWKV7:
        """An ``RWKV7`` holding an x070 state dict (e.g. ``torch.load("RWKV-x070-....pth")``).

        Every size is read from the tensors (heads from ``att.r_k`` ``(H, N)``, LoRA widths from
        ``w1 a1 v1 g1``). The model is in ``dtype`` (values converted), on the tensors'
        device; ``sd`` is not modified and shares no memory with the model.

        Raises:
            TypeError: ``sd`` not a mapping, a value not a dense floating point tensor (named
                by its key), ``dtype`` not a floating ``torch.dtype``.
            ValueError: a state dict that is not x070's, or a key missing, unexpected (e.g.
                the ``s_emb`` tensors of RWKV-LM's DeepEmbed variant) or of another shape
                than the other tensors imply, each named; meta tensors.
        """
        reads = {"head_size": ("blocks.0.att.r_k", 1), "dim_ffn": ("blocks.0.ffn.key.weight", 0)}
        reads |= {f"{m}_lora": (f"blocks.0.att.{m}1", 1) for m in "wavg"}
        return cls._load(sd, dtype, "RWKV-7 (x070)", reads)


class RWKV4(_RWKV[BlockState]):
    """An RWKV-4 language model, named like RWKV-LM's RWKV-4 checkpoints (Pile, Raven, World).

    Args:
        vocab_size, n_embd, n_layer: vocabulary, width, depth.
        dim_att, dim_ffn: widths of the time and channel mixes (default ``n_embd``,
            ``4 * n_embd``).

    Calls as ``RWKV7`` (``recurrent()`` too); the state is a list of ``BlockState``.
    """

    @sizes_checked
    def __init__(
        self,
        vocab_size: int,
        n_embd: int,
        n_layer: int,
        *,
        dim_att: int | None = None,
        dim_ffn: int | None = None,
    ) -> None:
        def per_layer(c: int) -> int:
            a = c if dim_att is None else check_size("dim_att", dim_att)
            f = c * 4 if dim_ffn is None else check_size("dim_ffn", dim_ffn)
            return 4 * c * a + 2 * c * f + c * c + 8 * c

        super().__init__(
            vocab_size, n_embd, n_layer, per_layer,
            lambda i: RWKVBlock(n_embd, dim_att, dim_ffn, layer_id=i, n_layer=n_layer),
        )  # fmt: skip

    @classmethod
    def from_state_dict(
        cls, sd: Mapping[str, torch.Tensor], *, dtype: torch.dtype = torch.float32
    ) -> RWKV4:
        """An ``RWKV4`` holding an RWKV-4 state dict; sizes read from the tensors (``dim_att``
        from ``att.key.weight``, ``dim_ffn`` from ``ffn.key.weight``). As
        ``RWKV7.from_state_dict`` otherwise, errors included.
        """
        reads = {f"dim_{k}": (f"blocks.0.{k}.key.weight", 0) for k in ("att", "ffn")}
        return cls._load(sd, dtype, "RWKV-4", reads, {"blocks.0.att.time_decay": 1})
