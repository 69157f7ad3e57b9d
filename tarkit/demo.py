"""The parts of ``tarkit demo``: a real dataset, an augmentation, and a small classifier.

The dataset is scikit-learn's 1,797 handwritten digits (8x8 greyscale scans, shipped inside
the package: nothing is downloaded), upscaled to 32x32 PNGs. ``digits_train`` and
``digits_test`` are factories for ``tarkit shard --dataset tarkit.demo:digits_train``;
``augment_sample`` is the per-sample program ``tarproc`` runs
(``python -m tarkit.demo augment``); ``train`` fits a small convolutional network on
shards with :class:`tarkit.ShardDataset` and ``DataLoader`` workers.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

SIZE = 32  # pixels; the 8x8 scans are upscaled so that they are visible in a contact sheet


class Digits:
    """A map-style dataset of samples ``{"__key__", "png", "cls"}``: one split of the digits.

    A sample's key is the scan's index in scikit-learn's dataset (``digit-0004``), so keys
    are unique across the splits and lead back to the original scan.
    """

    def __init__(self, split: str) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.indices = _split_indices(len(digits.target), split)
        self.images = [digits.images[i] for i in self.indices]
        self.labels = [int(digits.target[i]) for i in self.indices]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from PIL import Image

        pixels = (self.images[index] * (255.0 / 16.0)).clip(0, 255).astype("uint8")
        image = Image.fromarray(pixels, mode="L").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        return {
            "__key__": f"digit-{self.indices[index]:04d}",
            "png": image,
            "cls": self.labels[index],
        }


def _split_indices(count: int, split: str) -> list[int]:
    """A fixed split: every fifth scan is a test scan.

    >>> _split_indices(10, "test")
    [4, 9]
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    return [i for i in range(count) if (i % 5 == 4) == (split == "test")]


def digits_train() -> Digits:
    """The training split (1,438 scans)."""
    return Digits("train")


def digits_test() -> Digits:
    """The test split (359 scans)."""
    return Digits("test")


def augment_image(image: Any, key: str) -> Any:
    """A random affine distortion of ``image``, seeded by the sample key (reproducible)."""
    import random

    from PIL import Image

    rng = random.Random(zlib.crc32(key.encode("utf-8")))
    angle = rng.uniform(-12, 12)
    scale = rng.uniform(0.9, 1.1)
    shift = (rng.uniform(-2, 2), rng.uniform(-2, 2))
    return (
        image.rotate(angle, resample=Image.Resampling.BILINEAR, translate=shift, fillcolor=0)
        .resize((round(SIZE * scale),) * 2, Image.Resampling.BILINEAR)
        .resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    )


def augment_sample(directory: str = ".") -> None:
    """Run inside a tarproc sample directory: replace ``sample.png`` by a distorted copy."""
    from PIL import Image

    path = os.path.join(directory, "sample.png")
    key = os.environ.get("TARKIT_KEY", "")
    with Image.open(path) as image:
        distorted = augment_image(image.convert("L"), key)
    distorted.save(path, format="PNG", optimize=False)


@dataclass
class EpochReport:
    epoch: int
    loss: float
    accuracy: float
    samples: int
    seconds: float

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


@dataclass
class TrainingResult:
    epochs: list[EpochReport] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.epochs[-1].accuracy if self.epochs else 0.0


def _model() -> Any:
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def _channels(images: Any) -> Any:
    """Greyscale batches decode as (N, H, W); the network wants (N, 1, H, W)."""
    return images.unsqueeze(1) if images.dim() == 3 else images


def train(
    train_urls: Sequence[str],
    test_urls: Sequence[str],
    *,
    epochs: int = 6,
    batch_size: int = 64,
    num_workers: int = 2,
    seed: int = 0,
    report: Callable[[EpochReport], None] | None = None,
    model_path: str | None = None,
) -> TrainingResult:
    """Train the digits classifier from shards; return per-epoch loss and test accuracy."""
    import torch

    from .loading import loader

    torch.manual_seed(seed)
    torch.set_num_threads(1)  # two workers decode on the other core
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    options = {"decode": "torchl", "to_tuple": ("png", "cls")}
    train_loader = loader(
        list(train_urls), batch_size, num_workers, shuffle=500, seed=seed,
        persistent_workers=num_workers > 0, **options,
    )  # fmt: skip
    test_loader = loader(list(test_urls), 256, 0, **options)
    result = TrainingResult()
    for epoch in range(epochs):
        train_loader.set_epoch(epoch)
        model.train()
        started = time.perf_counter()
        total_loss, seen = 0.0, 0
        for images, labels in train_loader:
            images = _channels(images)
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            total_loss += float(loss.detach()) * len(labels)
            seen += len(labels)
        seconds = time.perf_counter() - started
        model.eval()
        correct = tested = 0
        with torch.no_grad():
            for images, labels in test_loader:
                images = _channels(images)
                correct += int((model(images).argmax(1) == labels).sum())
                tested += len(labels)
        epoch_report = EpochReport(
            epoch + 1, total_loss / max(seen, 1), correct / max(tested, 1), seen, seconds
        )
        result.epochs.append(epoch_report)
        if report is not None:
            report(epoch_report)
    if model_path is not None:
        torch.save(model.state_dict(), model_path)
    return result


USAGE = """usage: python -m tarkit.demo augment [DIR]
       python -m tarkit.demo train OUT [EPOCHS [WORKERS]]
"""


def train_folder(out: str, epochs: int = 6, num_workers: int = 2) -> TrainingResult:
    """Train on ``OUT/shards/train-*`` and ``OUT/augmented/*``, test on ``OUT/shards/test-*``.

    Prints one line per epoch and writes ``OUT/metrics.json`` and ``OUT/model.pt``.
    """
    import glob
    import json

    train_urls = sorted(glob.glob(os.path.join(out, "shards", "train-*.tar")))
    train_urls += sorted(glob.glob(os.path.join(out, "augmented", "*.tar")))
    test_urls = sorted(glob.glob(os.path.join(out, "shards", "test-*.tar")))
    if not train_urls or not test_urls:
        raise FileNotFoundError(f"no shards under {out}/shards: run the sharding step first")

    def show(r: EpochReport) -> None:
        print(
            f"epoch {r.epoch}: loss {r.loss:.3f}, test accuracy {r.accuracy:.1%}, "
            f"{r.samples_per_second:,.0f} samples/s",
            flush=True,
        )

    result = train(
        train_urls, test_urls, epochs=epochs, num_workers=num_workers, report=show,
        model_path=os.path.join(out, "model.pt"),
    )  # fmt: skip
    metrics = {
        "train_shards": len(train_urls),
        "test_shards": len(test_urls),
        "epochs": [vars(e) for e in result.epochs],
        "accuracy": result.accuracy,
    }
    with open(os.path.join(out, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=1)
    return result


def main(argv: Sequence[str]) -> int:
    """``python -m tarkit.demo augment|train``: the demo's per-sample program and trainer."""
    args = list(argv)
    if args[:1] == ["augment"]:
        augment_sample(args[1] if len(args) > 1 else ".")
        return 0
    if args[:1] == ["train"] and len(args) >= 2:
        epochs = int(args[2]) if len(args) > 2 else 6
        workers = int(args[3]) if len(args) > 3 else 2
        train_folder(args[1], epochs, workers)
        return 0
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
