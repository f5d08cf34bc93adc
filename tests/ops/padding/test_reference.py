"""The padding family's torch backend (``ops/padding/reference.py``): what the warm-up and every
call Taichi cannot serve run. On the CPU it writes through the bulk copies of ``copies``
wherever one applies, elements of every width (the Taichi backend leaves wide ones to its
kernel), and through index maps elsewhere; both into the canvas itself.

Every dtype, every mode (textures with one lattice offset, an offset per sample, a bank index
per sample), batches, single images, 2-D images and borders folding over the image, stacks of
images of different sizes; the copies switched on and off; bit-exact against the independent
references into poisoned and fresh outputs, inputs untouched; a spy proves which form ran.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from reference import ALL_DTYPES, assert_bitwise_equal, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms import backends
from tipad_transforms.ops.padding import copies as pad_copies
from tipad_transforms.ops.padding import reference as pad_reference

pytestmark = pytest.mark.allow_fallback

# (shape, padding): a batch, one image, a 2-D image, a small image whose border folds over it
# twice (two runs a side) and so often that no copy form takes it (reflect's 40 columns of 3).
CASES = (
    ((3, 3, 37, 53), (5, 3, 7, 4)),
    ((3, 41, 29), (0, 6, 1, 0)),
    ((45, 61), (2, 0, 0, 9)),
    ((2, 2, 5, 6), (7, 9, 8, 6)),
    ((2, 3, 4, 3), (40, 1, 2, 40)),
)
TEXTURES = ("texture-one-offset", "texture-offsets", "texture-indices")
MODES = ("constant", "edge", "reflect", "symmetric", "circular", *TEXTURES)


@pytest.fixture(params=[True, False], ids=["copies", "maps"])
def forms(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every copy form on or off; yields the form each call of the torch backend took."""
    for switch in ("CONSTANT", "STANDARD", "TEXTURE", "LATTICES"):
        monkeypatch.setattr(pad_copies, switch, request.param)
    seen: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            if result is not False:
                seen.append(name)
            return result

        return wrapped

    # The maps' _pad also writes the first canvas of a "repeat" (its n is 1 there).
    monkeypatch.setattr(pad_copies, "write", spy("copies", pad_copies.write))
    monkeypatch.setattr(pad_copies, "repeat_first", spy("repeat", pad_copies.repeat_first))
    monkeypatch.setattr(pad_copies, "crop_walls", spy("walls", pad_copies.crop_walls))
    monkeypatch.setattr(pad_reference, "_pad", spy("maps", pad_reference._pad))
    return seen


def _call(x: torch.Tensor, pads: tuple[int, ...], mode: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """(the tipad call as a function of ``out``, the reference canvas)."""
    lead = x.shape[:-3]
    channels = x.shape[-3] if x.dim() >= 3 else 1
    if mode not in TEXTURES:
        fill: Any = 0
        if mode == "constant":
            fill = [1, 0, 1][:channels] if dtype == torch.bool else [7, -2.5, 3.0][:channels]
            fill = fill if channels > 1 else fill[0]
        return (
            lambda out: F.pad(x, list(pads), fill=fill, padding_mode=mode, out=out),
            pad_ref(x, pads, mode, fill),
        )
    n = int(torch.tensor(lead).prod()) if lead else 1
    gen = torch.Generator().manual_seed(n + channels)
    bank = random_image((3, channels, 5, 7), dtype, seed=60 + channels)
    kw: dict[str, Any] = {"stagger": 3, "texture_index": torch.ones(lead, dtype=torch.int64)}
    if mode == "texture-one-offset":
        kw["offset"] = (2, -9)
    else:
        kw["offset"] = torch.randint(-20, 20, (*lead, 2), generator=gen)
    if mode == "texture-indices":
        kw["texture_index"] = torch.randint(0, 3, lead, generator=gen)
    return (
        lambda out: F.texture_pad(x, list(pads), bank, out=out, **kw),
        texture_pad_ref(x, pads, bank, **kw),
    )


def _expected_forms(x: torch.Tensor, pads: tuple[int, ...], mode: str, on: bool) -> list[str]:
    """The forms one call takes: the copies for constant and standard modes (but a border of
    many folds, which edge's one constant run aside keeps the maps), a textured batch's copies
    of its first canvas, crops of one wall for one texture (one image included), the maps for
    everything else."""
    if not on:
        return ["maps"]
    n = int(torch.tensor(x.shape[:-3]).prod()) if x.dim() > 3 else 1
    if mode == "constant":
        return ["copies"]
    if mode not in TEXTURES:
        many = pads == (40, 1, 2, 40) and mode != "edge"
        return ["maps"] if many else ["copies"]
    if n > 1 and mode == "texture-indices":
        return ["maps"]
    return ["maps", "repeat"] if n > 1 and mode == "texture-one-offset" else ["walls"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_form_gives_the_references_bits(
    dtype: torch.dtype, mode: str, forms: list[str]
) -> None:
    on = pad_copies.CONSTANT
    for i, (shape, pads) in enumerate(CASES):
        x = random_image(shape, dtype, seed=i + dtype.itemsize)
        before = x.clone()
        pad, want = _call(x, pads, mode, dtype)
        out = torch.empty(want.shape, dtype=dtype)
        out.view(torch.uint8).fill_(0xAB)  # poisoned: every element must be written
        with backends.use("torch"):
            pad(out)
            assert_bitwise_equal(out, want)
            assert_bitwise_equal(pad(None), want)
        assert_bitwise_equal(x, before)
        expected = _expected_forms(x, pads, mode, on)
        assert forms == expected * 2, (shape, pads)
        forms.clear()


@pytest.mark.parametrize("mode", ["constant", "reflect", "texture"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64], ids=str)
def test_a_stack_of_sizes_gives_each_images_bits(
    dtype: torch.dtype, mode: str, forms: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs of equal geometry (constant mode's whole-stack copies), then one image at a time.
    monkeypatch.setattr(pad_copies, "STACK_MIN_BYTES", 0)
    sizes = [(6, 5), (6, 5), (9, 8), (1, 1), (9, 8)]
    images = [random_image((3, h, w), dtype, seed=70 + i) for i, (h, w) in enumerate(sizes)]
    placement = torch.tensor([[2, 3], [2, 3], [1, 2], [5, 7], [0, 4]])
    tile = random_image((3, 4, 5), dtype, seed=79)
    kw: dict[str, Any] = {"texture": tile, "stagger": 2} if mode == "texture" else {}
    befores = [img.clone() for img in images]
    with backends.use("torch"):
        got = F.pad_stack(images, (12, 12), placement, 5, mode, **kw)
    for canvas, img, (top, left) in zip(got, images, placement.tolist(), strict=True):
        h, w = img.shape[-2:]
        sides = (left, top, 12 - left - w, 12 - top - h)
        if mode == "texture":
            want = texture_pad_ref(img, sides, tile, stagger=2)
        else:
            want = pad_ref(img, sides, mode, 5)
        assert_bitwise_equal(canvas, want)
    for img, before in zip(images, befores, strict=True):
        assert_bitwise_equal(img, before)
    on = pad_copies.CONSTANT
    if mode == "constant" and on:
        assert forms == ["copies"]  # the whole stack in one pass of runs
    elif on:  # the images one by one, each as copies or a crop of the texture's one wall
        assert forms == ["copies" if mode == "reflect" else "walls"] * len(sizes)
    else:
        assert forms == ["maps"] * len(sizes)


@pytest.mark.parametrize("forms", [True], ids=["copies"], indirect=True)
def test_the_warm_up_takes_the_copies(forms: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A process's first calls (here: Taichi reported not running, a budget left) run on the
    # torch backend; a large uint8 batch in reflect mode is its copies, not a gather.
    from tipad_transforms.backends import TAICHI, warmup

    monkeypatch.setattr(TAICHI, "running", lambda: False)
    monkeypatch.setattr(warmup._State, "spent", 0.0)
    warmup.set_warmup(60.0)
    try:
        ran: list[Any] = []
        x = random_image((8, 3, 64, 64), torch.uint8, seed=80)
        with backends.record(ran):
            got = F.pad(x, 16, padding_mode="reflect")
    finally:
        warmup.set_warmup(None)
    assert [r[2] for r in ran] == ["torch"]
    assert forms == ["copies"]
    assert_bitwise_equal(got, pad_ref(x, 16, "reflect"))
