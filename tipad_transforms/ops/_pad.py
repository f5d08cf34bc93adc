"""``tipad::pad``: the padding engine as torch.library custom ops.

The ops take canonical arguments (the functional layer parses user input): ``padding`` as
``[left, top, right, bottom]``, ``fill`` as a ``(C,)`` tensor and ``texture`` as a ``(K, Ct, th,
tw)`` bank, both in the image's dtype, ``offset`` ``(N, 2)`` and ``texture_index`` ``(N,)`` int32
where ``N`` is the product of the image's leading dims. Being custom ops with fake
implementations and registered autograd, they trace under ``torch.compile(fullgraph=True)`` and
pass ``torch.library.opcheck``.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any

import torch

from .. import _fallback, _runtime
from .._geometry import MAX_ELEMENTS, PadGeometry, check_bank_index

__all__ = ["pad", "pad_backward", "pad_out"]

_warned: set[str] = set()
# Frames of these packages sit between the user's call and the op's implementation, how many
# depends on the path taken (functional, transform, torch.compile, autograd).
_SITE = os.path.dirname(os.path.dirname(torch.__file__ or ""))
_INTERNAL = (
    os.path.dirname(os.path.dirname(__file__)) + os.sep,  # tipad_transforms
    os.path.join(_SITE, "torch") + os.sep,
    os.path.join(_SITE, "torchvision") + os.sep,
)


def _user_stacklevel() -> int:
    """``stacklevel`` for a warning issued by our caller that points at the user's code."""
    frame: types.FrameType | None = sys._getframe(1)  # level 1: the caller of warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


def _kernel(*tensors: torch.Tensor, **launch: Any) -> str | None:
    """Run the Taichi kernel; return why it could not run (the caller takes the torch route)."""
    if max(t.numel() for t in tensors) > MAX_ELEMENTS:
        return f"more than {MAX_ELEMENTS} elements in one call"
    try:
        _runtime.launch_pad(**launch)
    except _runtime.RuntimeUnavailable as refused:
        return str(refused)
    return None


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(
            f"tipad_transforms: the Taichi kernel cannot run here ({reason}); padding with the "
            "slower torch route instead",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
        )


def _run(
    g: PadGeometry,
    mode: str,
    image: torch.Tensor,
    canvas: torch.Tensor,
    texture: torch.Tensor,
    fill: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> None:
    """Write every element of ``canvas`` (N, C, H', W'), contiguous."""
    args: dict[str, Any] = dict(
        texture=texture, fill=fill, offset=offset, texture_index=texture_index, stagger=stagger
    )
    reason = _kernel(canvas, image, texture, geometry=g, mode=mode, image=image, canvas=canvas,
                     **args)  # fmt: skip
    if reason is not None:
        _warn_once(reason)
        canvas.copy_(_fallback.pad(g, mode, image, **args))


def _prepare(
    x: torch.Tensor, padding: list[int], texture: torch.Tensor, texture_index: torch.Tensor
) -> tuple[PadGeometry, torch.Tensor, torch.Tensor]:
    g = PadGeometry.of(x.shape, padding)
    if texture.numel() > 0 and texture_index.device.type == "cpu":
        # Free on the host. A device-resident index is checked by texture_pad before it moves
        # there (or, for a direct op call, clamped by the kernel so it never reads outside the
        # bank): checking it here would synchronise the host on every CUDA call.
        check_bank_index(texture.shape[0], texture_index)
    # reshape copies only when needed (channels-last, slices); the kernel wants row-major planes.
    image = x.detach().reshape(g.n, g.c, g.h, g.w).contiguous()
    return g, image, texture.detach().contiguous()


@torch.library.custom_op("tipad::pad", mutates_args=())
def pad(
    x: torch.Tensor,
    padding: list[int],
    mode: str,
    fill: torch.Tensor,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> torch.Tensor:
    """Pad ``x`` (``(..., C, H, W)`` or ``(H, W)``) into a new tensor; see the module docstring."""
    g, image, tex = _prepare(x, padding, texture, texture_index)
    canvas = torch.empty(g.n, g.c, g.out_h, g.out_w, dtype=x.dtype, device=x.device)
    _run(
        g,
        mode,
        image,
        canvas,
        tex,
        fill.contiguous(),
        offset.contiguous(),
        texture_index.contiguous(),
        stagger,
    )
    return canvas.reshape(g.out_shape(x.shape))


@pad.register_fake
def _(x, padding, mode, fill, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    g = PadGeometry.of(x.shape, padding)
    return x.new_empty(g.out_shape(x.shape))


@torch.library.custom_op("tipad::pad_out", mutates_args=("out",))
def pad_out(
    x: torch.Tensor,
    padding: list[int],
    pad_mode: str,
    fill: torch.Tensor,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
    out: torch.Tensor,
) -> None:
    """``pad`` writing into ``out`` (contiguous, the output's shape, dtype and device).

    The mode argument is ``pad_mode``, not ``mode``: torch.compile functionalizes this mutating
    op through a higher-order op that takes its own ``mode`` keyword, and a schema argument of
    that name collides with it ("got multiple values for argument 'mode'").
    """
    g, image, tex = _prepare(x, padding, texture, texture_index)
    if not out.is_contiguous() or list(out.shape) != g.out_shape(x.shape):
        raise ValueError(
            f"out must be contiguous with shape {tuple(g.out_shape(x.shape))}, got "
            f"{tuple(out.shape)} with strides {out.stride()}"
        )
    canvas = out.view(g.n, g.c, g.out_h, g.out_w)
    _run(
        g,
        pad_mode,
        image,
        canvas,
        tex,
        fill.contiguous(),
        offset.contiguous(),
        texture_index.contiguous(),
        stagger,
    )


@pad_out.register_fake
def _(x, padding, pad_mode, fill, texture, offset, texture_index, stagger, out):  # type: ignore[no-untyped-def]
    return None


@torch.library.custom_op("tipad::pad_backward", mutates_args=())
def pad_backward(
    grad: torch.Tensor,
    x_shape: list[int],
    padding: list[int],
    mode: str,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``pad``: ``(grad_x, grad_texture)`` with ``x``'s and ``texture``'s shapes.

    Every image pixel receives the sum of the gradients of all canvas pixels that read it (the
    interior copy and, for edge/reflect/symmetric/circular, the border); the texture receives
    the border gradients of texture mode. Half types accumulate in float32.
    """
    g = PadGeometry.of(x_shape, padding)
    acc = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    canvas_grad = grad.detach().reshape(g.n, g.c, g.out_h, g.out_w).to(acc).contiguous()
    tex = texture.detach().contiguous()
    grad_x = canvas_grad.new_zeros(g.n, g.c, g.h, g.w)
    grad_tex = canvas_grad.new_zeros(tex.shape)
    reason = _kernel(canvas_grad, tex, geometry=g, mode=mode, image=grad_x, canvas=canvas_grad,
                     texture=grad_tex, fill=canvas_grad.new_zeros(0),
                     offset=offset.contiguous(), texture_index=texture_index.contiguous(),
                     stagger=stagger, backward=True)  # fmt: skip
    if reason is not None:
        _warn_once(reason)
        grad_x, grad_tex = _fallback.pad_backward(
            canvas_grad,
            g,
            mode,
            acc,
            texture=tex,
            offset=offset,
            texture_index=texture_index,
            stagger=stagger,
        )
    return grad_x.to(grad.dtype).reshape(x_shape), grad_tex.to(grad.dtype)


@pad_backward.register_fake
def _(grad, x_shape, padding, mode, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    return grad.new_empty(x_shape), grad.new_empty(texture.shape)


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    x, padding, mode, _fill, texture, offset, texture_index, stagger = inputs
    ctx.x_shape = list(x.shape)
    ctx.padding, ctx.mode, ctx.stagger = list(padding), mode, stagger
    ctx.texture_dtype = texture.dtype
    ctx.save_for_backward(texture, offset, texture_index)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    texture, offset, texture_index = ctx.saved_tensors
    grad_x, grad_tex = pad_backward(
        grad, ctx.x_shape, ctx.padding, ctx.mode, texture, offset, texture_index, ctx.stagger
    )
    needs_x, _, _, _, needs_tex = ctx.needs_input_grad[:5]
    return (
        grad_x if needs_x else None,
        None,
        None,
        None,
        grad_tex.to(ctx.texture_dtype) if needs_tex else None,
        None,
        None,
        None,
    )


pad.register_autograd(_backward, setup_context=_setup_context)
