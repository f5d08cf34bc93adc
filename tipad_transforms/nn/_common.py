"""What every RWKV layer family shares: argument checks, token shift, the "no state" sentinel,
the eager one-token path's helpers and its row-major copies of the widening weights."""

from __future__ import annotations

import enum
import functools
import inspect
import os
from collections.abc import Callable
from operator import itemgetter
from typing import Any, ParamSpec, cast

import torch
from torch import nn

from .._checks import check_float
from .._compat.torch import global_module_hooks, jit_tracing, module_hooks, tensor_version
from .._tracing import eager


class Stateless(enum.Enum):
    """The default of a layer's ``state`` argument: "no state given".

    ``m(x)`` returns ``y`` alone; ``m(x, None)`` starts from the zero state and returns
    ``(y, new_state)`` (RWKV users' habit: ``y, state = block(x, None)``). ``None`` cannot be
    the default because it already means "start from zeros". Its repr, ``<no state>``, is what
    ``help()`` and ``inspect.signature`` show as the default.
    """

    STATELESS = enum.auto()

    def __repr__(self) -> str:
        return "<no state>"


STATELESS = Stateless.STATELESS

# The largest size a layer or model takes: the kernels index with 32-bit ints, and beyond it
# torch's own size arithmetic overflows before any memory is asked for.
MAX_SIZE = 2**31 - 1


def check_size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if value > MAX_SIZE:
        raise ValueError(f"{name} must be at most 2**31 - 1, got {value!r}")
    return value


def _physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_fits(what: str, numbers: int) -> None:
    """A ValueError naming ``what`` (the call and its sizes) when a model of ``numbers``
    float32 parameters would not fit in this machine's memory, built on the CPU.

    Without it, a depth typed with a few zeros too many builds layer after layer until the
    system kills the process; sizes whose single tensors are too large fail at once anyway
    (``sizes_checked``). Other devices (meta, cuda) are left to their allocators."""
    if torch.get_default_device().type != "cpu":
        return
    memory = _physical_memory()
    if memory is not None and 4 * numbers > memory:
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
    """Decorate a layer's or model's ``__init__``: sizes whose tensors cannot be allocated
    (too large for this machine's memory) give a ValueError naming those sizes, not the
    allocator's RuntimeError."""

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


def check_dense(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is a dense (strided, not nested) tensor, else a TypeError naming it: the
    layers' ops read strided memory, and sparse or nested tensors fail deep inside them."""
    if t.is_nested:
        raise TypeError(f"{name} must be a dense tensor, got a nested tensor")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    return t


def check_x(x: object, n_embd: int, like: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` if it is a dense float ``(B, T, n_embd)`` tensor, else a TypeError/ValueError
    naming it; with ``like`` (a parameter of the module), also on its device and, outside
    ``torch.autocast``, of its dtype."""
    x = check_dense("x", check_float("x", x))
    if x.dim() != 3 or x.shape[2] != n_embd:
        raise ValueError(f"x must be (B, T, n_embd={n_embd}), got shape {tuple(x.shape)}")
    if like is not None:
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


def check_state_args(batch_size: object, device: object, dtype: object) -> None:
    """``init_state``'s arguments: TypeError/ValueError naming the one that is wrong."""
    check_size("batch_size", batch_size)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype or None, got {dtype!r}")
    if device is not None:
        if isinstance(device, bool) or not isinstance(device, str | torch.device | int):
            raise TypeError(f"device must be a torch.device, a str, an int or None, got {device!r}")
        try:
            torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device {device!r} is not a device: {e}") from e


def check_part(name: str, t: object, shape: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_dense(name, t)
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
    if global_module_hooks() or jit_tracing():
        return False
    for m in modules:
        if module_hooks(m) or "forward" in m.__dict__:
            return False
    return True


def fast_step(x: torch.Tensor, block: nn.Module, mixers: tuple[tuple[nn.Module, type], ...],
              norms: tuple[nn.Module | None, ...]) -> bool:  # fmt: skip
    """Whether a stateful call of ``block`` on ``x`` may take the eager inference path.

    That path calls each mixer's step and ``F.linear`` / ``F.layer_norm`` with the children's
    own weights, skipping ``nn.Module.__call__`` (a one-token step is all fixed cost). It may
    when nothing needs a graph (``_tracing.eager``: grad off, or no input or parameter
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


# The eager path's copies of widening weights. A one-row product (a one-token step) reads a
# linear map's weight (out, in) fastest as the row-major (in, out) transpose when out > in:
# BLAS then streams rows of the output width, where F.linear on the row-major weight computes
# out short dot products (BlinkDL's `rwkv` package stores every weight transposed for this).
# The parameters stay row-major (out, in), as nn.Linear's are; the step keeps a transposed copy
# in the dict of the module that uses it, under ROWS_PREFIX + the weight's name.
ROWS_PREFIX = "_rows_"


inplace_version = tensor_version  # see _compat.torch.tensor_version


def widening(m: nn.Module) -> bool:
    """Whether ``m`` is a plain ``nn.Linear`` whose step reads a row-major copy (out > in)."""
    return type(m) is nn.Linear and m.out_features > m.in_features


def rows_weight(owner: nn.Module, name: str, weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``(out, in)`` as a row-major ``(in, out)`` copy, kept in ``owner``'s dict.

    The copy is made again when ``weight`` is another tensor or has another storage, layout,
    dtype or in-place version: an optimizer step, ``load_state_dict``, ``.to()`` or an edit
    under ``torch.no_grad()`` shows at the next step. It costs the weight's memory once more
    while it is kept; ``forget_rows`` drops it (the owners do when a call records a graph,
    and on ``.to()``), and pickles and deep copies leave it out.
    """
    key = ROWS_PREFIX + name
    stamp = (
        weight.data_ptr(),
        inplace_version(weight),
        weight.shape,
        weight.stride(),
        weight.dtype,
    )
    entry = owner.__dict__.get(key)
    if entry is not None and entry[0] is weight and entry[1] == stamp:
        return entry[2]
    owner.__dict__.pop(key, None)  # the old copy's memory first
    rows = weight.detach().t().contiguous()
    owner.__dict__[key] = (weight, stamp, rows)
    return rows


def forget_rows(owner: nn.Module) -> None:
    """Drop the row-major copies ``owner`` keeps (``rows_weight``). Nothing while compiling:
    a compiled graph never reads them, and Dynamo need not trace a module dict's edits."""
    if torch.compiler.is_compiling():
        return
    for key in [k for k in owner.__dict__ if k.startswith(ROWS_PREFIX)]:
        del owner.__dict__[key]


def recording(*modules: nn.Module) -> bool:
    """Whether a call of ``modules`` now would record a graph for their parameters: grad
    mode on and one of them requires grad (training)."""
    return torch.is_grad_enabled() and any(p.requires_grad for m in modules for p in m.parameters())


def step_linear(owner: nn.Module, name: str, x: torch.Tensor) -> torch.Tensor:
    """``owner.<name>(x)`` on the eager path (``owner.<name>`` a plain ``nn.Linear`` without
    hooks): ``F.linear``, on the row-major copy of a widening weight."""
    m = cast(nn.Module, owner._modules[name])
    weight, bias = read(WEIGHT_BIAS, m)
    if widening(m):
        weight = rows_weight(owner, name, weight).t()
    return torch.nn.functional.linear(x, weight, bias)


class KeepsRows(nn.Module):
    """A module whose eager step keeps row-major copies (``rows_weight``): they are dropped on
    ``.to()`` / ``.cuda()`` / ``.half()`` (which replace the storage anyway) and left out of
    pickles and deep copies."""

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        forget_rows(self)
        return super()._apply(fn, recurse)

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = super().__getstate__()
        return {k: v for k, v in state.items() if not k.startswith(ROWS_PREFIX)}


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
