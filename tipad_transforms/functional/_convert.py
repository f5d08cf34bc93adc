"""User values -> the op's canonical tensors: fills, texture banks, per-sample integers.

Fills are converted as torchvision's ``pad`` converts them (``functional.pad``'s docstring): a
scalar as ``torch.nn.functional.pad(..., value=float(fill))`` (out of range: an error), a
per-channel sequence as ``torch.tensor(fill).to(dtype)`` (a wrapping cast); but a scalar integer
on an integer image exactly, not through float64.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as nnF
from torch import Tensor
from torchvision.transforms.v2 import functional as tvF

from .._checks import INT64_MAX, check_dense, is_int
from .._tracing import tracing
from .._value_cache import ValueCache, constant, normal_tensors

__all__ = ["Fill", "as_bank", "fill_values", "is_numbers", "per_sample", "plain", "scale_texture",
           "texture_bank"]  # fmt: skip

Fill = int | float | bool | Sequence[int | float | bool] | None

_NUMBER = (int, float, bool)
# Recent textures' conversions, checked against the texture's bits on every use.
_BANKS: ValueCache[Tensor] = ValueCache(16)


def _scalar(value: int | float | bool, dtype: torch.dtype, name: str) -> Tensor:
    """One fill value converted as torchvision's constant padding converts it."""
    if is_int(value) and not dtype.is_floating_point and dtype != torch.bool:
        ints = torch.iinfo(dtype)
        if ints.min <= value <= ints.max:  # exact: no detour through float64
            return torch.empty(1, dtype=dtype).fill_(value)
    else:
        try:
            # torchvision pads with F.pad(..., value=float(fill)): the same op (its range check
            # runs on non-empty inputs only).
            return nnF.pad(torch.zeros(1, 1, 1, dtype=dtype), (1, 0), value=float(value))[0, 0, :1]
        except RuntimeError:
            pass
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    raise ValueError(
        f"{name}={value!r} cannot be converted to {dtype} (it holds [{info.min}, {info.max}])"
    )


def fill_values(fill: Any, dtype: torch.dtype, channels: int, name: str = "fill") -> Tensor:
    """``fill`` (``None``: 0; a number, or 1 or ``channels`` values; a tensor of those, cast
    with ``.to(dtype)``) as a ``(channels,)`` CPU tensor of ``dtype``; errors name ``name``."""
    if fill is None:
        fill = 0
    if isinstance(fill, Tensor):  # a typed value (beyond torchvision): taken as it is
        check_dense(fill, name)
        if fill.numel() not in (1, channels) or fill.is_complex():
            raise ValueError(
                f"{name} must hold 1 or {channels} (channel) real values, got {tuple(fill.shape)}"
            )
        return fill.detach().reshape(-1).to("cpu", dtype).expand(channels).contiguous()
    if isinstance(fill, Sequence) and not isinstance(fill, str) and len(fill) == 1:
        fill = fill[0]
    if isinstance(fill, _NUMBER) or is_numbers(fill):
        values = (_bits(fill),) if isinstance(fill, _NUMBER) else tuple(map(_bits, fill))
        key = ("fill", values, type(fill), dtype, channels, name)
        return constant(key, lambda: _fill_tensor(fill, dtype, channels, name))
    with normal_tensors():  # as the cached ones: never an inference tensor
        return _fill_tensor(fill, dtype, channels, name)


def _bits(value: int | float | bool) -> tuple[type, object]:
    """A cache key for one fill value: its type and, for a float, its bits (``0.0 == -0.0``
    and ``hash(0.0) == hash(-0.0)``, but they fill different borders; a NaN never equals
    itself, so as a plain value it would never be found again)."""
    if isinstance(value, float):
        return float, struct.pack("<d", value)
    return type(value), value


def _fill_tensor(fill: Any, dtype: torch.dtype, channels: int, name: str) -> Tensor:
    if isinstance(fill, _NUMBER):
        values = _scalar(fill, dtype, name).expand(channels)
    elif is_numbers(fill):
        if len(fill) != channels:
            raise ValueError(f"{name} must have 1 or {channels} (channel) values, got {len(fill)}")
        try:
            # torchvision's vector fill: the default dtype first, then a plain cast (wrapping).
            values = torch.tensor(list(fill)).to(dtype)
        except (RuntimeError, OverflowError) as exc:
            raise ValueError(
                f"{name}={list(fill)!r} cannot be converted to {dtype}: {exc}"
            ) from None
    else:
        raise TypeError(
            f"{name} must be a number, a sequence of numbers or None, got {type(fill).__name__}"
        )
    return values.contiguous()


def is_numbers(value: Any) -> bool:
    """A sequence (not a str) of Python numbers (bools included)."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(v, _NUMBER) for v in value)
    )


def as_bank(texture: Any) -> Tensor:
    """A user texture as a ``(K, C, th, tw)`` view, or TypeError/ValueError naming ``texture``."""
    if not isinstance(texture, Tensor):
        raise TypeError(f"texture must be a torch.Tensor, got {type(texture).__name__}")
    check_dense(texture, "texture")
    if texture.is_complex():
        raise TypeError(f"texture must be real, got dtype {texture.dtype}")
    if texture.dim() not in (2, 3, 4):
        raise ValueError(
            f"texture must have shape (th, tw), (C, th, tw) or (K, C, th, tw), "
            f"got {tuple(texture.shape)}"
        )
    bank = texture if texture.dim() == 4 else texture[(None,) * (4 - texture.dim())]
    if bank.numel() == 0:
        raise ValueError(f"texture must not be empty, got shape {tuple(texture.shape)}")
    return plain(bank)


def plain(t: Tensor) -> Tensor:
    """``t`` as a plain ``torch.Tensor`` (a tv_tensor or another subclass unwrapped), except
    under a tracer (``tracing()``): a FakeTensor or FunctionalTensor stays what it is, since its
    unwrapped view would be a tensor the tracer never saw (``torch.export`` lifts it as a fake
    constant and fails). A plain tensor is returned as it is (Dynamo cannot trace
    ``as_subclass(torch.Tensor)`` on one)."""
    if type(t) is Tensor or tracing():
        return t
    return t.as_subclass(Tensor)


def texture_bank(
    texture: Any, dtype: torch.dtype, device: torch.device, channels: int, image_name: str = "inpt"
) -> Tensor:
    """User texture -> ``(K, Ct, th, tw)`` of ``dtype`` on ``device``, ``Ct`` in {1, channels}.

    Float textures for integer images hold ``[0, 1]`` and are scaled as torchvision's
    ``to_dtype(scale=True)``; bool images take 0/1 textures. Conversions are cached, checked
    against the texture's bits (an in-place change is seen), unless the texture needs gradients.
    """
    bank = as_bank(texture)
    ct = bank.shape[1]
    if ct not in (1, channels):
        raise ValueError(
            f"texture has {ct} channels; the image ({image_name}) has {channels}: give 1 "
            f"(broadcast) or {channels} texture channels"
        )
    if bank.dtype == dtype and bank.device == device:
        return bank
    if bank.requires_grad or tracing():
        return _convert_bank(bank, dtype, device, image_name)
    return _BANKS.get(bank, (dtype, device), lambda: _convert_bank(bank, dtype, device, image_name))


def _convert_bank(
    bank: Tensor, dtype: torch.dtype, device: torch.device, image_name: str
) -> Tensor:
    bank = bank.to(device)
    if bank.dtype == dtype:
        return bank
    if dtype == torch.bool or bank.dtype == torch.bool:
        if dtype == torch.bool and not tracing() and not bool(((bank == 0) | (bank == 1)).all()):
            raise ValueError(f"texture for a bool image ({image_name}) must be 0/1 or False/True")
        return bank.to(dtype)
    if bank.is_floating_point() and not dtype.is_floating_point and not tracing():
        # torchvision's convention: float images hold [0, 1], integer images the dtype's range.
        # (A data-dependent check: a traced graph cannot raise it, and the values scale as
        # they are.)
        lo, hi = torch.aminmax(bank.detach())
        if not (float(lo) >= 0.0 and float(hi) <= 1.0):  # NaN fails too
            raise ValueError(
                f"a float texture for a {dtype} image must hold values in [0, 1] (they are "
                f"scaled to the dtype's range), got [{float(lo):g}, {float(hi):g}]"
            )
    return scale_texture(bank, dtype)


_WIDE_UNSIGNED = (torch.uint32, torch.uint64)


def scale_texture(bank: Tensor, dtype: torch.dtype) -> Tensor:
    """torchvision's ``to_dtype(scale=True)`` for a (non-bool) texture, minus its failures.

    Beyond torchvision, whose scaling gives no range to ``uint32`` and ``uint64`` (it turns
    floats into 0 and 1 and leaves integers unscaled): a float texture scales to their full
    range as to ``int32``'s, and their values scale to a float image by ``1 / max``; between
    them and other integer dtypes no scaling is defined (TypeError naming the texture).
    """
    if bank.dtype == dtype:
        return bank
    wide = bank.dtype in _WIDE_UNSIGNED or dtype in _WIDE_UNSIGNED
    if wide and not bank.is_floating_point() and not dtype.is_floating_point:
        raise TypeError(
            f"texture of dtype {bank.dtype} cannot be scaled to a {dtype} image (torchvision "
            "defines no integer scaling for uint32 and uint64): give the texture as floats in "
            "[0, 1] or in the image's dtype"
        )
    if wide and not bank.is_floating_point():
        return (bank.double() * (1.0 / torch.iinfo(bank.dtype).max)).to(dtype)
    if bank.is_floating_point() and not dtype.is_floating_point:
        if dtype in (torch.int32, torch.int64, *_WIDE_UNSIGNED):
            # torchvision refuses these; scale the same way (v * (max + 1 - 1e-3), truncated)
            # in float64, where 1.0 may round up to max + 1: saturate it rather than wrap.
            info = torch.iinfo(dtype)
            scaled = (bank.double() * (info.max + 1.0 - 1e-3)).floor()
            top = scaled >= float(info.max)
            # torch.where: masked_fill has no uint32/uint64 kernel.
            return torch.where(
                top, torch.tensor(info.max, dtype=dtype), scaled.masked_fill(top, 0).to(dtype)
            )
        if bank.dtype in (torch.float16, torch.bfloat16):
            # In half precision max + 1 - 1e-3 rounds to max + 1, so torchvision would turn 1.0
            # into 0 (uint8) or the minimum (int8, int16): scale in float32 instead.
            bank = bank.float()
    elif dtype in (torch.float16, torch.bfloat16) and not bank.is_floating_point():
        # An int32/int64 texture's maximum overflows half precision before the division
        # (max -> inf): scale in float32, then round once.
        return tvF.to_dtype(bank, torch.float32, scale=True).to(dtype)
    return tvF.to_dtype(bank, dtype, scale=True)


def per_sample(value: Any, lead: tuple[int, ...], last: tuple[int, ...], name: str) -> Tensor:
    """``value`` (int(s) or an int tensor of ``lead_prefix + last``) as ``(N, *last)`` int64."""
    if isinstance(value, Tensor):
        t = check_dense(value, name).detach()
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    elif is_int(value):
        t = torch.tensor(_in_int64(value, name))
    elif isinstance(value, Sequence) and not isinstance(value, str) and all(map(is_int, value)):
        t = torch.tensor([_in_int64(v, name) for v in value], dtype=torch.long)
    else:
        raise TypeError(
            f"{name} must be an int, a sequence of ints or an int tensor, got {value!r}"
        )
    try:
        t = (
            t.to(torch.int64).broadcast_to((*lead, *last))
            if t.dim() <= len(lead) + len(last)
            else t
        )
        if tuple(t.shape) != (*lead, *last):
            raise RuntimeError
    except RuntimeError:
        raise ValueError(
            f"{name} must broadcast to {(*lead, *last)} (one per sample of the leading dims), "
            f"got shape {tuple(value.shape) if isinstance(value, torch.Tensor) else value!r}"
        ) from None
    return t.reshape(math.prod(lead), *last)


def _in_int64(value: int, name: str) -> int:
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{name} must fit in 64 bits, got {value}")
    return value
