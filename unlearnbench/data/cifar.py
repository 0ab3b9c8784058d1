"""CIFAR-10, CIFAR-100 and CIFAR-20 (CIFAR-100 with its 20 super-classes) from the python pickles.

torchvision's loaders check fixed MD5 sums, which rules out fabricated test copies, so the pickles are read here.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from unlearnbench.data.base import ImageData, ImageSource

CIFAR_PAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"


def read_pickle(path: Path) -> dict[str, object]:
    """A CIFAR pickle with its keys as str, whether the file stored them as str or bytes."""
    with open(path, "rb") as f:
        content = pickle.load(f, encoding="latin1")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in content.items()}


def as_names(values: list) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def as_images(rows: object) -> torch.Tensor:
    """N × 3072 rows (1024 red, 1024 green, 1024 blue values, row-major) as uint8 N × 3 × 32 × 32."""
    return torch.from_numpy(np.asarray(rows, dtype=np.uint8).reshape(-1, 3, 32, 32).copy())


def as_labels(values: object) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.int64))


class Cifar10(ImageSource):
    def load(self) -> ImageData:
        folder = self.root / "cifar-10-batches-py"
        train_files = [folder / f"data_batch_{i}" for i in range(1, 6)]
        self.require([*train_files, folder / "test_batch", folder / "batches.meta"],
                      f"download cifar-10-python.tar.gz from {CIFAR_PAGE} and unpack it")
        train = [read_pickle(f) for f in train_files]
        test = read_pickle(folder / "test_batch")
        meta = read_pickle(folder / "batches.meta")
        return self.build(
            torch.cat([as_images(b["data"]) for b in train]),
            torch.cat([as_labels(b["labels"]) for b in train]),
            as_images(test["data"]), as_labels(test["labels"]),
            as_names(meta["label_names"]),
        )


class Cifar100(ImageSource):
    """`coarse: true` gives CIFAR-20: the super-class is the label and the fine class the group."""

    def __init__(self, coarse: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.coarse = coarse

    def load(self) -> ImageData:
        folder = self.root / "cifar-100-python"
        self.require([folder / "train", folder / "test", folder / "meta"],
                     f"download cifar-100-python.tar.gz from {CIFAR_PAGE} and unpack it")
        train, test, meta = (read_pickle(folder / name) for name in ("train", "test", "meta"))
        fine_names = as_names(meta["fine_label_names"])
        if not self.coarse:
            return self.build(as_images(train["data"]), as_labels(train["fine_labels"]),
                              as_images(test["data"]), as_labels(test["fine_labels"]), fine_names)
        return self.build(
            as_images(train["data"]), as_labels(train["coarse_labels"]),
            as_images(test["data"]), as_labels(test["coarse_labels"]),
            as_names(meta["coarse_label_names"]),
            train_groups=as_labels(train["fine_labels"]), test_groups=as_labels(test["fine_labels"]),
            group_names=fine_names,
        )
