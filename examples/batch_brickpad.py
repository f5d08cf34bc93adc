"""Pad whole batches with a brick wall, one random lattice offset per sample, in one launch.

Two places a training pipeline can do it:

1. in ``collate_fn``, on CPU batches, inside the DataLoader workers (``spawn`` workers run the
   Taichi kernel; ``fork`` workers after the parent padded fall back to a torch route);
2. after the batch reached the device (``--device cuda``), the way Lightning's
   ``on_after_batch_transfer`` or timm's prefetcher run GPU augmentation.

    python examples/batch_brickpad.py                # CPU, 2 spawn workers
    python examples/batch_brickpad.py --device cuda  # pads on the GPU after the transfer

Writes ``out/batch_brickpad.png`` (the first batch) and prints the offsets drawn per sample.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2
from torchvision.utils import save_image

from tipad_transforms import BrickPad
from tipad_transforms.assets import SAMPLE_NAMES, load_sample


class Crops(Dataset[torch.Tensor]):
    """Random 96x96 uint8 crops of the bundled sample photos, as (3, 96, 96) tensors."""

    def __init__(self, length: int = 64) -> None:
        self.images = [
            v2.functional.pil_to_tensor(load_sample(n).convert("RGB")) for n in SAMPLE_NAMES
        ]
        self.crop = v2.RandomCrop(96)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        out: torch.Tensor = self.crop(self.images[i % len(self.images)])
        return out


class BrickCollate:
    """``collate_fn``: stack the samples, then pad the batch; an offset per sample, one launch."""

    def __init__(self, padding: int) -> None:
        self.pad = BrickPad(padding, random_offset=True)

    def __call__(self, samples: list[torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = self.pad(torch.stack(samples))
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to pad after the transfer")
    parser.add_argument("--padding", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)

    on_device = args.device != "cpu"
    device_pad = BrickPad(args.padding, random_offset=True)
    loader = DataLoader(
        Crops(),
        batch_size=16,
        num_workers=args.workers,
        multiprocessing_context="spawn" if args.workers else None,
        # On the device, collate only stacks; the padding happens after the transfer.
        collate_fn=torch.stack if on_device else BrickCollate(args.padding),
    )
    start = time.perf_counter()
    for i, batch in enumerate(loader):
        if on_device:
            batch = device_pad(batch.to(args.device, non_blocking=True))
        if i == 0:
            Path("out").mkdir(exist_ok=True)
            save_image(batch[:8].float() / 255, "out/batch_brickpad.png", nrow=4)
            params = device_pad.make_params([batch])  # what one call draws: (16, 2) offsets
            print(f"batch {tuple(batch.shape)} {batch.dtype} on {batch.device}")
            print(
                "offsets one call draws per sample (oy, ox):", params["offset"][:4].tolist(), "..."
            )
    print(
        f"{len(loader)} batches in {time.perf_counter() - start:.2f} s "
        "(each spawned worker pays its own start-up); wrote out/batch_brickpad.png"
    )


if __name__ == "__main__":
    main()
