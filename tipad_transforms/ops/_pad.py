"""``tipad::pad`` and ``tipad::pad_stack``: the padding engine as torch.library custom ops.

The ops take canonical arguments (the functional layer parses user input): ``padding`` as
``[left, top, right, bottom]``, ``fill`` as a ``(C,)`` tensor and ``texture`` as a ``(K, Ct, th,
tw)`` bank, both in the image's dtype, ``offset`` ``(N, 2)`` and ``texture_index`` ``(N,)`` int32
where ``N`` is the product of the image's leading dims (for ``pad_stack``: the number of
images, packed into one flat tensor and described by a ``(N, 4)`` size table). Being custom
ops with fake implementations and registered autograd, they trace under
``torch.compile(fullgraph=True)`` and pass ``torch.library.opcheck``.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _fallback, _runtime
from .._geometry import MODE_CODES, PadGeometry, check_bank_index
from ._route import kernel_ran

__all__ = ["pad", "pad_backward", "pad_out", "pad_stack", "pad_stack_backward"]


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
    if not kernel_ran("padding", lambda: _runtime.launch_pad(g, mode, image, canvas, **args)):
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
    launch = lambda: _runtime.launch_pad(  # noqa: E731
        g, mode, grad_x, canvas_grad, texture=grad_tex, fill=canvas_grad.new_zeros(0),
        offset=offset.contiguous(), texture_index=texture_index.contiguous(), stagger=stagger,
        backward=True,
    )  # fmt: skip
    if not kernel_ran("padding", launch):
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


# pad_stack: N images of different sizes, packed flat, each padded to one canvas size.


def _stack_sizes(
    sizes: torch.Tensor,
    numel: int,
    canvas: list[int],
    mode: str,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
) -> torch.Tensor:
    """``sizes`` as an int64 CPU ``(N, 4)`` table, checked against the packed images' element
    count and the canvas ``[C, H, W]``: the kernel trusts it for every memory access."""
    if sizes.dim() != 2 or sizes.shape[1] != 4 or sizes.is_floating_point():
        raise ValueError(
            f"sizes must be an (N, 4) int tensor of (h, w, top, left), got {tuple(sizes.shape)} "
            f"{sizes.dtype}"
        )
    if len(canvas) != 3 or min(canvas) < 0:
        raise ValueError(f"canvas must be [C, H, W] non-negative, got {canvas}")
    if mode not in MODE_CODES:
        raise ValueError(f"mode must be one of {', '.join(MODE_CODES)}; got {mode!r}")
    table = sizes.detach().to("cpu", torch.int64)
    n = table.shape[0]
    c, out_h, out_w = canvas
    h, w, top, left = table.unbind(1)
    misfit = (table < 0).any(1) | (top + h > out_h) | (left + w > out_w)
    if bool(misfit.any()):
        i = int(misfit.nonzero()[0, 0])
        raise ValueError(
            f"sample {i}: an image of size {tuple(table[i, :2].tolist())} at (top, left) "
            f"{tuple(table[i, 2:].tolist())} does not fit a {(out_h, out_w)} canvas"
        )
    # A standard mode reads its border from the image: an empty one has nothing to read.
    empty = (h * w == 0) & (mode not in ("constant", "texture") and out_h * out_w > 0)
    if bool(empty.any()):
        i = int(empty.nonzero()[0, 0])
        raise ValueError(
            f"sample {i}: mode {mode!r} needs a non-empty image, got size "
            f"{tuple(table[i, :2].tolist())}"
        )
    described = c * int((h * w).sum())
    if described != numel:
        raise ValueError(
            f"images hold {numel} elements; sizes and {c} channels describe {described}"
        )
    if tuple(offset.shape) != (n, 2) or tuple(texture_index.shape) != (n,):
        raise ValueError(
            f"offset must be ({n}, 2) and texture_index ({n},), got {tuple(offset.shape)} and "
            f"{tuple(texture_index.shape)}"
        )
    return table


@torch.library.custom_op("tipad::pad_stack", mutates_args=())
def pad_stack(
    images: torch.Tensor,
    sizes: torch.Tensor,
    canvas: list[int],
    mode: str,
    fill: torch.Tensor,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> torch.Tensor:
    """Pad ``N`` packed images each to ``canvas`` ``[C, H, W]`` in one launch: ``(N, C, H, W)``.

    ``images``: 1-D, the ``(C, h_i, w_i)`` images flattened and concatenated in order;
    ``sizes``: ``(N, 4)`` int ``(h_i, w_i, top_i, left_i)`` (read on the host); the rest as
    ``pad``, per image. Canvas ``i`` equals ``pad`` of image ``i`` with padding ``(left_i,
    top_i, W - left_i - w_i, H - top_i - h_i)``.
    """
    if images.dim() != 1:
        raise ValueError(f"images must be 1-D (packed), got shape {tuple(images.shape)}")
    table = _stack_sizes(sizes, images.numel(), canvas, mode, offset, texture_index)
    tex = texture.detach().contiguous()
    if tex.numel() > 0 and texture_index.device.type == "cpu":
        check_bank_index(tex.shape[0], texture_index)  # as in _prepare
    flat = images.detach().contiguous()
    out = torch.empty(table.shape[0], *canvas, dtype=images.dtype, device=images.device)
    args: dict[str, Any] = dict(
        texture=tex,
        fill=fill.contiguous(),
        offset=offset.contiguous(),
        texture_index=texture_index.contiguous(),
        stagger=stagger,
    )
    if not kernel_ran("padding", lambda: _runtime.launch_pad_stack(table, mode, flat, out, **args)):
        out.copy_(_fallback.pad_stack(table, mode, flat, out.shape, **args))
    return out


@pad_stack.register_fake
def _(images, sizes, canvas, mode, fill, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    return images.new_empty(sizes.shape[0], *canvas)


@torch.library.custom_op("tipad::pad_stack_backward", mutates_args=())
def pad_stack_backward(
    grad: torch.Tensor,
    sizes: torch.Tensor,
    numel: int,
    mode: str,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``pad_stack``: ``(grad_images, grad_texture)``, ``(numel,)`` and the
    texture's shape; sums as ``pad_backward``, per image. Half types accumulate in float32."""
    _, c, out_h, out_w = grad.shape
    table = _stack_sizes(sizes, numel, [c, out_h, out_w], mode, offset, texture_index)
    acc = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    canvas_grad = grad.detach().to(acc).contiguous()
    tex = texture.detach().contiguous()
    grad_images = canvas_grad.new_zeros(numel)
    grad_tex = canvas_grad.new_zeros(tex.shape)
    lattice: dict[str, Any] = dict(
        offset=offset.contiguous(), texture_index=texture_index.contiguous(), stagger=stagger
    )
    launch = lambda: _runtime.launch_pad_stack(  # noqa: E731
        table, mode, grad_images, canvas_grad, texture=grad_tex, fill=canvas_grad.new_zeros(0),
        backward=True, **lattice,
    )  # fmt: skip
    if not kernel_ran("padding", launch):
        grad_images, grad_tex = _fallback.pad_stack_backward(
            canvas_grad, table, mode, acc, texture=tex, **lattice
        )
    return grad_images.to(grad.dtype), grad_tex.to(grad.dtype)


@pad_stack_backward.register_fake
def _(grad, sizes, numel, mode, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    return grad.new_empty(numel), grad.new_empty(texture.shape)


def _setup_stack_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    images, sizes, _canvas, mode, _fill, texture, offset, texture_index, stagger = inputs
    ctx.numel, ctx.mode, ctx.stagger = images.numel(), mode, stagger
    ctx.texture_dtype = texture.dtype
    ctx.save_for_backward(sizes, texture, offset, texture_index)


def _stack_backward(ctx, grad):  # type: ignore[no-untyped-def]
    sizes, texture, offset, texture_index = ctx.saved_tensors
    grad_images, grad_tex = pad_stack_backward(
        grad, sizes, ctx.numel, ctx.mode, texture, offset, texture_index, ctx.stagger
    )
    needs_images, _, _, _, _, needs_tex = ctx.needs_input_grad[:6]
    return (
        grad_images if needs_images else None,
        None,
        None,
        None,
        None,
        grad_tex.to(ctx.texture_dtype) if needs_tex else None,
        None,
        None,
        None,
    )


pad_stack.register_autograd(_stack_backward, setup_context=_setup_stack_context)
