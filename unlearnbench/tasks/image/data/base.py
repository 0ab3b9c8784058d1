"""Datasets as whole uint8 tensors, and index views into them.

Every image dataset is materialised once into tensors and moved to the device whole, so training and evaluation
index it in batches and nothing decodes images per step.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from unlearnbench.runtime.errors import UserError


@dataclass(frozen=True)
class ImageData:
    """Train and test pools of one dataset.

    `groups` are the fine labels when `labels` are super-classes (CIFAR-20): the sub-class scenario forgets one
    group while the model keeps predicting the super-class.
    """

    name: str
    train_images: Tensor  # uint8, N × C × H × W
    train_labels: Tensor  # int64, N
    test_images: Tensor
    test_labels: Tensor
    classes: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_groups: Tensor | None = None
    test_groups: Tensor | None = None
    group_names: list[str] | None = None
    standard_targets: dict[str, list] = field(default_factory=dict)
    split: dict = field(default_factory=dict)  # how a loader drew the train/test pools, for result.json
    test_positions: Tensor | None = None  # where the test rows were in the loaded pool (`test_part`); None: all

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return self.train_images.shape[1]

    @property
    def image_size(self) -> int:
        return self.train_images.shape[-1]

    @property
    def device(self) -> torch.device:
        return self.train_images.device

    def pool(self, name: str) -> tuple[Tensor, Tensor]:
        """Images and labels of the `train` or `test` pool."""
        return (self.train_images, self.train_labels) if name == "train" else (self.test_images, self.test_labels)

    def to(self, device: torch.device | str) -> ImageData:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            train_images=move(self.train_images),
            train_labels=move(self.train_labels),
            test_images=move(self.test_images),
            test_labels=move(self.test_labels),
            train_groups=move(self.train_groups),
            test_groups=move(self.test_groups),
            test_positions=move(self.test_positions),
        )

    def test_part(self, rows: Tensor) -> ImageData:
        """The data with the test pool's `rows` alone (a tuning's part of it: core/validation.py), the training pool
        untouched; `test_positions` keeps where they were in the loaded pool (examples.parquet's `index`)."""
        def take(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[rows]

        return replace(self, test_images=take(self.test_images), test_labels=take(self.test_labels),
                       test_groups=take(self.test_groups), test_positions=self.loaded_positions("test", rows))

    def loaded_positions(self, pool: str, positions: Tensor | np.ndarray) -> Tensor | np.ndarray:
        """Positions in this data's `pool` as positions in the pool as loaded (the same outside a tuning's part)."""
        if pool == "train" or self.test_positions is None:
            return positions
        loaded = self.test_positions
        return loaded[positions] if isinstance(positions, Tensor) else loaded.cpu().numpy()[positions]

    def describe(self) -> dict:
        """What result.json records of the data: its identity, the pools' sizes and how they were split."""
        return {"name": self.name, "fingerprint": self.fingerprint(), "classes": self.num_classes,
                "train": len(self.train_labels), "test": len(self.test_labels), **self.split}

    def fingerprint(self) -> str:
        """sha256 over the name, the class names and every byte of the pools: the cache's dataset identity."""
        digest = hashlib.sha256(self.name.encode())
        digest.update("\0".join(self.classes).encode())
        for tensor in (self.train_images, self.train_labels, self.test_images, self.test_labels,
                       self.train_groups, self.test_groups):
            if tensor is not None:
                digest.update(str(tuple(tensor.shape)).encode())
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class Subset:
    """Rows `indices` of the `pool` ('train' or 'test') of a dataset, without copying the images."""

    data: ImageData
    pool: str
    indices: Tensor  # int64, on the data's device

    def __len__(self) -> int:
        return int(self.indices.numel())

    @property
    def images(self) -> Tensor:
        return self.data.pool(self.pool)[0]

    @property
    def labels(self) -> Tensor:
        return self.data.pool(self.pool)[1]

    def take(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """uint8 images and labels at `positions` (indices into this subset)."""
        rows = self.indices[positions.to(self.indices.device)]
        return self.images[rows], self.labels[rows]

    def with_indices(self, indices: Tensor) -> Subset:
        return Subset(self.data, self.pool, indices)


def full_pool(data: ImageData, pool: str) -> Subset:
    n = data.pool(pool)[1].numel()
    return Subset(data, pool, torch.arange(n, device=data.device))


class ImageSource(ABC):
    """A dataset component: its config holds the constructor's arguments, `load()` returns the tensors.

    Loaders never download: missing files raise a `UserError` that says which files, where, and where to get them.
    """

    def __init__(self, name: str, mean: Sequence[float], std: Sequence[float], targets: dict | None = None,
                 root: str | None = None, model_width: int | None = None) -> None:
        """`targets`: the standard targets per scenario; `model_width`: the ResNet width this dataset defaults to
        (read by the model config, not by the loader)."""
        self.name = name
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.targets = {k: list(v) for k, v in (targets or {}).items() if v is not None}
        self.root = Path(root) if root is not None else Path.cwd()

    @abstractmethod
    def load(self) -> ImageData:
        """Read the files under `root` into tensors (on the CPU)."""

    def require(self, files: Sequence[Path], source: str) -> None:
        """Fail with one line naming the missing files, the folder they belong in and where to get them."""
        missing = [f for f in files if not f.is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise UserError(
                f"dataset {self.name}: missing {missing[0]}{more}; {source}, so that the files lie under "
                f"{self.root} (or point dataset.root / paths.data_dir at them). Nothing is downloaded at run time."
            )

    def build(self, train_images: Tensor, train_labels: Tensor, test_images: Tensor, test_labels: Tensor,
              classes: list[str], split: dict | None = None, **groups) -> ImageData:
        data = ImageData(self.name, standard_layout(train_images), train_labels.long(), standard_layout(test_images),
                         test_labels.long(), list(classes), self.mean, self.std, standard_targets=self.targets,
                         split=split or {}, **groups)
        check_pools(data)
        return data


def one_line(error: BaseException) -> str:
    """A library exception as one line, for the tail of a `UserError` that replaces it."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_labels(labels: Tensor | np.ndarray, count: int, origin: str, what: str = "label") -> None:
    """Fail unless every label indexes the `count` classes: one outside them means a damaged or foreign file, and
    would otherwise surface only deep inside training (as an index error, or a device-side assert on a GPU)."""
    if len(labels) == 0:
        return
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= count:
        raise UserError(f"{origin}: {what} {low if low < 0 else high} is out of range for {count} classes; "
                        f"valid: 0 to {count - 1}")


def check_pools(data: ImageData) -> None:
    """What training and scoring assume of every loader's result, whatever its files: non-empty pools, one label
    (and one sub-class label) per image, labels that index the class lists, train and test images of one shape."""
    for pool, groups in (("train", data.train_groups), ("test", data.test_groups)):
        images, labels = data.pool(pool)
        origin = f"dataset {data.name}, {pool} pool"
        if len(images) == 0:
            raise UserError(f"{origin}: no samples, so nothing to train on or score")
        for what, values, count in (("label", labels, len(data.classes)),
                                    ("sub-class label", groups, len(data.group_names or []))):
            if values is None:
                continue
            if len(values) != len(images):
                raise UserError(f"{origin}: {len(images)} images but {len(values)} {what}s; the counts must match")
            check_labels(values, count, origin, what)
    if data.train_images.shape[1:] != data.test_images.shape[1:]:
        raise UserError(f"dataset {data.name}: train images are {shape_text(data.train_images)} but test images "
                        f"{shape_text(data.test_images)}; both pools must hold images of one shape")


def shape_text(images: Tensor) -> str:
    return " × ".join(str(d) for d in images.shape[1:])


def standard_layout(images: Tensor) -> Tensor:
    """N × C × H × W images with NCHW strides. A one-channel tensor can carry strides that read as channels_last as
    well (e.g. numpy's `[:, None]` gives (64, 1, 8, 1)); CPU convolutions then take PyTorch's channels_last path,
    whose 1×1 stride-2 convolution backward is nondeterministic and can corrupt the heap (PyTorch 2.14)."""
    return images.clone(memory_format=torch.contiguous_format)
