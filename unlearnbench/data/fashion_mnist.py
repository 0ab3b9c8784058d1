"""Fashion-MNIST from its IDX files, as Debian's `dataset-fashion-mnist` installs them (gzip) or unpacked."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from unlearnbench.data.base import ImageData, ImageSource
from unlearnbench.errors import UserError

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX array: big-endian magic, one big-endian uint32 per dimension, then the uint8 values."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise UserError(f"{path} is not an IDX file of this kind: magic {found:#010x}, expected {magic:#010x}")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


class FashionMnist(ImageSource):
    def file(self, stem: str) -> Path:
        plain = self.root / stem
        return plain if plain.exists() else self.root / f"{stem}.gz"

    def load(self) -> ImageData:
        stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"]
        files = [self.file(s) for s in stems]
        self.require(files, "install them with `apt-get install dataset-fashion-mnist` (they land in "
                            "/usr/share/datasets/fashion-mnist) or download them from "
                            "https://github.com/zalandoresearch/fashion-mnist")
        train_x, train_y, test_x, test_y = (
            read_idx(f, IMAGES_MAGIC if "images" in f.name else LABELS_MAGIC) for f in files
        )
        return self.build(
            torch.from_numpy(train_x[:, None].copy()), torch.from_numpy(train_y.astype(np.int64)),
            torch.from_numpy(test_x[:, None].copy()), torch.from_numpy(test_y.astype(np.int64)),
            CLASSES,
        )
