"""PIL round trip: image -> tensor -> padded tensor -> image of the same mode."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import PIL.Image
import torch

__all__ = ["pil_apply"]


def pil_apply(img: PIL.Image.Image, fn: Callable[[torch.Tensor], torch.Tensor]) -> PIL.Image.Image:
    """Apply ``fn`` (``(C, H, W)`` -> ``(C, H', W')`` tensors) to a PIL image, keeping its mode.

    Palette images are padded in RGB(A) and mapped back onto their own palette, so texture
    colours stay colours rather than palette indices. 16-bit images run as int32.
    """
    if img.mode in ("P", "PA"):
        rgb_mode = "RGBA" if img.mode == "PA" or "transparency" in img.info else "RGB"
        padded = pil_apply(img.convert(rgb_mode), fn)
        return padded.quantize(palette=img, dither=PIL.Image.Dither.NONE)
    arr = np.array(img)  # a writable copy: torch refuses read-only buffers
    native = arr.dtype
    if native == np.uint16 or native.byteorder not in ("=", "|"):
        arr = arr.astype(np.int32)
    t = torch.from_numpy(np.ascontiguousarray(arr))
    t = t.permute(2, 0, 1) if t.dim() == 3 else t[None]
    result = fn(t)
    out = result.permute(1, 2, 0) if arr.ndim == 3 else result[0]
    out_arr = out.contiguous().numpy().astype(native, copy=False)
    if img.mode == "1":
        return PIL.Image.fromarray(out_arr).convert("1")
    h, w = out_arr.shape[:2]
    return PIL.Image.frombytes(img.mode, (w, h), out_arr.tobytes())
