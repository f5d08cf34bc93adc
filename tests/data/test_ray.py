"""``RayPadBatch`` on a local Ray instance: Ray Data batches equal ``PadCollate``'s, bit for bit.

One ``ray.init(num_cpus=2)`` for the module (start-up costs seconds), shut down after. A folder
of generated PNGs of mixed sizes goes through ``read_images`` -> ``map_batches(RayPadBatch)``
on CPU actors; every output batch is compared with ``PadCollate`` on the same decoded images
with the same parameters. Actors that die mid-run and are restarted give the same pixels (the
draws hang on the seed and the path only); a bad image fails with its path in the error; the
padded batches go on to training through ``iter_torch_batches``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
from reference import assert_bitwise_equal

from tipad_transforms.data import PadCollate, RayPadBatch

try:
    import ray
    import ray.data as ray_data
except ImportError:  # the cluster tests skip; the callable's own tests need no Ray
    ray = ray_data = None

# Ray Data's own configuration warns of its deprecated settings when a pipeline starts.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

ROOT = Path(__file__).resolve().parents[2]
N_IMAGES = 10
BATCH = 4


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    if ray is None:
        pytest.skip("needs the ray extra: pip install 'tipad_transforms[ray]'")
    # Workers import tipad_transforms from this checkout, and this module's classes by value.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), old]))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    ray_data.DataContext.get_current().enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _write_images(folder: Path, sizes: list[tuple[int, int]], channels: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(sizes) * 7 + channels)
    mode = {3: "RGB", 4: "RGBA"}[channels]
    for i, (h, w) in enumerate(sizes):
        pixels = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        PIL.Image.fromarray(pixels, mode=mode).save(folder / f"img{i:02d}.png")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    _write_images(path, [tuple(rng.integers(9, 30, 2).tolist()) for _ in range(N_IMAGES)])
    return path


def _decoded(path: str) -> torch.Tensor:
    """The file's pixels, decoded here (not by Ray), as ``(C, h, w)`` uint8."""
    with PIL.Image.open(path) as im:
        return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)


class Tagged(RayPadBatch):
    """``RayPadBatch`` that also tags each output row with its call (Ray may merge the outputs
    of several calls into one block, so blocks are not batches) and with whether the kernel
    could run in the worker."""

    def __call__(self, batch: Any) -> Any:
        from tipad_transforms.backends import TAICHI

        out = super().__call__(batch)
        n = len(batch["path"])
        out["call"] = np.array(["|".join(map(str, batch["path"]))] * n)
        # Whether this worker's Taichi runtime serves CPU tensors (else: the torch route).
        out["kernel"] = np.array([TAICHI.refusal(torch.device("cpu")) is None] * n)
        return out


def _run(folder: Path, fn: Any, **ray_args: Any) -> list[dict[str, Any]]:
    """The output rows of ``read_images -> map_batches(fn)``: ``fn`` an instance runs as Ray
    tasks (stateless), a class (with ``fn_constructor_kwargs``) as an actor pool."""
    ds = ray_data.read_images(str(folder), mode="RGB", include_paths=True)
    return ds.map_batches(fn, batch_size=BATCH, **ray_args).take_all()


def _check_against_pad_collate(rows: list[dict[str, Any]], kwargs: dict[str, Any]) -> None:
    """Rows grouped back into their calls' batches equal ``PadCollate`` on the same images."""
    reference = RayPadBatch(**kwargs)
    pad_kwargs = {k: v for k, v in kwargs.items() if k != "seed"}
    collate = PadCollate(**pad_kwargs, return_regions=True)
    calls: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        calls.setdefault(str(row["call"]), []).append(row)
    assert len(calls) >= 3 and all(len(c) <= BATCH for c in calls.values())
    assert all(bool(r["kernel"]) for r in rows), "a Ray worker could not run the kernel"
    for call in calls.values():
        keys = [str(r["path"]) for r in call]
        images = [_decoded(p) for p in keys]
        params = reference.make_params(keys, [tuple(im.shape[-2:]) for im in images])
        want_images, want_regions = collate(images, params=params)
        got = torch.from_numpy(np.stack([r["image"] for r in call]))
        assert_bitwise_equal(got, want_images)
        assert np.array_equal(np.stack([r["region"] for r in call]), want_regions.numpy())
    names = sorted(Path(str(r["path"])).name for r in rows)
    assert names == [f"img{i:02d}.png" for i in range(N_IMAGES)]


CONFIGS = {
    "brick-random-multiple": {"multiple": 8, "placement": "random", "seed": 3},
    "texture-fixed-size": {
        "size": 32,
        "placement": "random",
        "texture": torch.arange(5 * 7, dtype=torch.uint8).reshape(5, 7) * 7,
        "stagger": 3,
        "seed": 4,
    },
    "edge-center": {"multiple": (4, 8), "placement": "center", "padding_mode": "edge"},
}


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_batches_equal_pad_collate(cluster: None, folder: Path, config: str) -> None:
    kwargs = CONFIGS[config]
    _check_against_pad_collate(_run(folder, Tagged(**kwargs)), kwargs)


class CrashOnce(Tagged):
    """Kills its actor process on its first call, once per marker file: Ray restarts the
    actor and retries the batch on a fresh instance."""

    def __init__(self, marker: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker = marker

    def __call__(self, batch: Any) -> Any:
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return super().__call__(batch)
        os.close(fd)
        os._exit(1)


@pytest.mark.slow
def test_actor_pool_restarts_do_not_change_the_pixels(
    cluster: None, folder: Path, tmp_path: Path
) -> None:
    kwargs = CONFIGS["texture-fixed-size"]
    marker = tmp_path / "crashed"
    rows = _run(
        folder,
        CrashOnce,
        fn_constructor_kwargs={"marker": str(marker), **kwargs},
        # One actor (each costs seconds of start-up here): it dies and is restarted.
        compute=ray_data.ActorPoolStrategy(size=1),
        num_cpus=0.5,  # the actor and the read tasks share the two CPUs
    )
    assert marker.exists(), "no actor died: the test did not test restarts"
    _check_against_pad_collate(rows, kwargs)
    # A fixed canvas: a row's pixels do not depend on its batch either. Batches of 3 in
    # tasks against the restarted actors' batches of 4, row by row.
    ds = ray_data.read_images(str(folder), mode="RGB", include_paths=True)
    again = ds.map_batches(RayPadBatch(**kwargs), batch_size=3).take_all()
    by_path = {str(r["path"]): r for r in rows}
    assert len(again) == N_IMAGES
    for row in again:
        want = by_path[str(row["path"])]
        assert np.array_equal(row["image"], want["image"])
        assert np.array_equal(row["region"], want["region"])


@pytest.mark.slow
def test_bad_image_names_its_path(cluster: None, tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    _write_images(folder, [(12, 10), (11, 14), (40, 9), (13, 13)])  # img02 outgrows size=32
    with pytest.raises(Exception) as info:
        _run(folder, RayPadBatch(size=32))
    message = str(info.value)
    assert "img02.png" in message and "larger than size=(32, 32)" in message, message[-2000:]


@pytest.mark.slow
def test_hand_off_to_training_with_iter_torch_batches(cluster: None, folder: Path) -> None:
    ds = ray_data.read_images(str(folder), mode="RGB", include_paths=True)
    padded = ds.map_batches(RayPadBatch(size=32, placement="random"), batch_size=BATCH)
    seen = 0
    # A fixed canvas: Ray may regroup rows into training batches of any size.
    for batch in padded.drop_columns(["path"]).iter_torch_batches(batch_size=3, device="cpu"):
        images, regions = batch["image"], batch["region"]
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 32, 32)
        assert regions.dtype == torch.int64 and regions.shape == (len(images), 4)
        seen += len(images)
    assert seen == N_IMAGES


# ---------------------------------------------------------------------------------------------
# the callable itself, without Ray


def _batch(sizes: list[tuple[int, int]], start: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(start)
    images = np.empty(len(sizes), dtype=object)
    for i, (h, w) in enumerate(sizes):
        images[i] = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    paths = np.array([f"/data/img{start + i}.png" for i in range(len(sizes))])
    return {"image": images, "path": paths, "label": np.arange(len(sizes)) + start}


def test_draws_hang_on_seed_and_path_not_on_history() -> None:
    a, b = _batch([(9, 12), (14, 7)], 0), _batch([(10, 10), (8, 16), (12, 12)], 2)
    first = RayPadBatch(24, placement="random", seed=5)
    out_a, out_b = first(a), first(b)
    second = RayPadBatch(24, placement="random", seed=5)  # a fresh actor, other order
    again_b, again_a = second(b), second(a)
    for got, want in ((again_a, out_a), (again_b, out_b)):
        assert np.array_equal(got["image"], want["image"])
        assert np.array_equal(got["region"], want["region"])
        assert np.array_equal(got["label"], want["label"]) and list(got["path"]) == list(
            want["path"]
        )
    other = RayPadBatch(24, placement="random", seed=6)(a)
    assert not np.array_equal(other["region"], out_a["region"]), "the seed is not used"
    assert out_a["image"].shape == (2, 3, 24, 24) and out_a["region"].dtype == np.int64
    assert a["image"][0].shape == (9, 12, 3), "input modified"


def test_channels_first_and_grayscale_inputs() -> None:
    rng = np.random.default_rng(1)
    chw = {"image": np.stack([rng.integers(0, 9, (2, 5, 6)) for _ in range(2)]), "path": ["a", "b"]}
    out = RayPadBatch(multiple=4, channels_last=False, random_offset=False)(chw)
    assert out["image"].shape == (2, 2, 8, 8) and out["image"].dtype == chw["image"].dtype
    gray = {"image": [rng.integers(0, 9, (5, 6)).astype(np.float32)] * 2, "path": ["a", "b"]}
    assert RayPadBatch(padding_mode="edge")(gray)["image"].shape == (2, 1, 5, 6)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"placement": "left"}, ValueError, "placement must be one of"),
        ({"key_column": None, "placement": "random"}, ValueError, "key_column=None"),
        ({"key_column": 3}, TypeError, "key_column must be a str or None"),
        ({"image_column": None}, TypeError, "image_column must be a str"),
        ({"device": "cuda:1"}, ValueError, "ask Ray for num_gpus=1"),
        ({"size": 0}, ValueError, "size must be >= 1"),
        ({"padding_mode": "bogus"}, ValueError, "bogus"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RayPadBatch(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU machine")
def test_cuda_without_a_gpu_names_num_gpus() -> None:
    with pytest.raises(RuntimeError, match="pass num_gpus=1 to map_batches"):
        RayPadBatch(device="cuda")


def test_bad_rows_name_their_path() -> None:
    pad = RayPadBatch(16)
    batch = _batch([(9, 12), (20, 7)])
    with pytest.raises(ValueError, match=r"image '/data/img1.png': the image is 20x7, larger"):
        pad(batch)
    batch = _batch([(9, 12), (5, 7)])
    batch["image"][1] = batch["image"][1][..., :2]
    with pytest.raises(ValueError, match=r"image '/data/img1.png': the image has 2 channels"):
        pad(batch)
    batch["image"][1] = np.zeros((4, 4, 3, 1), np.uint8)
    with pytest.raises(ValueError, match=r"image '/data/img1.png': expected \(h, w\)"):
        pad(batch)
    batch["image"][1] = "not pixels"
    with pytest.raises(TypeError, match=r"image '/data/img1.png': expected a numpy array"):
        pad(batch)
    with pytest.raises(ValueError, match="no column 'path'"):
        RayPadBatch(placement="random")({"image": _batch([(3, 3)])["image"]})
    with pytest.raises(TypeError, match="dict of columns"):
        pad([np.zeros((3, 3, 3), np.uint8)])  # type: ignore[arg-type]
