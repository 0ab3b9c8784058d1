"""Fashion-MNIST from its IDX files, as Debian's `dataset-fashion-mnist` installs them (gzip) or unpacked.

Every file is checked against its own header (magic number, dimensions, byte count) and the labels against the
images and the class list, so a truncated download is a one-line `UserError`, not a reshape error.
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np
import torch

from unlearnbench.runtime.errors import UserError, bad_file
from unlearnbench.tasks.image.data.base import ImageData, ImageSource, check_labels, one_line

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
SOURCE = ("install them with `apt-get install dataset-fashion-mnist` (they land in /usr/share/datasets/fashion-mnist) "
          "or download them from https://github.com/zalandoresearch/fashion-mnist")


def read_bytes(path: Path, source: str) -> bytes:
    """The file's content, gunzipped if its name ends in `.gz`; a damaged gzip stream (which gzip reports as an
    EOFError or a zlib error) is a `UserError`."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:
        raise bad_file(path, f"cannot be read ({one_line(error)}); {source}") from error


def read_idx(path: Path, magic: int, source: str = SOURCE) -> np.ndarray:
    """An IDX array: big-endian magic, one big-endian uint32 per dimension, then exactly that many uint8 values."""
    raw = read_bytes(path, source)
    found = int.from_bytes(raw[:4], "big")
    if len(raw) >= 4 and found != magic:
        raise bad_file(path, f"not an IDX file of this kind: magic {found:#010x}, expected {magic:#010x}; "
                       f"{source}")
    ndim = magic & 0xFF
    start = 4 + 4 * ndim
    if len(raw) < start:
        raise bad_file(path, f"truncated: {len(raw)} bytes, fewer than the {start} of the IDX header; {source}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = start + math.prod(shape)
    if len(raw) != expected:
        problem = "truncated" if len(raw) < expected else "too long"
        raise bad_file(path, f"{problem}: its header promises {' × '.join(map(str, shape))} values "
                       f"({expected} bytes with the header) but it holds {len(raw)} bytes; {source}")
    return np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(shape)


def read_pair(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 N × 1 × 28 × 28 images and int64 labels of one pool, one label per image, each naming a class."""
    images = read_idx(images_path, IMAGES_MAGIC)
    labels = read_idx(labels_path, LABELS_MAGIC)
    if len(images) != len(labels):
        raise UserError(f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels; "
                        f"the counts must match; {SOURCE}")
    check_labels(labels, len(CLASSES), str(labels_path))
    return torch.from_numpy(images[:, None].copy()), torch.from_numpy(labels.astype(np.int64))


class FashionMnist(ImageSource):
    def file(self, stem: str) -> Path:
        plain = self.root / stem
        return plain if plain.exists() else self.root / f"{stem}.gz"

    def load(self) -> ImageData:
        stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"]
        files = [self.file(s) for s in stems]
        self.require(files, SOURCE)
        train_x, train_y = read_pair(files[0], files[1])
        test_x, test_y = read_pair(files[2], files[3])
        return self.build(train_x, train_y, test_x, test_y, CLASSES)
