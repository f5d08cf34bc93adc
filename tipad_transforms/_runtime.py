"""The one module that talks to Taichi.

Everything Taichi-specific lives here: importing it quietly, initialising it lazily (once per
process, under a lock, on the arch of the first tensor it sees), refusing the devices it cannot
serve, ordering its launches with torch's CUDA streams, surviving ``fork`` and the kernels
themselves. The rest of the package hands in contiguous torch tensors and gets them written; it
never imports ``taichi``. Another backend could replace this file.

Facts this module is built on (taichi 1.7): ``ti.init`` resets the whole runtime, so it is called
at most once and never when the user already initialised Taichi; a process forked after
initialisation hangs on its first launch; CUDA work runs on device 0's primary context and the
legacy default stream; a CPU tensor given to a CUDA kernel (or the reverse) is silently copied;
any argument with ``requires_grad`` gets a ``.grad`` written; the first launch must come from the
thread that initialised.
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
import contextlib
import io
import os
import threading
from collections.abc import Iterator
from typing import Any

import torch

from ._geometry import MODE_CODES, PadGeometry

__all__ = ["RuntimeUnavailable", "launch_pad", "refusal", "runtime_arch"]


class RuntimeUnavailable(RuntimeError):
    """The Taichi runtime of this process cannot serve a tensor on this device."""


_lock = threading.RLock()
_state: dict[str, Any] = {"ti": None, "arch": None, "pid": None, "kernels": None}


def _reset_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in the child.
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _import_taichi() -> Any:
    if _state["ti"] is None:
        # Quiet by default: no import banner, no version-check thread that phones home.
        os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
        os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
        import taichi as ti

        _state["ti"] = ti
    return _state["ti"]


def _existing_arch(ti: Any) -> str | None:
    """The arch of a runtime the user (or we) already initialised, else None."""
    impl = ti.lang.impl
    if impl.get_runtime().prog is None:
        return None
    arch = impl.current_cfg().arch
    return "cuda" if arch == ti.cuda else ("cpu" if arch in (ti.x64, ti.arm64) else str(arch))


def runtime_arch() -> str | None:
    """``"cpu"``/``"cuda"`` once Taichi runs in this process (ours or the user's), else None."""
    ti = _state["ti"]
    if ti is None:
        return None
    return _existing_arch(ti)


def refusal(device: torch.device) -> str | None:
    """Why the Taichi kernels cannot run on ``device`` in this process, or None if they can.

    Never initialises anything. The reasons are the cases where a launch would hang, be silently
    wrong, or go through Taichi's hidden host-copy path.
    """
    if device.type not in ("cpu", "cuda"):
        return f"Taichi kernels run on cpu and cuda tensors only, not {device.type}"
    if device.type == "cuda" and (device.index or 0) != 0:
        return (
            f"Taichi uses only the first CUDA device's context; {device} would be read from "
            "the wrong device. Run one process per GPU with CUDA_VISIBLE_DEVICES set"
        )
    pid = _state["pid"]
    if pid is not None and pid != os.getpid():
        return (
            "this process was forked after Taichi started in its parent, and Taichi hangs in "
            "such a child. Use multiprocessing_context='spawn' (or 'forkserver') for DataLoader "
            "workers to run the kernels there"
        )
    if pid is None and _state["ti"] is not None:
        arch = _existing_arch(_state["ti"])
        if arch is not None and arch != device.type:
            return f"Taichi was initialised on {arch}, the tensor is on {device.type}"
    arch = _state["arch"]
    if arch is not None and arch != device.type:
        return f"Taichi runs on {arch} in this process, the tensor is on {device.type}"
    return None


def _ensure(device: torch.device) -> Any:
    """Initialise (once) and return the kernels; caller holds the lock and checked ``refusal``."""
    if _state["kernels"] is not None:
        return _state["kernels"]
    ti = _import_taichi()
    arch = _existing_arch(ti)
    if arch is None:
        with contextlib.redirect_stdout(io.StringIO()):
            ti.init(
                arch=ti.cuda if device.type == "cuda" else ti.cpu,
                default_ip=ti.i32,
                log_level=ti.WARN,
                # Kernels read torch memory; Taichi's own pool only needs to be tiny.
                device_memory_GB=0.25,
            )
        arch = _existing_arch(ti)
    elif arch != device.type:
        raise RuntimeUnavailable(
            f"Taichi was initialised on {arch}, the tensor is on {device.type}"
        )
    _state["arch"] = arch
    _state["pid"] = os.getpid()
    _state["kernels"] = _build_kernels(ti)
    return _state["kernels"]


@contextlib.contextmanager
def _ordered_with_torch(device: torch.device) -> Iterator[None]:
    """Order a Taichi launch (legacy default stream) with torch's current stream.

    Events, not host syncs: the default stream waits for the work queued on the side stream, and
    the side stream waits for the Taichi kernel.
    """
    if device.type != "cuda":
        yield
        return
    current = torch.cuda.current_stream(device)
    default = torch.cuda.default_stream(device)
    if current == default:
        yield
        return
    default.wait_stream(current)
    yield
    current.wait_stream(default)


def _build_kernels(ti: Any) -> dict[str, Any]:
    """Compile-on-demand kernels. One body serves forward and backward (``backward`` template)."""
    nd = ti.types.ndarray
    texture, constant = MODE_CODES["texture"], MODE_CODES["constant"]
    edge, reflect, symmetric = MODE_CODES["edge"], MODE_CODES["reflect"], MODE_CODES["symmetric"]

    @ti.func
    def fold(i: ti.i32, n: ti.i32, mode: ti.i32) -> ti.i32:
        # Source index of position i (may lie outside [0, n)) along an axis of length n; the
        # numpy.pad meaning, which repeats reflections/wraps when the padding exceeds n.
        r = i
        if mode == edge:
            r = ti.min(ti.max(i, 0), n - 1)
        elif mode == reflect:
            if n == 1:
                r = 0
            else:
                period = 2 * n - 2
                r = i % period  # Taichi's % on ints is Python's: the result is non-negative
                if r >= n:
                    r = period - r
        elif mode == symmetric:
            period = 2 * n
            r = i % period
            if r >= n:
                r = period - 1 - r
        else:  # circular
            r = i % n
        return r

    @ti.func
    def border(
        img: ti.template(),
        canvas: ti.template(),
        tex: ti.template(),
        fill: ti.template(),
        row: ti.i32,
        x0: ti.i32,
        x1: ti.i32,
        plane: ti.i32,
        c: ti.i32,
        tc: ti.i32,
        iy: ti.i32,
        k: ti.i32,
        oy: ti.i32,
        ox: ti.i32,
        ct: ti.i32,
        th: ti.i32,
        tw: ti.i32,
        stagger: ti.i32,
        h: ti.i32,
        w: ti.i32,
        left: ti.i32,
        mode: ti.i32,
        backward: ti.template(),
    ):  # no "-> None": Taichi reads the return annotation as a return type
        # Output pixels [x0, x1) of one canvas row, all outside the image. c is the image
        # channel, tc the texture channel (c, or 0 for a one-channel texture).
        if mode == texture:
            y = iy - oy
            v = y // th  # floor division, so rows above the image get negative tile rows
            ty = y - v * th
            base = ((k * ct + tc) * th + ty) * tw
            tx = (x0 - left - ox - v * stagger) % tw
            # Advance the tile column incrementally: no division per pixel.
            for X in range(x0, x1):
                if ti.static(backward):
                    tex[base + tx] += canvas[row + X]
                else:
                    canvas[row + X] = tex[base + tx]
                tx += 1
                if tx == tw:
                    tx = 0
        elif mode == constant:
            if ti.static(not backward):
                value = fill[c]
                for X in range(x0, x1):
                    canvas[row + X] = value
        else:
            src = (plane * h + fold(iy, h, mode)) * w
            for X in range(x0, x1):
                if ti.static(backward):
                    img[src + fold(X - left, w, mode)] += canvas[row + X]
                else:
                    canvas[row + X] = img[src + fold(X - left, w, mode)]

    @ti.kernel
    def pad_rows(
        img: nd(ndim=1),
        canvas: nd(ndim=1),
        tex: nd(ndim=1),
        fill: nd(ndim=1),
        offset: nd(dtype=ti.i32, ndim=1),
        tex_index: nd(dtype=ti.i32, ndim=1),
        n_planes: ti.i32,
        c_count: ti.i32,
        h: ti.i32,
        w: ti.i32,
        top: ti.i32,
        left: ti.i32,
        out_h: ti.i32,
        out_w: ti.i32,
        mode: ti.i32,
        tex_channels: ti.i32,
        th: ti.i32,
        tw: ti.i32,
        stagger: ti.i32,
        backward: ti.template(),
    ):  # no "-> None": Taichi reads the return annotation as a return type
        # Forward: canvas <- image and border. Backward: img (grad) += canvas (grad) along the
        # same index map, and tex (grad) += border grads. One parallel task per canvas row.
        for r in range(n_planes * out_h):
            plane = r // out_h
            big_y = r - plane * out_h
            b = plane // c_count
            c = plane - b * c_count
            iy = big_y - top
            row = r * out_w
            k = 0
            oy = 0
            ox = 0
            ct = 0
            if mode == texture:
                k = tex_index[b]
                oy = offset[2 * b]
                ox = offset[2 * b + 1]
                ct = tex_channels
            tc = c if tex_channels == c_count else 0
            if 0 <= iy < h:
                src = (plane * h + iy) * w
                dst = row + left
                for j in range(w):
                    if ti.static(backward):
                        img[src + j] += canvas[dst + j]
                    else:
                        canvas[dst + j] = img[src + j]
                border(
                    img,
                    canvas,
                    tex,
                    fill,
                    row,
                    0,
                    left,
                    plane,
                    c,
                    tc,
                    iy,
                    k,
                    oy,
                    ox,
                    ct,
                    th,
                    tw,
                    stagger,
                    h,
                    w,
                    left,
                    mode,
                    backward,
                )
                border(
                    img,
                    canvas,
                    tex,
                    fill,
                    row,
                    left + w,
                    out_w,
                    plane,
                    c,
                    tc,
                    iy,
                    k,
                    oy,
                    ox,
                    ct,
                    th,
                    tw,
                    stagger,
                    h,
                    w,
                    left,
                    mode,
                    backward,
                )
            else:
                border(
                    img,
                    canvas,
                    tex,
                    fill,
                    row,
                    0,
                    out_w,
                    plane,
                    c,
                    tc,
                    iy,
                    k,
                    oy,
                    ox,
                    ct,
                    th,
                    tw,
                    stagger,
                    h,
                    w,
                    left,
                    mode,
                    backward,
                )

    return {"pad_rows": pad_rows}


# Bits-only views: padding moves data, so every dtype runs as a same-size integer and copies
# stay bit exact (bool, bfloat16 and unsigned types included, which Taichi cannot take).
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(_BITS[t.element_size()])


def launch_pad(
    geometry: PadGeometry,
    mode: str,
    image: torch.Tensor,
    canvas: torch.Tensor,
    *,
    texture: torch.Tensor,
    fill: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
    backward: bool = False,
) -> None:
    """Run the padding kernel. All tensors contiguous, detached and on one device.

    Forward: writes every element of ``canvas`` (``(N, C, H', W')``) from ``image``
    (``(N, C, H, W)``), ``texture`` (``(K, Ct, th, tw)``, Ct in {1, C}) or ``fill`` (``(C,)``),
    all of one dtype. Backward (float32/float64 only): adds the canvas gradient into ``image``
    (the input gradient, zero-initialised) and ``texture`` (its gradient). ``offset`` is ``(N, 2)``
    int32, ``texture_index`` ``(N,)`` int32.

    Raises ``RuntimeUnavailable`` when ``refusal(device)`` gives a reason.
    """
    device = canvas.device
    reason = refusal(device)
    if reason is not None:
        raise RuntimeUnavailable(reason)
    g = geometry
    if backward:  # float gradients: accumulated, so no integer views
        img_arg, canvas_arg = image.reshape(-1), canvas.reshape(-1)
        tex_arg, fill_arg = texture.reshape(-1), fill.reshape(-1)
    else:
        img_arg, canvas_arg = _bits(image), _bits(canvas)
        tex_arg, fill_arg = _bits(texture), _bits(fill)
    # Taichi needs non-empty arguments; a one-element dummy is never read.
    if tex_arg.numel() == 0:
        tex_arg = canvas_arg.new_zeros(1)
    if fill_arg.numel() == 0:
        fill_arg = canvas_arg.new_zeros(1)
    if img_arg.numel() == 0:
        img_arg = canvas_arg.new_zeros(1)
    tex_channels = texture.shape[1] if texture.dim() == 4 else 1
    th, tw = (texture.shape[-2], texture.shape[-1]) if texture.dim() == 4 else (1, 1)
    with _lock:
        kernels = _ensure(device)
        if canvas_arg.numel() == 0:
            return
        with _ordered_with_torch(device):
            kernels["pad_rows"](
                img_arg,
                canvas_arg,
                tex_arg,
                fill_arg,
                offset.reshape(-1),
                texture_index.reshape(-1),
                g.n * g.c,
                g.c,
                g.h,
                g.w,
                g.top,
                g.left,
                g.out_h,
                g.out_w,
                MODE_CODES[mode],
                tex_channels,
                th,
                tw,
                stagger,
                backward,
            )
