"""Per-type dispatch of the functionals: one registry, torchvision's rules.

Each functional looks its kernel up by the input's type, walking its MRO as
``torchvision.transforms.v2.functional`` does: plain tensors, ``Image`` and ``Video`` go to the
padding op (tv_tensors come back as their type), PIL images to a PIL kernel (same mode back),
``Mask`` gets a constant border, ``BoundingBoxes`` and ``KeyPoints`` are shifted (``canvas_size``
grown), any other tv_tensor passes through; other objects raise TypeError. A new input type is
one ``register_kernel`` call per functional.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from torch import Tensor
from torchvision import tv_tensors

__all__ = ["get_kernel", "register_kernel"]

K = TypeVar("K", bound=Callable[..., Any])

_REGISTRY: dict[Callable[..., Any], dict[type, Callable[..., Any]]] = {}


def _passthrough(inpt: Any, *args: Any, **kwargs: Any) -> Any:
    return inpt


def _tv_tensor_wrapper(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``kernel`` on the plain tensor of a tv_tensor; re-wrap its result as the input type."""

    @functools.wraps(kernel)
    def wrapper(inpt: tv_tensors.TVTensor, *args: Any, **kwargs: Any) -> Any:
        return tv_tensors.wrap(kernel(inpt.as_subclass(Tensor), *args, **kwargs), like=inpt)

    return wrapper


def register_kernel(
    functional: Callable[..., Any], input_type: type, *, wrap: bool | None = None
) -> Callable[[K], K]:
    """Register ``kernel`` as what ``functional`` runs for inputs of ``input_type``.

    Use as a decorator: ``@register_kernel(F.brick_pad, MyTVTensor)``. The kernel takes the
    input first, then the functional's own arguments (it may ignore those it does not need:
    a mask kernel ignores the texture). For a ``tv_tensors.TVTensor`` subclass the kernel
    receives a plain tensor and its result is wrapped back into the input's type (metadata
    such as ``canvas_size`` kept), unless ``wrap=False``, for kernels that handle the
    tv_tensor themselves (boxes that must update their ``canvas_size``).

    Raises:
        TypeError: ``functional`` is not callable, ``input_type`` is not a class, ``wrap`` is
            not a bool or None.
    """
    if not callable(functional):
        raise TypeError(
            f"functional must be a functional such as tipad_transforms.functional.pad, got "
            f"{type(functional).__name__} {functional!r}"
        )
    if not isinstance(input_type, type):
        raise TypeError(f"input_type must be a class, got {type(input_type).__name__}")
    if wrap is not None and not isinstance(wrap, bool):
        raise TypeError(f"wrap must be a bool or None, got {type(wrap).__name__}")
    if wrap is None:
        wrap = issubclass(input_type, tv_tensors.TVTensor)

    def decorator(kernel: K) -> K:
        entry = _tv_tensor_wrapper(kernel) if wrap else kernel
        _REGISTRY.setdefault(functional, {})[input_type] = entry
        return kernel

    return decorator


def get_kernel(functional: Callable[..., Any], input_type: type) -> Callable[..., Any]:
    """The kernel ``functional`` runs for ``input_type`` (torchvision's ``_get_kernel`` rules):
    the first class of its MRO with a kernel, up to ``TVTensor`` (a tv_tensor type without one
    passes through); TypeError for other types without one."""
    registry = _REGISTRY.get(functional, {})
    for cls in input_type.__mro__:
        if cls in registry:
            return registry[cls]
        if cls is tv_tensors.TVTensor:
            return _passthrough
    name = getattr(functional, "__name__", repr(functional))
    raise TypeError(
        f"{name}(): inpt must be a torch.Tensor, a tv_tensor or a PIL image, got "
        f"{input_type.__name__}"
    )
