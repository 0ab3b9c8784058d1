"""Datasets kept as one folder of image files per class: any user's `image_folder`, Pins Face Recognition and
Caltech-101 (the seed-001 system's two extra datasets).

- Classes are the sub-folders of `root/folder` in `sorted()` order (case-sensitive, as torchvision's `ImageFolder`
  and `Caltech101` order them), minus `exclude` (Caltech-101's `BACKGROUND_Google`), with `prefix` stripped from
  the name (Pins' `pins_`). Targets match them case-insensitively with spaces and underscores alike.
- Every image is decoded once with Pillow, converted to RGB (Caltech-101 has greyscale images) and resized to
  `image_size` × `image_size` (antialiased bilinear; JPEGs are decoded at a reduced scale first where that still
  leaves at least `image_size` pixels). The result is one uint8 tensor, saved under `cache_dir` and keyed by the file
  list with each file's size and modification time and by the decoding settings: a second run reads no image file.
  (The SUPREME code resizes to 36 × 36, augments, and resizes the tensor to 32 × 32; here augmentation runs on the
  device on the 32 × 32 images, as for CIFAR.)
- The train/test split is stratified and seeded (`split_seed`): per class either a `test_fraction` of the images
  (the SUPREME code's 80/20) or all but `train_per_class` (Caltech-101's common 30-per-class protocol). The split is
  part of the data's fingerprint, so the model cache and `result.json`'s cache keys record it. (The SUPREME code's
  Pins test set is its training set; here the two never share an image.)
- An image that cannot be decoded is named in one line; with `skip_unreadable=true` it is left out with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from unlearnbench.runtime.errors import UserError, bad_file, invalid
from unlearnbench.runtime.files import atomic_path, make_folder
from unlearnbench.tasks.image.data.base import ImageData, ImageSource, one_line

log = logging.getLogger(__name__)
SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
DECODER_VERSION = 1  # part of the decode cache's key: bump when decoding changes


@dataclass(frozen=True)
class Listing:
    """The image files of a folder tree, in class order then file-name order."""

    classes: list[str]
    files: list[Path]
    labels: np.ndarray  # int64, one per file

    def key(self, root: Path, settings: dict) -> str:
        """What identifies the decoded tensor: every file's path, size and modification time, and the settings."""
        digest = hashlib.sha256(json.dumps({"version": DECODER_VERSION, **settings}, sort_keys=True).encode())
        for path in self.files:
            status = path.stat()
            digest.update(f"{path.relative_to(root)}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
        return digest.hexdigest()[:32]


def decode(path: Path, size: int) -> np.ndarray:
    """One image as a size × size × 3 uint8 array (RGB)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(path) as image:
            image.draft("RGB", (size, size))  # JPEG: decode at 1/2 … 1/8 scale when that stays ≥ size
            rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8)


class ImageFolder(ImageSource):
    """One sub-folder of images per class under `root/folder` (see the module docstring)."""

    def __init__(self, name: str, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 targets: dict | None = None, root: str | None = None, model_width: int | None = None,
                 folder: str = "", prefix: str = "", exclude: Sequence[str] = (), image_size: int = 32,
                 test_fraction: float | None = 0.2, train_per_class: int | None = None, split_seed: int = 0,
                 skip_unreadable: bool = False, cache_dir: str | None = None,
                 source: str = "put one folder of images per class there") -> None:
        """`mean`/`std` null: computed from the training pool (per channel, on [0, 1] pixels)."""
        super().__init__(name, mean or (), std or (), targets, root, model_width)
        self.given_statistics = mean is not None and std is not None
        self.folder, self.prefix, self.exclude = folder, prefix, set(exclude)
        self.image_size, self.test_fraction, self.train_per_class = image_size, test_fraction, train_per_class
        self.split_seed, self.skip_unreadable, self.source = split_seed, skip_unreadable, source
        self.cache_dir = Path(cache_dir) if cache_dir else None
        if (test_fraction is None) == (train_per_class is None):
            raise UserError(f"dataset {name}: set exactly one of dataset.test_fraction and dataset.train_per_class")
        if test_fraction is not None and not 0 < test_fraction < 1:
            raise invalid("test_fraction", f"dataset {name}", "in (0, 1)", test_fraction)
        if train_per_class is not None and train_per_class < 1:
            raise invalid("train_per_class", f"dataset {name}", "at least 1", train_per_class)
        if image_size < 1:
            raise invalid("image_size", f"dataset {name}", "at least 1", image_size)

    @property
    def base(self) -> Path:
        return self.root / self.folder if self.folder else self.root

    def listing(self) -> Listing:
        """The classes and their image files; one line for a missing folder or an empty class."""
        if not self.base.is_dir():
            raise UserError(f"dataset {self.name}: {self.base} is not a folder; {self.source}, so that "
                            f"{self.base}/<class>/<image> exist (or point dataset.root at them). Nothing is "
                            "downloaded at run time.")
        folders = sorted(entry.name for entry in os.scandir(self.base) if entry.is_dir() and
                         entry.name not in self.exclude and not entry.name.startswith("."))
        if len(folders) < 2:
            raise UserError(f"dataset {self.name}: {self.base} holds {len(folders)} class folder(s); a classifier "
                            "needs at least two (one sub-folder of images per class)")
        files, labels = [], []
        for label, folder in enumerate(folders):
            images = sorted(p for p in (self.base / folder).iterdir() if p.suffix.lower() in SUFFIXES)
            if not images:
                raise UserError(f"dataset {self.name}: class folder {self.base / folder} holds no image file "
                                f"({', '.join(sorted(SUFFIXES))})")
            files += images
            labels += [label] * len(images)
        classes = [f[len(self.prefix):] if self.prefix and f.startswith(self.prefix) else f for f in folders]
        return Listing(classes, files, np.array(labels, dtype=np.int64))

    def decoded(self, listing: Listing) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(uint8 N × 3 × S × S images, int64 labels, the positions in `listing.files` of the files they come from),
        from the decode cache when it holds this listing."""
        settings = {"image_size": self.image_size, "skip_unreadable": self.skip_unreadable}
        path = self.cache_dir / f"{self.name}-{listing.key(self.base, settings)}.pt" if self.cache_dir else None
        if path is not None and path.is_file():
            try:
                stored = torch.load(path, weights_only=True)
                return stored["images"], stored["labels"], stored["kept"]
            except Exception as error:  # a damaged entry is decoded again and replaced
                log.warning("decode cache %s unreadable (%s): decoding again", path, one_line(error))
        images, labels, kept = self.decode_all(listing)
        if path is not None:
            make_folder(path.parent)
            with atomic_path(path) as temporary:
                torch.save({"images": images, "labels": labels, "kept": kept}, temporary)
        return images, labels, kept

    def decode_all(self, listing: Listing) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        arrays, kept = [], []
        for k, path in enumerate(listing.files):
            try:
                arrays.append(decode(path, self.image_size))
                kept.append(k)
            except Exception as error:  # Pillow raises OSError, ValueError, SyntaxError… on damaged files
                if not self.skip_unreadable:
                    raise bad_file(path, f"cannot decode it as an image of dataset {self.name} ({one_line(error)}); "
                                   "remove or replace it, or set dataset.skip_unreadable=true to leave such files "
                                   "out with a warning") from error
                log.warning("dataset %s: skipping %s, which cannot be decoded (%s)", self.name, path,
                            one_line(error))
        if not arrays:
            raise UserError(f"dataset {self.name}: none of the {len(listing.files)} image files could be decoded")
        images = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()
        return images, torch.from_numpy(listing.labels[kept]), torch.tensor(kept, dtype=torch.int64)

    def split(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(train indices, test indices): per class, a seeded permutation cut at `test_fraction` or at
        `train_per_class`; each class with two or more images keeps at least one on each side."""
        train, test = [], []
        for label in torch.unique(labels).tolist():
            members = torch.nonzero(labels == label).flatten().numpy()
            order = members[np.random.default_rng([self.split_seed, label]).permutation(len(members))]
            count = len(order)
            held_out = (round(count * self.test_fraction) if self.test_fraction is not None
                        else count - self.train_per_class)
            held_out = min(max(held_out, 1 if count >= 2 else 0), count - 1)
            test.append(order[:held_out])
            train.append(order[held_out:])
        return torch.from_numpy(np.sort(np.concatenate(train))), torch.from_numpy(np.sort(np.concatenate(test)))

    def load(self) -> ImageData:
        listing = self.listing()
        images, labels, kept = self.decoded(listing)
        train, test = self.split(labels)
        if not self.given_statistics:
            pixels = images[train].float().div_(255)
            self.mean = tuple(pixels.mean(dim=(0, 2, 3)).tolist())
            self.std = tuple(pixels.std(dim=(0, 2, 3)).tolist())
        split = {"split_seed": self.split_seed, "test_fraction": self.test_fraction,
                 "train_per_class": self.train_per_class, "files": len(listing.files),
                 "skipped": len(listing.files) - len(labels),
                 "test_files_sha256": hashlib.sha256("\n".join(
                     str(listing.files[k].relative_to(self.base)) for k in kept[test].tolist()).encode()).hexdigest()}
        return self.build(images[train], labels[train], images[test], labels[test], listing.classes, split)
