"""Train a small CNN on digits of random sizes: PadCollate batches them, BrickPad augments.

The data is scikit-learn's ``load_digits`` (1,797 8x8 handwritten digits that ship inside the
scikit-learn wheel: nothing is downloaded; ``pip install -e '.[examples]'``). Every training
sample is resized to a fresh random ``(h, w)``, each side in ``[16, 32]``, every time it is
read; the held-out test samples get one fixed random size each. So the images of a batch
differ in size, and the pipeline is the one this package is for:

1. DataLoader workers (``forkserver`` or ``spawn``: they run the Taichi kernel) resize samples;
   ``PadCollate`` pads the whole batch to its largest image (rounded up to a multiple of 8) in
   one launch, each image at a random place on a brick wall: ``(images, labels)``;
2. ``DeviceLoader`` moves each batch to the device (a side stream on CUDA) and runs
   ``BrickPad(4, random_offset=True)`` there: every sample gets its own lattice offset, the
   whole batch one launch; then scales to float.

The test set goes through ``GPUCollate`` instead (no workers: it pads on the device itself).

    python examples/train_classifier.py              # 8 epochs, cuda when present
    python examples/train_classifier.py --quick      # 3 epochs (the test runs this)
    python examples/train_classifier.py --device cpu --epochs 12 --workers 0

Prints a table with the loss and the train and test accuracy per epoch.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from tipad_transforms import BrickPad
from tipad_transforms.data import DeviceLoader, GPUCollate, PadCollate

SIDES = (16, 32)  # random side lengths of the resized digits, inclusive
MULTIPLE = 8  # batch canvases are rounded up to a multiple of this
WIDTHS = (5, 6, 9, 8, 10, 5)  # columns of the per-epoch table


def load_digit_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """``(1797, 1, 8, 8)`` uint8 digits (0-255) and ``(1797,)`` int64 labels."""
    # Imported here, not at the top: spawned workers import this file and need no scikit-learn.
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise SystemExit("this example needs scikit-learn: pip install -e '.[examples]'") from err
    digits = load_digits()
    pixels = torch.from_numpy(digits.images).mul(255 / 16).round().to(torch.uint8)
    return pixels.unsqueeze(1), torch.from_numpy(digits.target).long()


class ResizedDigits(Dataset[tuple[torch.Tensor, int]]):
    """``(image, label)`` pairs; ``image`` is a ``(1, h, w)`` uint8 digit, ``h, w`` in ``SIDES``.

    ``fixed_seed=None``: a new random size on every read (drawn from torch's global RNG, which
    the DataLoader seeds differently in every worker). An int: one size per sample, for ever.
    """

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, fixed_seed: int | None = None
    ) -> None:
        self.images = images
        self.labels = labels
        self.sizes: list[list[int]] | None = None
        if fixed_seed is not None:
            g = torch.Generator().manual_seed(fixed_seed)
            self.sizes = torch.randint(
                SIDES[0], SIDES[1] + 1, (len(images), 2), generator=g
            ).tolist()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.sizes is None:
            size = torch.randint(SIDES[0], SIDES[1] + 1, (2,)).tolist()
        else:
            size = self.sizes[i]
        image = v2.functional.resize(self.images[i], size, antialias=True)
        return image, int(self.labels[i])


def make_model() -> nn.Module:
    """A small CNN for ``(B, 1, H, W)`` float inputs of any ``H, W >= 8``.

    Global max pooling makes it indifferent to the canvas size; four 3x3 stages with three
    poolings see 30 px, about a whole digit.
    """

    def stage(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *stage(1, 8),
        nn.MaxPool2d(2),
        *stage(8, 16),
        nn.MaxPool2d(2),
        *stage(16, 32),
        nn.MaxPool2d(2),
        *stage(32, 64),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def split(n: int, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffled train and test indices (a fixed split for a given seed)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_test = int(n * test_fraction)
    return order[n_test:], order[:n_test]


def evaluate(model: nn.Module, loader: Any) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += int((model(images).argmax(1) == labels).sum())
            total += len(labels)
    return correct / total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, help="default 8 (3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="3 epochs: a smoke run")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument(
        "--start-method",
        # forkserver: one server process imports torch, each worker is forked from it (cheaper
        # than spawn); both run the Taichi kernel, where fork after this process padded would not.
        default="forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn",
        choices=mp.get_all_start_methods(),
        help="how workers start (default forkserver where available, else spawn)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    epochs = args.epochs or (3 if args.quick else 8)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cpu" and args.workers:
        # Leave the workers their cores: a parallel region waits for its slowest thread.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - args.workers))
    start = time.perf_counter()

    images, labels = load_digit_arrays()
    train_idx, test_idx = split(len(images), 0.2, args.seed)
    train_set = ResizedDigits(images[train_idx], labels[train_idx])
    test_set = ResizedDigits(images[test_idx], labels[test_idx], fixed_seed=args.seed + 1)

    to_float = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5], [0.5])])
    workers: dict[str, Any] = {}
    if args.workers:
        # Persistent: the workers (and Taichi in each) start once, not every epoch.
        workers = {"multiprocessing_context": args.start_method, "persistent_workers": True}
    train_loader = DeviceLoader(
        DataLoader(
            train_set,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.workers,
            collate_fn=PadCollate(multiple=MULTIPLE, placement="random"),
            pin_memory=device.type == "cuda",
            generator=torch.Generator().manual_seed(args.seed),
            **workers,
        ),
        device,
        transforms=v2.Compose([BrickPad(4, random_offset=True), to_float]),
    )
    # No workers for the test set: GPUCollate pads on the device (the same canvases the
    # training batches get, centred, without random offsets).
    test_loader = DataLoader(
        test_set,
        batch_size=256,
        collate_fn=GPUCollate(
            device,
            transforms=v2.Compose([BrickPad(4), to_float]),
            multiple=MULTIPLE,
            random_offset=False,
        ),
    )

    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, args.lr, epochs=epochs, steps_per_epoch=len(train_loader)
    )
    loss_fn = nn.CrossEntropyLoss()
    print(
        f"digits: {len(train_set)} train / {len(test_set)} test, sides {SIDES[0]}-{SIDES[1]} px, "
        f"device {device}, {args.workers} workers"
    )
    header = ["epoch", "loss", "train acc", "test acc", "last batch", "s"]
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, WIDTHS, strict=True)))
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        model.train()
        loss_sum = correct = seen = 0.0
        shape: tuple[int, ...] = ()
        for batch, target in train_loader:
            logits = model(batch)
            loss = loss_fn(logits, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += float(loss.detach()) * len(target)
            correct += int((logits.argmax(1) == target).sum())
            seen += len(target)
            shape = tuple(batch.shape)
        test_acc = evaluate(model, test_loader)
        row = [
            str(epoch),
            f"{loss_sum / seen:.3f}",
            f"{correct / seen:.3f}",
            f"{test_acc:.3f}",
            "x".join(map(str, shape[1:])),
            f"{time.perf_counter() - t0:.1f}",
        ]
        print("  ".join(f"{c:>{w}}" for c, w in zip(row, WIDTHS, strict=True)))
    print(
        f"test accuracy {test_acc:.3f} after {epochs} epochs (chance 0.100); "
        f"total {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
