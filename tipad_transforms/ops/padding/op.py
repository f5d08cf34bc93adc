"""``tipad::pad``, ``tipad::pad_out``, ``tipad::pad_stack`` and their backwards: the padding
family's torch.library custom ops, and the direct entries the functional layer calls.

The ops take canonical arguments (the functional layer parses user input): ``padding`` as
``[left, top, right, bottom]``, ``fill`` as a ``(C,)`` tensor and ``texture`` as a ``(K, Ct, th,
tw)`` bank, both in the image's dtype, ``offset`` ``(N, 2)`` and ``texture_index`` ``(N,)`` int32
where ``N`` is the product of the image's leading dims (for ``pad_stack``: the number of
images, packed into one flat tensor and described by a ``(N, 4)`` size table). Inside, a call is
one ``PadCall`` record, run by the backends' policy (``PAD.forward``, ``PAD.backward``). Being
custom ops with fake implementations and registered autograd, they trace under
``torch.compile(fullgraph=True)`` and pass ``torch.library.opcheck``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ... import backends
from ..._tracing import eager, tracing
from ...backends.taichi import advise_huge_pages
from .._common import (
    check_dense,
    check_int32,
    check_ints,
    check_meta,
    check_no_overlap,
    check_scalar_int,
    check_str,
)
from . import copies
from .geometry import MAX_PAD, MODES, PadCall, PadGeometry, StackGeometry, check_bank_index

#: The padding family: ``forward(call, image, canvas)`` (exact: the warm-up may serve it on the
#: torch backend) and ``backward(call, canvas_grad, grad_image, grad_texture)``.
PAD = backends.family("pad", __package__, "padding", ("forward", "backward"), {"forward": 2})

#: Eager calls served without the custom-op dispatch (read by the tests: a direct route that
#: silently stopped being taken would only show as lost speed).
direct_calls = 0


def pad_direct(x: Tensor, call: PadCall, out: Tensor | None = None, *, op: bool = False) -> Tensor:
    """Pad ``x`` as ``call`` says (its geometry of ``x``, a non-negative padding) into ``out``
    or a new contiguous canvas, and return it.

    The functional layer's entry: where ``_tracing.eager`` holds for every tensor, the op's
    implementation runs here without the custom-op dispatch, trusting the record's checks (a
    user's ``out`` is still checked); otherwise ``tipad::pad`` (or ``tipad::pad_out``) records
    or runs the call. ``op``: this is the op's own implementation (its checks made).
    """
    global direct_calls
    g = call.geometry
    assert isinstance(g, PadGeometry)
    if not op:
        if not (eager(x, call.fill, call.texture, call.offset, call.texture_index)
                and (out is None or eager(out))):  # fmt: skip
            args = (x, [g.left, g.top, g.right, g.bottom], call.mode, call.fill, call.texture,
                    call.offset, call.texture_index, call.stagger)  # fmt: skip
            if out is None:
                result: Tensor = _PAD(*args)
                return result
            _PAD_OUT(*args, out)
            return out
        direct_calls += 1
        if out is not None:
            _check_out(out, g, x)
            check_no_overlap(out, x=x, fill=call.fill, texture=call.texture, offset=call.offset,
                             texture_index=call.texture_index)  # fmt: skip
    # Contiguous row-major planes; detach and copy only where needed (microseconds each).
    image = (x.detach() if x.requires_grad else x).contiguous()
    if out is None:
        out = _allocate(g.out_shape(x.shape), x, "padding")
    PAD.forward(call, image, out)
    return out


def pad_samples_direct(images: list[Tensor], call: PadCall) -> Tensor | None:
    """``pad_direct`` of the batch ``torch.stack(images)`` without assembling it, or None where
    no form applies: an eager CPU call whose canvases share one border (``copies.shares_border``:
    ``copies.fill_samples`` in constant mode, else the backend's first canvas and
    ``copies.repeat_first``) or whose samples share a bank index (``copies.shares_texture``:
    ``copies.crop_walls``). ``images``: ``call.geometry.n`` tensors ``(C, H, W)`` of the
    geometry's sizes, any strides, checked by the caller.
    """
    global direct_calls
    g = call.geometry
    assert isinstance(g, PadGeometry)
    x = images[0]
    if not x.is_cpu:
        return None
    shared = copies.shares_border(call, any_width=True)
    if not (shared or copies.shares_texture(call, any_width=True)):
        return None
    if not eager(*images, call.fill, call.texture, call.offset, call.texture_index):
        return None
    direct_calls += 1
    out = _allocate(g.out_shape([g.n, g.c, g.h, g.w]), x, "padding")
    # The backend sees the first canvas at most: the fresh batch's page advice is made here.
    advise_huge_pages(out)
    if not shared:
        copies.crop_walls(call, images, out)
        return out
    if call.mode == "constant":
        copies.fill_samples(call, images, out)
        return out
    PAD.forward(copies.first_sample(call), x.contiguous(), out[:1])
    copies.repeat_first(call, images, out)
    return out


def pad_stack_direct(images: Tensor, call: PadCall, *, op: bool = False) -> Tensor:
    """``pad_direct`` for ``tipad::pad_stack``: ``images`` packed (1-D), ``call.geometry`` a
    ``StackGeometry`` whose table fits; returns ``(N, C, H, W)``."""
    global direct_calls
    g = call.geometry
    assert isinstance(g, StackGeometry)
    if not op:
        if not eager(images, call.fill, call.texture, call.offset, call.texture_index):
            out: Tensor = _PAD_STACK(images, g.sizes, [g.c, g.out_h, g.out_w], call.mode,
                                           call.fill, call.texture, call.offset,
                                           call.texture_index, call.stagger)  # fmt: skip
            return out
        direct_calls += 1
    out = _allocate([g.n, g.c, g.out_h, g.out_w], images, "canvas")
    PAD.forward(call, (images.detach() if images.requires_grad else images).contiguous(), out)
    return out


def _record(
    geometry: PadGeometry | StackGeometry, mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int, check_index: bool = True,
) -> PadCall:  # fmt: skip
    """The call of the ops' (checked) arguments: contiguous, detached tensors."""
    tex = (texture.detach() if texture.requires_grad else texture).contiguous()
    if check_index and tex.numel() > 0 and texture_index.device.type == "cpu":
        # Free on the host. A device-resident index is checked by texture_pad before it moves
        # there (or, for a direct op call, clamped by the kernel so it never reads outside the
        # bank): checking it here would synchronise the host on every CUDA call.
        check_bank_index(tex.shape[0], texture_index)
    return PadCall(geometry, mode, fill.contiguous(), tex, offset.contiguous(),
                   texture_index.contiguous(), stagger)  # fmt: skip


def _check_mode(mode: str, name: str) -> None:
    if mode not in MODES:
        raise ValueError(f"{name} must be one of {', '.join(MODES)}; got {mode!r}")


def _check_params(
    n: int, c: int, mode: str, fill: Tensor | None, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int, dtype: torch.dtype | None, device: torch.device, like: str,
    mode_name: str = "mode",
) -> None:  # fmt: skip
    """What the kernel reads besides the image, for ``n`` samples of ``c`` channels: ``fill``
    ``(C,)`` (constant mode, unless None), ``texture`` ``(K >= 1, 1 or C, th >= 1, tw >= 1)``
    (texture mode), ``offset`` ``(N, 2)`` and ``texture_index`` ``(N,)`` int32, one device;
    ``dtype``: the one of fill and texture (None: not checked). The errors of fill and texture
    name the mode too (``mode_name``): a mode that reads them may be what is wrong."""
    check_meta("offset", offset, shape=(n, 2), dtype=torch.int32, device=device, like=like)
    check_meta("texture_index", texture_index, shape=(n,), dtype=torch.int32, device=device,
               like=like)  # fmt: skip
    check_int32("stagger", stagger)
    if mode == "constant" and fill is not None:
        if tuple(fill.shape) != (c,):
            raise ValueError(
                f"fill must have shape ({c},) for {mode_name} 'constant', got {tuple(fill.shape)}"
            )
        check_meta("fill", fill, dtype=dtype, device=device, like=like)
    if mode == "texture":
        if (
            texture.dim() != 4
            or texture.shape[0] < 1
            or texture.shape[1] not in (1, c)
            or min(texture.shape[2:]) < 1
        ):
            raise ValueError(
                f"texture must be (K, 1 or {c}, th, tw) with K, th, tw >= 1 for {mode_name} "
                f"'texture', got {tuple(texture.shape)}"
            )
        check_meta("texture", texture, dtype=dtype, device=device, like=like)


def _check_pad(
    x_shape: list[int] | torch.Size, padding: list[int], mode: str, mode_name: str = "mode",
    x_name: str = "x",
) -> PadGeometry:  # fmt: skip
    """The geometry of a valid ``x_shape`` and ``padding``, else a ValueError naming them
    (``x_name``: what holds the shape)."""
    if len(x_shape) < 2 or min(x_shape) < 0:
        shape = f"shape (..., C, H, W) or (H, W), got {tuple(x_shape)}"
        raise ValueError(f"{x_name} must {'be' if x_name == 'x_shape' else 'have'} {shape}")
    if len(padding) != 4 or min(padding) < 0 or max(padding) > MAX_PAD:
        raise ValueError(
            f"padding must be 4 ints [left, top, right, bottom] in [0, {MAX_PAD}], got {padding}"
        )
    _check_mode(mode, mode_name)
    g = PadGeometry.of(x_shape, padding)
    reads_image = mode not in ("constant", "texture")
    if reads_image and g.h * g.w == 0 and g.n * g.c * g.out_h * g.out_w > 0:
        raise ValueError(
            f"{x_name} of shape {tuple(x_shape)} holds no pixels: {mode_name} {mode!r} needs a "
            "non-empty image"
        )
    return g


def _check_forward(
    x: Tensor, padding: list[int], mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int, mode_name: str = "mode",
) -> PadGeometry:  # fmt: skip
    g = _check_pad(x.shape, padding, mode, mode_name)
    _check_params(g.n, g.c, mode, fill, texture, offset, texture_index, stagger, x.dtype,
                  x.device, "x", mode_name)  # fmt: skip
    return g


def _check_out(out: Tensor, g: PadGeometry, x: Tensor) -> None:
    check_meta("out", out, shape=g.out_shape(x.shape), dtype=x.dtype, device=x.device)
    if not out.is_contiguous():
        raise ValueError(f"out must be contiguous, got strides {out.stride()}")


def _allocate(shape: list[int], like: Tensor, name: str) -> Tensor:
    """A new output of ``shape`` like ``like``, or a ValueError naming ``name`` (what set its
    size) when it cannot be allocated (the allocator's RuntimeError, CUDA's OutOfMemoryError:
    a border of 10**9 pixels is a bad argument, not a crash)."""
    try:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    except RuntimeError as exc:
        nbytes = math.prod(shape) * like.element_size()
        raise ValueError(
            f"{name} gives an output of shape {tuple(shape)} ({nbytes} bytes), which cannot be "
            f"allocated: {str(exc).splitlines()[0]}"
        ) from None


@torch.library.custom_op("tipad::pad", mutates_args=())
def _pad_op(
    x: Tensor, padding: list[int], mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int,
) -> Tensor:  # fmt: skip
    g = _check_forward(x, padding, mode, fill, texture, offset, texture_index, stagger)
    call = _record(g, mode, fill, texture, offset, texture_index, stagger)
    return pad_direct(x, call, op=True)


@_pad_op.register_fake
def _(x, padding, mode, fill, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    g = _check_forward(x, padding, mode, fill, texture, offset, texture_index, stagger)
    return x.new_empty(g.out_shape(x.shape))


@torch.library.custom_op("tipad::pad_out", mutates_args=("out",))
def _pad_out_op(
    x: Tensor, padding: list[int], pad_mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int, out: Tensor,
) -> None:  # fmt: skip
    g = _check_forward(x, padding, pad_mode, fill, texture, offset, texture_index, stagger,
                       "pad_mode")  # fmt: skip
    _check_out(out, g, x)
    check_no_overlap(out, x=x, fill=fill, texture=texture, offset=offset,
                     texture_index=texture_index)  # fmt: skip
    pad_direct(x, _record(g, pad_mode, fill, texture, offset, texture_index, stagger), out, op=True)


@_pad_out_op.register_fake
def _(x, padding, pad_mode, fill, texture, offset, texture_index, stagger, out):  # type: ignore[no-untyped-def]
    g = _check_forward(x, padding, pad_mode, fill, texture, offset, texture_index, stagger,
                       "pad_mode")  # fmt: skip
    _check_out(out, g, x)


def _check_float_grad(grad: Tensor) -> torch.dtype:
    """The dtype the gradients accumulate in (float16 and bfloat16: float32)."""
    if not grad.is_floating_point():
        raise TypeError(f"grad must be a floating point tensor, got {grad.dtype}")
    return grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32


def _check_backward(
    grad: Tensor, x_shape: list[int], padding: list[int], mode: str, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> PadGeometry:  # fmt: skip
    g = _check_pad(x_shape, padding, mode, x_name="x_shape")
    _check_float_grad(grad)
    if tuple(grad.shape) != tuple(g.out_shape(x_shape)):
        raise ValueError(
            f"grad must have shape {tuple(g.out_shape(x_shape))} (x_shape grown by padding), "
            f"got {tuple(grad.shape)}"
        )
    _check_params(g.n, g.c, mode, None, texture, offset, texture_index, stagger, None,
                  grad.device, "grad")  # fmt: skip
    return g


def _backward_into(
    call: PadCall, grad: Tensor, canvas_grad: Tensor, grad_image: Tensor
) -> tuple[Tensor, Tensor]:
    """Run the backward of ``call`` (``canvas_grad``: the accumulation dtype's contiguous copy
    of ``grad``) into the zeros ``grad_image``; both gradients in ``grad``'s dtype."""
    grad_texture = canvas_grad.new_zeros(call.texture.shape)
    PAD.backward(call, canvas_grad, grad_image, grad_texture)
    return grad_image.to(grad.dtype), grad_texture.to(grad.dtype)


@torch.library.custom_op("tipad::pad_backward", mutates_args=())
def _pad_backward_op(
    grad: Tensor, x_shape: list[int], padding: list[int], mode: str, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    g = _check_backward(grad, x_shape, padding, mode, texture, offset, texture_index, stagger)
    canvas_grad = grad.detach().to(_check_float_grad(grad)).contiguous()
    call = _record(g, mode, canvas_grad.new_zeros(0), texture, offset, texture_index, stagger,
                   check_index=False)  # fmt: skip
    grad_x, grad_tex = _backward_into(call, grad, canvas_grad, canvas_grad.new_zeros(x_shape))
    return grad_x, grad_tex


@_pad_backward_op.register_fake
def _(grad, x_shape, padding, mode, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    _check_backward(grad, x_shape, padding, mode, texture, offset, texture_index, stagger)
    return grad.new_empty(x_shape), grad.new_empty(texture.shape)


# pad_stack: N images of different sizes, packed flat, each padded to one canvas size.


def _check_stack(sizes: Tensor, canvas: list[int], mode: str) -> int:
    """The number of images ``N`` of a well-formed ``sizes`` table (metadata only)."""
    if sizes.dim() != 2 or sizes.shape[1] != 4 or sizes.is_floating_point():
        raise ValueError(
            f"sizes must be an (N, 4) int tensor of (h, w, top, left), got {tuple(sizes.shape)} "
            f"{sizes.dtype}"
        )
    if len(canvas) != 3 or min(canvas) < 0:
        raise ValueError(f"canvas must be [C, H, W] non-negative, got {canvas}")
    _check_mode(mode, "mode")
    return int(sizes.shape[0])


def _stack_sizes(
    sizes: Tensor, numel: int, canvas: list[int], mode: str, backward: bool = False
) -> Tensor:
    """``sizes`` (checked by ``_check_stack``) as an int64 CPU ``(N, 4)`` table, its values
    checked against the packed images' element count and the canvas ``[C, H, W]``: the kernel
    trusts it for every memory access. The errors name the arguments these come from: the
    forward's ``images`` and ``canvas``, the backward's ``numel`` and ``grad``."""
    images_name, canvas_name = ("numel", "grad") if backward else ("images", "canvas")
    table = sizes.detach().to("cpu", torch.int64)
    c, out_h, out_w = canvas
    h, w, top, left = table.unbind(1)
    misfit = (table < 0).any(1) | (top + h > out_h) | (left + w > out_w)
    if bool(misfit.any()):
        i = int(misfit.nonzero()[0, 0])
        raise ValueError(
            f"sample {i}: an image of size {tuple(table[i, :2].tolist())} at (top, left) "
            f"{tuple(table[i, 2:].tolist())} (sizes[{i}]) does not fit a {(out_h, out_w)} canvas "
            f"({canvas_name})"
        )
    # A standard mode reads its border from the image: an empty one has nothing to read.
    empty = (h * w == 0) & (mode not in ("constant", "texture") and out_h * out_w > 0)
    if bool(empty.any()):
        i = int(empty.nonzero()[0, 0])
        raise ValueError(
            f"sample {i}: mode {mode!r} needs a non-empty image, got size "
            f"{tuple(table[i, :2].tolist())} (sizes[{i}])"
        )
    described = c * int((h * w).sum())
    if described != numel:
        raise ValueError(
            f"{images_name} gives {numel} elements; sizes and {c} channels describe "
            f"{described} (the channels of {canvas_name})"
        )
    return table


def _check_stack_forward(
    images: Tensor, sizes: Tensor, canvas: list[int], mode: str, fill: Tensor, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> None:  # fmt: skip
    if images.dim() != 1:
        raise ValueError(f"images must be 1-D (packed), got shape {tuple(images.shape)}")
    n = _check_stack(sizes, canvas, mode)
    _check_params(n, canvas[0], mode, fill, texture, offset, texture_index, stagger,
                  images.dtype, images.device, "images")  # fmt: skip


@torch.library.custom_op("tipad::pad_stack", mutates_args=())
def _pad_stack_op(
    images: Tensor, sizes: Tensor, canvas: list[int], mode: str, fill: Tensor, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> Tensor:  # fmt: skip
    _check_stack_forward(images, sizes, canvas, mode, fill, texture, offset, texture_index,
                         stagger)  # fmt: skip
    g = StackGeometry(_stack_sizes(sizes, images.numel(), canvas, mode), *canvas)
    call = _record(g, mode, fill, texture, offset, texture_index, stagger)
    return pad_stack_direct(images, call, op=True)


@_pad_stack_op.register_fake
def _(images, sizes, canvas, mode, fill, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    _check_stack_forward(images, sizes, canvas, mode, fill, texture, offset, texture_index,
                         stagger)  # fmt: skip
    return images.new_empty(sizes.shape[0], *canvas)


def _check_stack_backward(
    grad: Tensor, sizes: Tensor, numel: int, mode: str, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int,
) -> None:  # fmt: skip
    _check_float_grad(grad)
    if grad.dim() != 4:
        raise ValueError(f"grad must be (N, C, H, W), got shape {tuple(grad.shape)}")
    if numel < 0:
        raise ValueError(f"numel must be >= 0, got {numel}")
    n = _check_stack(sizes, list(grad.shape[1:]), mode)
    if grad.shape[0] != n:
        raise ValueError(f"grad must hold {n} canvases (one per row of sizes), got {grad.shape[0]}")
    _check_params(n, grad.shape[1], mode, None, texture, offset, texture_index, stagger, None,
                  grad.device, "grad")  # fmt: skip


@torch.library.custom_op("tipad::pad_stack_backward", mutates_args=())
def _pad_stack_backward_op(
    grad: Tensor, sizes: Tensor, numel: int, mode: str, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    _check_stack_backward(grad, sizes, numel, mode, texture, offset, texture_index, stagger)
    canvas = list(grad.shape[1:])
    g = StackGeometry(_stack_sizes(sizes, numel, canvas, mode, backward=True), *canvas)
    canvas_grad = grad.detach().to(_check_float_grad(grad)).contiguous()
    call = _record(g, mode, canvas_grad.new_zeros(0), texture, offset, texture_index, stagger,
                   check_index=False)  # fmt: skip
    return _backward_into(call, grad, canvas_grad, canvas_grad.new_zeros(numel))


@_pad_stack_backward_op.register_fake
def _(grad, sizes, numel, mode, texture, offset, texture_index, stagger):  # type: ignore[no-untyped-def]
    _check_stack_backward(grad, sizes, numel, mode, texture, offset, texture_index, stagger)
    return grad.new_empty(numel), grad.new_empty(texture.shape)


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    # pad's inputs are (x, padding, *rest), pad_stack's (images, sizes, canvas, *rest), where
    # rest is (mode, fill, texture, offset, texture_index, stagger).
    mode, _fill, texture, offset, texture_index, stagger = inputs[-6:]
    ctx.mode, ctx.stagger, ctx.texture_dtype = mode, stagger, texture.dtype
    ctx.n_inputs = len(inputs)
    if len(inputs) == 9:
        ctx.numel = inputs[0].numel()
        ctx.save_for_backward(inputs[1], texture, offset, texture_index)
    else:
        ctx.shape, ctx.padding = list(inputs[0].shape), list(inputs[1])
        ctx.save_for_backward(texture, offset, texture_index)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    *sizes, texture, offset, texture_index = ctx.saved_tensors
    lattice = (ctx.mode, texture, offset, texture_index, ctx.stagger)
    if sizes:
        grad_x, grad_tex = pad_stack_backward(grad, sizes[0], ctx.numel, *lattice)
    else:
        grad_x, grad_tex = pad_backward(grad, ctx.shape, ctx.padding, *lattice)
    grads: list[Tensor | None] = [None] * ctx.n_inputs  # the image's, the texture's 4th last
    if ctx.needs_input_grad[0]:
        grads[0] = grad_x
    if ctx.needs_input_grad[-4]:
        grads[-4] = grad_tex.to(ctx.texture_dtype)
    return tuple(grads)


_pad_op.register_autograd(_backward, setup_context=_setup_context)
_pad_stack_op.register_autograd(_backward, setup_context=_setup_context)


# The public ops: plain functions, so that help() and the docs show each its own signature and
# docstring (a CustomOpDef shows torch's generic text), each calling the op's OpOverload: the
# same frames as CustomOpDef.__call__.
_NO_PADDING = object()  # _check_call's padding for the ops that take none


def _check_call(
    padding: object, mode: object, stagger: object, mode_name: str = "mode", **tensors: Tensor
) -> None:
    """The Python types the schema takes, as TypeError/ValueError naming the argument (the
    dispatcher's own complaint is a RuntimeError, and it takes ``True`` for an int), and dense
    tensors (``check_dense``). ``padding`` is ``_NO_PADDING`` for the ops that take none. Under
    a tracer the Python types are left to the dispatcher: ``torch.jit.trace`` hands in sizes
    as 0-d tensors."""
    check_dense(**tensors)
    if tracing():
        return
    if padding is not _NO_PADDING:
        check_ints("padding", padding)
    check_str(mode_name, mode)
    check_scalar_int("stagger", stagger)


_PAD = torch.ops.tipad.pad.default
_PAD_OUT = torch.ops.tipad.pad_out.default
_PAD_BACKWARD = torch.ops.tipad.pad_backward.default
_PAD_STACK = torch.ops.tipad.pad_stack.default
_PAD_STACK_BACKWARD = torch.ops.tipad.pad_stack_backward.default


def pad(
    x: Tensor, padding: list[int], mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int,
) -> Tensor:  # fmt: skip
    """``torch.ops.tipad.pad``: pad ``x`` into a new tensor, in one kernel launch.

    The op under ``tipad_transforms.functional``'s ``pad``, ``texture_pad`` and ``brick_pad``,
    with their arguments in canonical form (they parse user input; this checks shapes, dtypes
    and devices only). Traceable (``torch.compile``, ``torch.export``, ``torch.jit.trace``
    record ``tipad::pad``) and differentiable w.r.t. ``x`` and ``texture``.

    Args:
        x: ``(..., C, H, W)`` or ``(H, W)``, any real or bool dtype, CPU or CUDA, any strides.
        padding: ``[left, top, right, bottom]``, each ``>= 0``.
        mode: ``"constant"``, ``"edge"``, ``"reflect"``, ``"symmetric"``, ``"circular"`` or
            ``"texture"``.
        fill: ``(C,)`` in ``x``'s dtype and device, the constant mode's border; any tensor
            (empty: ``x.new_empty(0)``) for the other modes.
        texture: ``(K, 1 or C, th, tw)`` bank in ``x``'s dtype and device (texture mode), any
            tensor otherwise.
        offset: ``(N, 2)`` int32 ``(oy, ox)`` lattice shifts, ``N`` the product of ``x``'s
            leading dims (1 for ``(C, H, W)`` and ``(H, W)``), on ``x``'s device.
        texture_index: ``(N,)`` int32 bank indices in ``[0, K)``, on ``x``'s device.
        stagger: horizontal shift of each successive row of tiles (int32).

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``, ``x``'s dtype and device, contiguous:
        ``x`` bit-exact in the middle, the border as ``functional.texture_pad`` (texture mode)
        and ``functional.pad`` (the others) describe it. Meta tensors give a meta result.

    Raises:
        ValueError: a shape, mode, padding or device the kernel cannot take (the message names
            the argument); ``texture_index`` outside the bank (CPU indices).
        TypeError: ``fill``, ``texture``, ``offset`` or ``texture_index`` of another dtype; a
            tensor argument that is quantized, nested or sparse (not a dense strided tensor).
    """
    _check_call(padding, mode, stagger, x=x, fill=fill, texture=texture, offset=offset,
                texture_index=texture_index)  # fmt: skip
    return _PAD(x, padding, mode, fill, texture, offset, texture_index, stagger)


def pad_out(
    x: Tensor, padding: list[int], pad_mode: str, fill: Tensor, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int, out: Tensor,
) -> None:  # fmt: skip
    """``torch.ops.tipad.pad_out``: ``pad`` writing into ``out``; returns None.

    Arguments as ``pad``, with ``out`` contiguous, of the output's shape, ``x``'s dtype and
    device, sharing no memory with any input. Not differentiable (a mutating op). The mode is
    ``pad_mode``: torch.compile functionalizes this op through a higher-order op that takes its
    own ``mode`` keyword ("got multiple values for argument 'mode'").

    Raises:
        ValueError / TypeError: as ``pad`` (naming ``pad_mode`` for the mode); naming ``out``
            for a wrong shape, dtype, device or a non-contiguous ``out``; ``"out must not
            overlap NAME in memory"`` when ``x``, ``fill``, ``texture``, ``offset`` or
            ``texture_index`` shares memory with it (checked eagerly only: a compiled graph
            functionalizes the write).
    """
    _check_call(padding, pad_mode, stagger, "pad_mode", x=x, fill=fill, texture=texture,
                offset=offset, texture_index=texture_index, out=out)  # fmt: skip
    _PAD_OUT(x, padding, pad_mode, fill, texture, offset, texture_index, stagger, out)


def pad_backward(
    grad: Tensor, x_shape: list[int], padding: list[int], mode: str, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``torch.ops.tipad.pad_backward``: the gradients of ``pad``, ``(grad_x, grad_texture)``.

    Every image pixel receives the sum of the gradients of all canvas pixels that read it (the
    interior copy and, for edge/reflect/symmetric/circular, the border); the texture receives
    the border gradients of texture mode (zeros in the other modes).

    Args:
        grad: the gradient of ``pad``'s output: its shape, a floating dtype, ``x``'s device.
        x_shape: the shape of ``pad``'s ``x``.
        padding, mode, texture, offset, texture_index, stagger: as given to ``pad``.

    Returns:
        ``grad_x`` of shape ``x_shape`` and ``grad_texture`` of ``texture``'s shape, both in
        ``grad``'s dtype and device (float16 and bfloat16 accumulate in float32).

    Raises:
        TypeError: ``grad`` is not floating point; ``offset``/``texture_index`` not int32.
        ValueError: shapes or devices that do not match ``pad``'s (naming the argument).
    """
    if not tracing():
        check_ints("x_shape", x_shape)
    _check_call(padding, mode, stagger, grad=grad, texture=texture, offset=offset,
                texture_index=texture_index)  # fmt: skip
    return _PAD_BACKWARD(grad, x_shape, padding, mode, texture, offset, texture_index, stagger)


def pad_stack(
    images: Tensor, sizes: Tensor, canvas: list[int], mode: str, fill: Tensor, texture: Tensor,
    offset: Tensor, texture_index: Tensor, stagger: int,
) -> Tensor:  # fmt: skip
    """``torch.ops.tipad.pad_stack``: pad ``N`` packed images each to ``canvas`` in one launch.

    The op under ``functional.pad_stack``. Canvas ``i`` equals ``pad`` of image ``i`` with
    padding ``(left_i, top_i, W - left_i - w_i, H - top_i - h_i)``. Differentiable w.r.t.
    ``images`` and ``texture``.

    Args:
        images: 1-D, the ``(C, h_i, w_i)`` images flattened and concatenated in order; any real
            or bool dtype, CPU or CUDA.
        sizes: ``(N, 4)`` integer ``(h_i, w_i, top_i, left_i)`` per image (read on the host):
            each image must fit the canvas at its place.
        canvas: ``[C, H, W]``, non-negative.
        mode, fill, texture, offset, texture_index, stagger: as ``pad``'s, per image (``N``
            rows of ``offset`` and ``texture_index``; ``fill`` ``(C,)``).

    Returns:
        ``(N, C, H, W)`` in ``images``' dtype and device, contiguous.

    Raises:
        ValueError: ``images`` not 1-D; a malformed ``sizes`` table, an image that does not fit
            its canvas, element counts that do not match (naming the sample); the errors of
            ``pad`` for the other arguments.
    """
    if not tracing():
        check_ints("canvas", canvas)
    _check_call(_NO_PADDING, mode, stagger, images=images, sizes=sizes, fill=fill, texture=texture,
                offset=offset, texture_index=texture_index)  # fmt: skip
    return _PAD_STACK(images, sizes, canvas, mode, fill, texture, offset, texture_index, stagger)


def pad_stack_backward(
    grad: Tensor, sizes: Tensor, numel: int, mode: str, texture: Tensor, offset: Tensor,
    texture_index: Tensor, stagger: int,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``torch.ops.tipad.pad_stack_backward``: the gradients of ``pad_stack``,
    ``(grad_images, grad_texture)``.

    Args:
        grad: ``(N, C, H, W)``, the gradient of ``pad_stack``'s output (a floating dtype).
        sizes: the ``sizes`` table given to ``pad_stack``.
        numel: ``images.numel()`` of ``pad_stack``'s packed images.
        mode, texture, offset, texture_index, stagger: as given to ``pad_stack``.

    Returns:
        ``grad_images`` ``(numel,)`` and ``grad_texture`` of ``texture``'s shape, in ``grad``'s
        dtype and device; sums as ``pad_backward``, per image (half types accumulate in
        float32).

    Raises:
        TypeError / ValueError: as ``pad_stack`` and ``pad_backward``, naming the argument.
    """
    if not tracing():
        check_scalar_int("numel", numel)
    _check_call(_NO_PADDING, mode, stagger, grad=grad, sizes=sizes, texture=texture, offset=offset,
                texture_index=texture_index)  # fmt: skip
    return _PAD_STACK_BACKWARD(grad, sizes, numel, mode, texture, offset, texture_index, stagger)
