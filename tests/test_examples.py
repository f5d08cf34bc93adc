"""The examples keep working: their building blocks run here on small inputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

import tipad_transforms.functional as F

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_batch_brickpad_collate_pads_each_sample_with_its_own_offset() -> None:
    example = _load("batch_brickpad")
    samples = [example.Crops(length=4)[i] for i in range(4)]
    torch.manual_seed(3)
    batch = example.BrickCollate(8)(samples)
    assert batch.shape == (4, 3, 112, 112) and batch.dtype == torch.uint8
    for i, sample in enumerate(samples):
        assert torch.equal(batch[i, :, 8:-8, 8:-8], sample)  # images untouched
    torch.manual_seed(3)
    offsets = example.BrickCollate(8).pad.make_params([torch.stack(samples)])["offset"]
    for i, sample in enumerate(samples):  # each sample's wall drawn at its own offset
        alone = F.brick_pad(sample, 8, offset=tuple(int(v) for v in offsets[i]))
        assert torch.equal(batch[i], alone)
    assert len({tuple(o.tolist()) for o in offsets}) > 1
