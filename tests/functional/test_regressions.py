"""Regressions found in review: each test failed on the code before its fix."""

from __future__ import annotations

import gc
import json

import PIL.Image
import pytest
import torch
from reference import assert_bitwise_equal, random_image, run_child, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms import TexturePad


def test_tile_column_does_not_overflow_int32_on_tall_canvases_with_wide_tiles() -> None:
    # v * stagger passes 2**31 from row ~43k on: the tile column must still follow the spec.
    tex = torch.arange(50000, dtype=torch.int32).reshape(1, 1, 50000)
    x = torch.zeros(1, 1, 1, dtype=torch.int32)
    got = F.texture_pad(x, (0, 0, 0, 49999), tex, stagger=49999)
    assert_bitwise_equal(got, texture_pad_ref(x, (0, 0, 0, 49999), tex, stagger=49999))


def test_inference_mode_tensors_pad() -> None:
    # Inference tensors have no version counter; the word-table cache must not need one.
    x = random_image((2, 3, 8, 8), torch.uint8, seed=1)
    tex = random_image((3, 2, 3), torch.uint8, seed=2)
    want = texture_pad_ref(x, 16, tex, stagger=1)
    with torch.inference_mode():
        got = F.texture_pad(x.clone(), 16, tex.clone(), stagger=1)
    assert_bitwise_equal(got, want)


def test_texture_pad_transform_never_serves_a_freed_textures_conversion() -> None:
    # The conversion cache was keyed by id(): a new texture reusing a freed one's id (and
    # version 0) got the old texture's conversion.
    image = torch.zeros(3, 2, 2, dtype=torch.uint8)
    t = TexturePad(1, torch.zeros(3, 2, 2))
    for i in range(60):
        t.texture = torch.full((3, 2, 2), float(i % 2))
        gc.collect()
        border = t(image)[:, 0, 0]
        assert border.tolist() == [255 * (i % 2)] * 3, i


def test_brick_pad_on_bool_images_draws_the_mortar_true() -> None:
    x = torch.zeros(1, 8, 8, dtype=torch.bool)
    out = F.brick_pad(x, 20)
    assert out.dtype == torch.bool
    border = out[0, :20]
    assert bool(border.any()) and not bool(border.all())  # a pattern, not a flat fill
    tile = F.make_brick_texture(channels=1)
    want = F.texture_pad(x, 20, tile >= 0.5, stagger=F.running_bond_stagger())
    assert torch.equal(out, want)


@pytest.mark.parametrize("call", ["pad", "texture_pad", "brick_pad"])
def test_out_with_a_pil_image_is_refused(call: str) -> None:
    img = PIL.Image.new("RGB", (4, 4))
    out = torch.empty(3, 8, 8, dtype=torch.uint8)
    with pytest.raises(TypeError, match="out"):
        if call == "pad":
            F.pad(img, 2, out=out)
        elif call == "texture_pad":
            F.texture_pad(img, 2, torch.rand(3, 2, 2), out=out)
        else:
            F.brick_pad(img, 2, out=out)


def test_pad_out_op_refuses_a_non_contiguous_out() -> None:
    x = random_image((3, 4, 4), torch.float32, seed=3)
    out = torch.empty(8, 8, 3).permute(2, 0, 1)  # right shape, not contiguous
    e = torch.empty(0)
    with pytest.raises(ValueError, match="out must be contiguous"):
        torch.ops.tipad.pad_out(
            x, [2, 2, 2, 2], "edge", e, e, torch.zeros(1, 2, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32), 0, out,
        )  # fmt: skip


def test_fork_after_the_user_started_taichi_does_not_hang() -> None:
    # The user's own ti.init (not ours) in the parent: forked workers must not launch Taichi.
    result = run_child(
        """
        import json, warnings
        import taichi as ti
        ti.init(arch=ti.cpu)
        import torch
        import tipad_transforms.functional as F
        from torch.utils.data import DataLoader, Dataset

        class Padded(Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                x = torch.arange(12, dtype=torch.float32).reshape(1, 3, 4) + i
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    y = F.pad(x, 2, padding_mode="reflect")
                return y, len(w)

        # No padding in the parent before the fork: only the user's ti.init marks the runtime.
        loader = DataLoader(Padded(), batch_size=2, num_workers=2,
                            multiprocessing_context="fork")
        got = [(y.tolist(), int(n.sum())) for y, n in loader]
        want = [F.pad(torch.arange(12, dtype=torch.float32).reshape(1, 3, 4) + i, 2, padding_mode=
                      "reflect").tolist() for i in range(4)]
        print(json.dumps({"equal": [g[0] for g in got] == [want[0:2], want[2:4]],
                          "warned": sum(g[1] for g in got)}))
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["equal"]
    assert report["warned"] >= 1  # the workers took the torch route and said so


def test_out_of_bank_index_is_refused_by_the_op_and_never_read_by_the_kernel() -> None:
    from tipad_transforms.ops.padding import PadCall, PadGeometry, taichi

    x = random_image((2, 1, 3, 3), torch.float32, seed=4)
    bank = random_image((2, 1, 2, 2), torch.float32, seed=5)
    offsets = torch.zeros(2, 2, dtype=torch.int32)
    bad = torch.tensor([0, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match="texture_index"):  # host-side index: checked
        torch.ops.tipad.pad(x, [1, 1, 1, 1], "texture", torch.empty(0), bank, offsets, bad, 0)
    # A device-resident index skips that check (it would sync the host): the kernel clamps it
    # into the bank, so it reads no memory outside the texture.
    g = PadGeometry.of(x.shape, [1, 1, 1, 1])
    canvas = torch.full(g.out_shape(x.shape), float("nan"))
    taichi.forward(PadCall(g, "texture", torch.empty(0), bank, offsets, bad, 0), x, canvas)
    want = texture_pad_ref(x, 1, bank, texture_index=torch.tensor([0, 1]))
    assert_bitwise_equal(canvas, want)


def test_complex_texture_is_refused_by_the_functional_as_by_the_transform() -> None:
    # One validation (functional.as_bank) serves texture_pad and TexturePad.
    tex = torch.zeros(3, 2, 2, dtype=torch.complex64)
    with pytest.raises(TypeError, match="texture must be real"):
        F.texture_pad(torch.zeros(3, 4, 4), 1, tex)
    with pytest.raises(TypeError, match="texture must be real"):
        TexturePad(1, tex)


def _written_through_data(tex: torch.Tensor, new: torch.Tensor) -> None:
    # .data shares the storage but not the version counter: the write is invisible to any
    # cache keyed on the version.
    version = tex._version
    tex.data.copy_(new)
    assert tex._version == version


def test_texture_written_through_data_is_seen() -> None:
    # The word-table cache was keyed by the texture's version counter: a texture rewritten
    # through .data kept padding with its old values. (A small texture, a large border: the
    # table is used.)
    texture = (3, 5, 7)
    x = random_image((3, 10, 12), torch.uint8, seed=31)
    tex = random_image(texture, torch.uint8, seed=32)
    for _ in range(2):
        assert_bitwise_equal(
            F.texture_pad(x, 24, tex, stagger=3), texture_pad_ref(x, 24, tex, stagger=3)
        )
    _written_through_data(tex, random_image(texture, torch.uint8, seed=33))
    assert_bitwise_equal(
        F.texture_pad(x, 24, tex, stagger=3), texture_pad_ref(x, 24, tex, stagger=3)
    )


def test_float_texture_written_through_data_is_converted_again() -> None:
    # The dtype-conversion cache (a float texture for uint8 images) had the same blind spot.
    x = random_image((3, 6, 6), torch.uint8, seed=34)
    tex = torch.rand(3, 4, 5, generator=torch.Generator().manual_seed(35))
    assert_bitwise_equal(F.texture_pad(x, 5, tex), texture_pad_ref(x, 5, tex))
    _written_through_data(tex, 1 - tex)
    assert_bitwise_equal(F.texture_pad(x, 5, tex), texture_pad_ref(x, 5, tex))


def test_a_first_call_in_inference_mode_does_not_break_a_later_backward() -> None:
    # The default lattice (zeros) and fill values are cached per shape: made first in
    # inference mode they were inference tensors, and a later training call, which saves
    # them for the backward, raised "Inference tensors cannot be saved for backward".
    x = torch.rand(7, 3, 5, 5, generator=torch.Generator().manual_seed(41))
    tex = torch.rand(3, 3, 4, generator=torch.Generator().manual_seed(42))
    with torch.inference_mode():
        F.texture_pad(x, 2, tex)
        F.pad(x, 2, fill=0.25)
    learned = tex.clone().requires_grad_()
    F.texture_pad(x, 2, learned).sum().backward()
    assert learned.grad is not None and float(learned.grad.sum()) > 0
    leaf = x.clone().requires_grad_()
    F.pad(leaf, 2, fill=0.25).sum().backward()
    assert leaf.grad is not None and torch.equal(leaf.grad, torch.ones_like(x))


def test_a_first_brick_pad_in_inference_mode_does_not_break_a_later_backward() -> None:
    # The brick tile is cached per (options, dtype, device); made first in inference mode it
    # was an inference tensor, and a later call on an image requiring grad saved it for the
    # backward: "Inference tensors cannot be saved for backward".
    x = torch.rand(2, 3, 6, 7, generator=torch.Generator().manual_seed(43))
    with torch.inference_mode():
        F.brick_pad(x, 3, brick_size=(5, 9), seed=4321)  # options no other test uses
    leaf = x.clone().requires_grad_()
    F.brick_pad(leaf, 3, brick_size=(5, 9), seed=4321).sum().backward()
    assert leaf.grad is not None and torch.equal(leaf.grad, torch.ones_like(x))
