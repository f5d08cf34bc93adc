"""What the RWKV layers and models share: argument checks, the token shift, the "no state"
sentinel and the base classes of the stateful layers."""

from __future__ import annotations

import enum
import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar, overload

import torch
from torch import nn

from .._checks import INT32_MAX, check_float, check_tensor


class Stateless(enum.Enum):
    """The default of a ``state`` argument, "no state given" (``None`` already means "the zero
    state"); its repr, ``<no state>``, is what ``help()`` shows as the default."""

    STATELESS = enum.auto()

    def __repr__(self) -> str:
        return "<no state>"


STATELESS = Stateless.STATELESS


def check_size(name: str, value: object) -> int:
    """``value`` if it is an int in ``[1, 2**31 - 1]``, else a TypeError/ValueError naming it:
    the kernels index with 32-bit ints, and beyond it torch's size arithmetic overflows."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if value > INT32_MAX:
        raise ValueError(f"{name} must be at most 2**31 - 1, got {value!r}")
    return value


def check_fits(what: str, numbers: int) -> None:
    """A ValueError naming ``what`` when ``numbers`` float32 parameters would not fit in this
    machine's memory, built on the CPU: else a depth with a few zeros too many builds layer
    after layer until the system kills the process (one tensor too large already fails at
    once, see ``sizes_checked``). Other devices are left to their allocators."""
    if torch.get_default_device().type != "cpu":
        return
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return  # the platform does not say
    if 4 * numbers > memory:
        raise ValueError(
            f"{what} is too large: about {numbers:,} parameters ({4 * numbers / 2**30:,.0f} GiB "
            f"as float32), more than this machine's {memory / 2**30:,.0f} GiB"
        )


_P = ParamSpec("_P")


def allocation_failure(e: BaseException) -> bool:
    """Whether ``e`` is torch failing to allocate (out of memory, or a storage size that
    overflows), as opposed to any other error."""
    if isinstance(e, MemoryError | torch.cuda.OutOfMemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("can't allocate memory" in text or "overflow" in text)


def sizes_checked(init: Callable[_P, None]) -> Callable[_P, None]:
    """Decorate an ``__init__``: sizes whose tensors cannot be allocated give a ValueError
    naming them, not the allocator's RuntimeError."""

    @functools.wraps(init)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            init(*args, **kwargs)
        except (RuntimeError, MemoryError) as e:
            if not allocation_failure(e):
                raise
            bound = inspect.signature(init).bind(*args, **kwargs).arguments
            self, *_ = bound.values()
            sizes = ", ".join(
                f"{k}={v!r}" for k, v in list(bound.items())[1:] if isinstance(v, int)
            )
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(
                f"{type(self).__name__}({sizes}) is too large: its tensors cannot be "
                f"allocated ({reason})"
            ) from e

    return wrapper


def ratios(layer_id: int, n_layer: int) -> tuple[float, float]:
    """RWKV-LM's depth ratios ``(r01, r1a0)``: ``layer_id / (n_layer - 1)`` (0 -> 1 over the
    stack) and ``1 - layer_id / n_layer`` (1 -> ~0). RWKV-LM divides by zero for one layer;
    a lone layer counts as a first one (``r01 = 0``)."""
    return (layer_id / (n_layer - 1) if n_layer > 1 else 0.0), 1.0 - layer_id / n_layer


def channel_ramp(n_embd: int) -> torch.Tensor:
    """``ddd[i] = i / n_embd`` as ``(1, 1, n_embd)`` float64: the base of the token-mix inits."""
    return (torch.arange(n_embd, dtype=torch.float64) / n_embd).view(1, 1, n_embd)


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a recurrence's state for inputs of ``dtype`` (half precision loses it)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_x(x: object, n_embd: int, like: torch.Tensor) -> torch.Tensor:
    """``x`` if it is a dense float ``(B, T, n_embd)`` tensor on ``like``'s device and, outside
    ``torch.autocast``, of its dtype; else a TypeError/ValueError naming it."""
    x = check_float("x", x)
    if x.dim() != 3 or x.shape[2] != n_embd:
        raise ValueError(f"x must be (B, T, n_embd={n_embd}), got shape {tuple(x.shape)}")
    if x.device != like.device:
        raise ValueError(
            f"x is on {x.device}, the module's parameters on {like.device}: use one device"
        )
    if x.dtype != like.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"x is {x.dtype}, the module's parameters {like.dtype}: convert one "
            "(module.to(dtype)), or run under torch.autocast"
        )
    return x


def check_part(name: str, t: object, shape: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    t = check_tensor(name, t)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating point tensor, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(
            f"{name} must be {shape} for x of shape {tuple(x.shape)}, got {tuple(t.shape)} "
            "(a state from another batch size or layer width?)"
        )
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device}, x on {x.device}")
    return t


def check_idx(idx: object, vocab_size: int, device: torch.device) -> torch.Tensor:
    """``idx`` if it is a dense ``(B, T)`` int64/int32 tensor of ids in ``[0, vocab_size)`` on
    ``device``, else a TypeError/ValueError naming it."""
    idx = check_tensor("idx", idx)
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"idx must be int64 (or int32) token ids, got {idx.dtype}")
    if idx.dim() != 2:
        raise ValueError(f"idx must be (B, T), got shape {tuple(idx.shape)}")
    if idx.device != device:
        raise ValueError(f"idx is on {idx.device}, the model on {device}: use one device")
    # The range reads values on the host: skipped while compiling (a graph break otherwise;
    # the embedding's own index check remains) and for meta tensors (no values).
    if idx.numel() and not idx.is_meta and not torch.compiler.is_compiling():
        low, high = (int(v) for v in torch.aminmax(idx))
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"idx must hold token ids in [0, vocab_size={vocab_size}), got values "
                f"in [{low}, {high}]"
            )
    return idx


def check_states(
    state: object, n_layer: int, x: torch.Tensor, init: Callable[..., list[Any]]
) -> list[Any]:
    """A model's ``state`` as a list of ``n_layer`` block states (``None``: ``init``'s zero
    state for ``x``), else a TypeError/ValueError naming it. The blocks check their parts."""
    if state is None:
        return init(x.shape[0], device=x.device, dtype=x.dtype)
    if not isinstance(state, Sequence) or isinstance(state, torch.Tensor | str | bytes):
        raise TypeError(
            f"state must be a list of {n_layer} block states, got {type(state).__name__}"
        )
    if len(state) != n_layer:
        raise ValueError(f"state must hold one block state per layer ({n_layer}), got {len(state)}")
    return list(state)


def shifted(x: torch.Tensor, state: Any) -> torch.Tensor:
    """``x`` one step later in time: ``xx[:, t] = x[:, t-1]``, ``xx[:, 0] = state.shift`` (zeros
    for a ``None`` state)."""
    # unsqueeze rather than an index, and no .to() to the same dtype: a one-token step is all
    # fixed cost, and each of those is a dispatch more.
    if state is None:
        first = x.new_zeros(x.shape[0], 1, x.shape[2])
    else:
        prev = state.shift
        first = (prev if prev.dtype == x.dtype else prev.to(x.dtype)).unsqueeze(1)
    if x.shape[1] == 1:  # a one-token step: the previous token itself, no copy
        return first
    return torch.cat([first, x[:, :-1]], dim=1)


def last(x: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """The shift state after ``x``: its last token, or ``prev`` for an empty sequence."""
    return x.select(1, -1) if x.shape[1] else prev


S = TypeVar("S", bound=tuple)


class Stateful(nn.Module, Generic[S]):
    """The base of every RWKV layer: its width, position and state.

    A subclass names its state's ``NamedTuple`` (``State``), the parameter whose device and
    dtype its state and input take (``_like_name``), the attributes its repr shows
    (``_repr``) and the shape of each state tensor
    (``_state_shapes``; ``None`` for a part a child checks). Its math is a module-level
    function ``_math(m, x, ..., state)`` (``state`` ``None``: no state) reading ``m``'s
    parameters and children by name: the module passes itself, the recurrent snapshot
    (``nn/_recurrent.py``) the same names (``_recurrent``) as plain tensors and callables.
    """

    State: ClassVar[type]
    _math: ClassVar[Callable[..., Any]]
    _recurrent: ClassVar[tuple[str, ...]]
    _like_name: ClassVar[str]
    _repr: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_embd: int, layer_id: int, n_layer: int) -> None:
        super().__init__()
        self.n_embd = check_size("n_embd", n_embd)
        check_size("n_layer", n_layer)
        if (
            isinstance(layer_id, bool)
            or not isinstance(layer_id, int)
            or not 0 <= layer_id < n_layer
        ):
            raise ValueError(f"layer_id must be an int in [0, n_layer={n_layer}), got {layer_id!r}")
        self.layer_id = layer_id

    def _like(self) -> torch.Tensor:
        return getattr(self, self._like_name)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in self._repr)

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...] | None, ...]:
        raise NotImplementedError

    def _zeros(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> S:
        """The zero state: the shift in ``dtype``, the other parts in ``state_dtype(dtype)``."""
        shift, *rest = self._state_shapes(batch_size)
        return self.State(
            torch.zeros(shift, device=device, dtype=dtype),  # type: ignore[arg-type]
            *(torch.zeros(s, device=device, dtype=state_dtype(dtype)) for s in rest),  # type: ignore[arg-type]
        )

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> S:
        """The state before the first token, for ``batch_size`` sequences: zero shifts in
        ``dtype``, the WKV start in float32 (float64 when ``dtype`` is float64). ``device`` and
        ``dtype`` default to the module's parameters'. Raises TypeError/ValueError naming
        ``batch_size``, ``device`` or ``dtype``."""
        check_size("batch_size", batch_size)
        if dtype is not None and (
            not isinstance(dtype, torch.dtype) or not dtype.is_floating_point
        ):
            raise TypeError(f"dtype must be a floating torch.dtype or None, got {dtype!r}")
        if device is not None:
            if isinstance(device, bool) or not isinstance(device, str | torch.device | int):
                raise TypeError(
                    f"device must be a torch.device, a str, an int or None, got {device!r}"
                )
            try:
                torch.device(device)
            except RuntimeError as e:
                raise ValueError(f"device {device!r} is not a device: {e}") from e
        like = self._like()
        return self._zeros(
            batch_size, like.device if device is None else device,
            like.dtype if dtype is None else dtype,
        )  # fmt: skip

    def _check_state(self, state: object, x: torch.Tensor) -> S:
        """``state`` as this layer's ``State`` for ``x``, else a TypeError/ValueError naming it
        (``state``, ``state.shift``, ``state.wkv``)."""
        fields = self.State._fields  # type: ignore[attr-defined]
        if not isinstance(state, tuple) or len(state) != len(fields):
            raise TypeError(f"state must be a {self.State.__name__}, got {type(state).__name__}")
        shapes = self._state_shapes(x.shape[0])
        checked = [
            t if shape is None else check_part(f"state.{name}", t, shape, x)
            for name, t, shape in zip(fields, state, shapes, strict=True)
        ]
        result: S = self.State(*checked)
        wkv = getattr(result, "wkv", None)
        if wkv is not None and wkv.dtype != state_dtype(x.dtype):
            raise TypeError(
                f"state.wkv must be {state_dtype(x.dtype)} for {x.dtype} x, got {wkv.dtype}"
            )
        return result

    def _begin(self, x: object, state: object) -> tuple[torch.Tensor, S | None]:
        """The checked ``x`` and the state to start from (``None``: no state given)."""
        x = check_x(x, self.n_embd, self._like())
        if state is STATELESS:
            return x, None
        if state is None:
            return x, self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        return x, self._check_state(state, x)


class Block(Stateful[S]):
    """A block: ``ln1``, ``ln2``, ``ln0`` (layer 0's layer norm of the embeddings; ``None`` on
    the others), ``att``, ``ffn`` in the checkpoints' order; its state is its mixers'."""

    _recurrent = ("ln0", "ln1", "ln2", "att", "ffn")
    att: Any
    ffn: Any

    def _add_children(self, att: nn.Module, ffn: nn.Module) -> None:
        self.ln1 = nn.LayerNorm(self.n_embd)
        self.ln2 = nn.LayerNorm(self.n_embd)
        self.ln0 = nn.LayerNorm(self.n_embd) if self.layer_id == 0 else None
        self.att = att
        self.ffn = ffn

    def _like(self) -> torch.Tensor:
        return self.att._like()

    def _zeros(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> S:
        return self.State(
            self.att.init_state(batch_size, device=device, dtype=dtype),
            self.ffn.init_state(batch_size, device=device, dtype=dtype),
        )

    def _state_shapes(self, batch_size: int) -> tuple[None, None]:
        return None, None  # the mixers check their parts


class Layer(Stateful[S]):
    """A layer called as ``m(x)`` -> ``y`` or ``m(x, state)`` -> ``(y, new_state)``."""

    @overload
    def forward(self, x: torch.Tensor) -> torch.Tensor: ...
    @overload
    def forward(self, x: torch.Tensor, state: S | None) -> tuple[torch.Tensor, S]: ...

    def forward(
        self, x: torch.Tensor, state: S | Stateless | None = STATELESS
    ) -> torch.Tensor | tuple[torch.Tensor, S]:
        """``x`` ``(B, T, n_embd)`` -> ``y`` of the same shape and dtype; with ``state`` (this
        layer's state for batch size ``B``; ``None``: the zero state) the sequence continues
        from it and ``(y, new_state)`` is returned.

        Floating ``x`` in the parameters' dtype (any dtype under ``torch.autocast``) on their
        device; the WKV recurrence and its state are float32 (float64 for float64 ``x``).
        Raises ``ValueError`` naming ``x``, ``state.shift`` or ``state.wkv`` for a wrong
        shape, batch size or device, ``TypeError`` naming ``x`` or ``state`` for a wrong type
        or dtype.
        """
        x, s = self._begin(x, state)
        y, new_state = self._math(self, x, s)
        return y if s is None else (y, new_state)


class ValueLayer(Stateful[S]):
    """An RWKV-7 layer with the value residual: ``m(x, v_first)`` -> ``(y, v_first)``,
    ``m(x, v_first, state)`` -> ``(y, v_first, new_state)``."""

    def _check_v_first(self, v_first: object, x: torch.Tensor) -> torch.Tensor | None:
        return v_first  # type: ignore[return-value]  # a block's time mix checks it

    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None, state: S | None
    ) -> tuple[torch.Tensor, torch.Tensor, S]: ...

    def forward(
        self,
        x: torch.Tensor,
        v_first: torch.Tensor | None = None,
        state: S | Stateless | None = STATELESS,
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, S]:
        """Run ``x`` ``(B, T, n_embd)``; returns ``(y, v_first)``, or ``(y, v_first,
        new_state)`` when ``state`` is given (``None``: the zero state).

        ``y`` has ``x``'s shape and dtype; ``v_first`` ``(B, T, n_embd)`` is layer 0's ``v``
        (which layer 0 makes, ignoring the one passed in) and required by every later layer.
        Floating ``x`` in the parameters' dtype (any dtype under ``torch.autocast``) on their
        device; the WKV-7 state is float32 (float64 for float64 ``x``). Raises ``ValueError``
        naming ``x``, ``v_first`` or ``state`` for a wrong shape, batch size or device,
        ``TypeError`` for a wrong type or dtype.
        """
        x, s = self._begin(x, state)
        y, v_first, new_state = self._math(self, x, self._check_v_first(v_first, x), s)
        return (y, v_first) if s is None else (y, v_first, new_state)
