"""Miniature copies of the datasets in their exact on-disk formats (docs/datasets.md), for tests.

Each writer puts a few samples under a root folder, laid out and encoded as the real download is, and
returns what it wrote (images in the loaders' N × C × H × W layout, the raw rows, labels, names) so tests can
compare the loaded tensors against it. Pixel values come from a seeded `numpy.random.Generator`, so every call
with the same arguments writes the same bytes.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

CIFAR100_FINE_NAMES = [
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
    "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
    "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
    "dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo",
    "keyboard", "lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree",
    "motorcycle", "mountain", "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree",
    "pear", "pickup_truck", "pine_tree", "plain", "plate", "poppy", "porcupine", "possum", "rabbit",
    "raccoon", "ray", "road", "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper",
    "snail", "snake", "spider", "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank",
    "telephone", "television", "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe",
    "whale", "willow_tree", "wolf", "woman", "worm",
]

CIFAR100_COARSE_NAMES = [
    "aquatic_mammals", "fish", "flowers", "food_containers", "fruit_and_vegetables",
    "household_electrical_devices", "household_furniture", "insects", "large_carnivores",
    "large_man-made_outdoor_things", "large_natural_outdoor_scenes", "large_omnivores_and_herbivores",
    "medium_mammals", "non-insect_invertebrates", "people", "reptiles", "small_mammals", "trees",
    "vehicles_1", "vehicles_2",
]

# The official fine → coarse map (index = fine label).
FINE_TO_COARSE = [
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13, 15, 3, 15,
    0, 11, 1, 10, 12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4,
    18, 17, 10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13, 16, 19, 2, 4, 6, 19,
    5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
]

# Fine classes that every fabricated CIFAR-100 train and test set holds (twice each in train, once in test):
# the standard sub-class targets, pine, and two other members of rocket's super-class (vehicles_2).
CIFAR100_REQUIRED = [
    "rocket", "mushroom", "baby", "lamp", "sea", "pine_tree", "tractor", "streetcar", "apple", "whale",
]

IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 0x00000803, 0x00000801
FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


NUMPY_MODULES = ("numpy.core", "numpy._core")  # where numpy 1.x and 2.x pickle their array helpers from


def _dump(path: Path, content: dict, bytes_keys: bool, numpy_module: str | None = None) -> None:
    """Pickle `content` with protocol 2 (as the real files are), with its keys as bytes if asked.

    `numpy_module` ('numpy.core' or 'numpy._core') spells the arrays' helpers as numpy 1.x or 2.x writes them,
    whichever numpy runs here: protocol 2 names a global as text ('c' module newline name newline), so the
    module can be replaced in the bytes.
    """
    if bytes_keys:
        content = {k.encode(): v for k, v in content.items()}
    raw = pickle.dumps(content, protocol=2)
    if numpy_module is not None:
        for module in NUMPY_MODULES:
            raw = raw.replace(f"c{module}.multiarray\n".encode(), f"c{numpy_module}.multiarray\n".encode())
    path.write_bytes(raw)


def _cifar_rows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 images N × 3 × 32 × 32 and their CIFAR rows: per image 1024 red, then 1024 green, then
    1024 blue values, each plane row-major (index c·1024 + y·32 + x)."""
    images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    rows = np.empty((n, 3072), dtype=np.uint8)
    for c in range(3):
        for y in range(32):
            rows[:, c * 1024 + y * 32: c * 1024 + (y + 1) * 32] = images[:, c, y, :]
    return images, rows


def write_cifar10(root: str | Path, n_per_batch: int = 3, bytes_keys_batch: int | None = 2,
                  seed: int = 10, numpy_module: str | None = None) -> dict:
    """`root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`.

    `bytes_keys_batch` (1–5, 6 for test_batch, or None) is the batch written with bytes keys and bytes
    `batch_label`/`filenames`; `numpy_module` as for `_dump`. Returns the expected `train_images` (the five
    batches concatenated in order), `train_labels`, `test_images`, `test_labels`, the raw `train_rows`/`test_rows`,
    `batch_sizes`, `label_names` and `folder`.
    """
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    written: dict[str, list] = {"images": [], "rows": [], "labels": []}
    for index in range(1, 7):
        name = f"data_batch_{index}" if index <= 5 else "test_batch"
        images, rows = _cifar_rows(rng, n_per_batch)
        labels = [int(v) for v in rng.integers(0, 10, size=n_per_batch)]
        as_bytes = index == bytes_keys_batch
        filenames = [f"fabricated_{name}_{i}.png" for i in range(n_per_batch)]
        batch_label = f"{'testing' if index == 6 else 'training'} batch {min(index, 5)} of 5"
        if as_bytes:
            filenames = [f.encode() for f in filenames]
            batch_label = batch_label.encode()
        _dump(folder / name, {"batch_label": batch_label, "labels": labels, "data": rows,
                              "filenames": filenames}, as_bytes, numpy_module)
        written["images"].append(images)
        written["rows"].append(rows)
        written["labels"].append(np.asarray(labels, dtype=np.int64))
    _dump(folder / "batches.meta", {"label_names": list(CIFAR10_NAMES), "num_cases_per_batch": n_per_batch,
                                    "num_vis": 3072}, False)
    return {
        "folder": folder,
        "batch_sizes": [n_per_batch] * 5,
        "train_images": np.concatenate(written["images"][:5]),
        "train_rows": np.concatenate(written["rows"][:5]),
        "train_labels": np.concatenate(written["labels"][:5]),
        "test_images": written["images"][5],
        "test_rows": written["rows"][5],
        "test_labels": written["labels"][5],
        "label_names": list(CIFAR10_NAMES),
    }


def _fine_labels(rng: np.random.Generator, n: int, repeats: int) -> np.ndarray:
    required = [CIFAR100_FINE_NAMES.index(name) for name in CIFAR100_REQUIRED] * repeats
    if n < len(required):
        raise ValueError(f"need at least {len(required)} samples to hold every required fine class")
    rest = rng.integers(0, 100, size=n - len(required))
    return rng.permutation(np.concatenate([np.asarray(required), rest])).astype(np.int64)


def write_cifar100(root: str | Path, n_train: int = 40, n_test: int = 20, bytes_keys: bool = False,
                   seed: int = 100, numpy_module: str | None = None) -> dict:
    """`root/cifar-100-python/{train, test, meta}`; coarse labels follow the official fine → coarse map;
    `numpy_module` as for `_dump`.

    The train set holds every class of `CIFAR100_REQUIRED` at least twice, the test set at least once. Returns
    `train_images`, `train_fine`, `train_coarse`, `test_images`, `test_fine`, `test_coarse`, `fine_names`,
    `coarse_names` and `folder`.
    """
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    out: dict = {"folder": folder, "fine_names": list(CIFAR100_FINE_NAMES),
                 "coarse_names": list(CIFAR100_COARSE_NAMES)}
    for split, n, repeats in (("train", n_train, 2), ("test", n_test, 1)):
        images, rows = _cifar_rows(rng, n)
        fine = _fine_labels(rng, n, repeats)
        coarse = np.asarray([FINE_TO_COARSE[f] for f in fine], dtype=np.int64)
        filenames = [f"fabricated_{split}_{i}.png" for i in range(n)]
        batch_label = f"{'training' if split == 'train' else 'testing'} batch 1 of 1"
        if bytes_keys:
            filenames = [f.encode() for f in filenames]
            batch_label = batch_label.encode()
        content = {"filenames": filenames, "batch_label": batch_label, "fine_labels": [int(v) for v in fine],
                   "coarse_labels": [int(v) for v in coarse], "data": rows}
        _dump(folder / split, content, bytes_keys, numpy_module)
        out.update({f"{split}_images": images, f"{split}_rows": rows, f"{split}_fine": fine,
                    f"{split}_coarse": coarse})
    fine_names, coarse_names = list(CIFAR100_FINE_NAMES), list(CIFAR100_COARSE_NAMES)
    if bytes_keys:
        fine_names = [n.encode() for n in fine_names]
        coarse_names = [n.encode() for n in coarse_names]
    _dump(folder / "meta", {"fine_label_names": fine_names, "coarse_label_names": coarse_names}, bytes_keys)
    return out


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    """An IDX file's content: big-endian uint32 magic, a big-endian uint32 per dimension, the uint8 values."""
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_fashion_mnist(root: str | Path, n_train: int = 6, n_test: int = 4, gz: bool = True, seed: int = 28,
                        images_magic: int = IDX_IMAGES_MAGIC, labels_magic: int = IDX_LABELS_MAGIC) -> dict:
    """The four Fashion-MNIST IDX files directly under `root` (as Debian's `dataset-fashion-mnist` installs
    them), gzipped with a `.gz` suffix if `gz`, else plain. The magic numbers can be overridden to write
    broken files. Returns `train_images` (N × 28 × 28), `train_labels`, `test_images`, `test_labels` and
    `paths`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    arrays = {
        "train_images": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, size=n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }
    paths = {}
    for key, stem in FASHION_FILES.items():
        content = idx_bytes(arrays[key], images_magic if key.endswith("images") else labels_magic)
        path = root / (f"{stem}.gz" if gz else stem)
        if gz:
            with gzip.open(path, "wb") as f:
                f.write(content)
        else:
            path.write_bytes(content)
        paths[key] = path
    return {**arrays, "paths": paths}


def write_image(path: Path, rng: np.random.Generator, mode: str = "RGB", size: tuple[int, int] = (12, 10)) -> None:
    """A small random image in the format its suffix names (JPEG, PNG, …), in `mode` ("RGB" or greyscale "L")."""
    from PIL import Image

    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path)


def write_pins(root: str | Path, per_class: int = 6, seed: int = 105) -> Path:
    """`root/105_classes_pins_dataset/pins_<Name>/<Name><k>_<id>.jpg`, names with spaces and inconsistent case as on
    Kaggle (`pins_barack obama`), the five standard targets among them, one greyscale JPEG and one PNG."""
    rng = np.random.default_rng(seed)
    names = ["Alex Lawther", "barack obama", "Bill Gates", "Danielle Panabaker", "Hugh Jackman", "Josh Radnor"]
    base = Path(root) / "105_classes_pins_dataset"
    for name in names:
        for k in range(per_class):
            write_image(base / f"pins_{name}" / f"{name}{k}_{k + 10}.jpg", rng)
    write_image(base / "pins_barack obama" / "barack obama99_1.jpg", rng, mode="L")
    write_image(base / "pins_Bill Gates" / "Bill Gates99_2.png", rng, size=(20, 30))
    return Path(root)


def write_caltech101(root: str | Path, per_class: int = 5, seed: int = 101) -> Path:
    """`root/101_ObjectCategories/<category>/image_000k.jpg` with BACKGROUND_Google, upper- and lower-case categories
    (sorted case-sensitively: `Faces` before `airplanes`) and a greyscale image."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "101_ObjectCategories"
    for category in ["BACKGROUND_Google", "Faces", "Leopards", "airplanes", "ant"]:
        for k in range(per_class):
            write_image(base / category / f"image_{k + 1:04d}.jpg", rng)
    write_image(base / "ant" / "image_0099.jpg", rng, mode="L")
    return Path(root)
