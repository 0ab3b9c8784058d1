"""CIFAR-10, CIFAR-100 and CIFAR-20 (CIFAR-100 with its 20 super-classes) from the python pickles.

torchvision's loaders check fixed MD5 sums, which rules out fabricated test copies, so the pickles are read here,
with an unpickler that admits only what the CIFAR files hold (a pickle can otherwise run any code it names), and
every batch is checked (keys, array shape, label counts and ranges) before it becomes a tensor.
"""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path

import numpy as np
import torch

from unlearnbench.runtime.errors import UserError, bad_file
from unlearnbench.tasks.image.data.base import ImageData, ImageSource, check_labels, one_line

CIFAR_PAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"
ROW = 3 * 32 * 32


def admitted_globals() -> dict[tuple[str, str], object]:
    """The globals a CIFAR pickle may name, mapped to this numpy's objects.

    numpy arrays pickle as `_reconstruct(ndarray, …)` plus a dtype (and numpy scalars as `scalar`), under
    `numpy.core` when numpy 1.x wrote the file and `numpy._core` when numpy 2.x did; Python 3 writes bytes at
    protocol 2 as `_codecs.encode`. Each is resolved from numpy itself, so both spellings load on either numpy.
    """
    table: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }
    for package in ("numpy.core", "numpy._core"):
        table[f"{package}.multiarray", "_reconstruct"] = np.empty(0).__reduce__()[0]
        table[f"{package}.multiarray", "scalar"] = np.int64(0).__reduce__()[0]
    for module in ("builtins", "__builtin__"):  # Python 3 and Python 2 spellings
        for kind in (list, dict, bytes, str, int):
            table[module, kind.__name__] = kind
    return table


ADMITTED = admitted_globals()


class CifarUnpickler(pickle.Unpickler):
    """Refuses every global outside `ADMITTED`: a crafted `data_batch_1` could otherwise call os.system."""

    def __init__(self, file, path: Path) -> None:
        super().__init__(file, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> object:
        found = ADMITTED.get((module, name))
        if found is None:
            raise bad_file(self.path, f"refusing to unpickle {module}.{name} (not part of the CIFAR format)")
        return found


def read_pickle(path: Path, source: str) -> dict[str, object]:
    """A CIFAR pickle with its keys as str, whether the file stored them as str or bytes; a damaged file is a
    `UserError` that says where to get a good copy (`source`)."""
    try:
        with open(path, "rb") as f:
            content = CifarUnpickler(f, path).load()
    except UserError:
        raise
    except Exception as error:  # damaged bytes can make the unpickler raise nearly any type
        raise bad_file(path, f"not a readable CIFAR pickle ({one_line(error)}); {source}") from error
    if not isinstance(content, dict):
        raise bad_file(path, f"holds a {type(content).__name__}, not the dict of a CIFAR file; {source}")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in content.items()}


def entry(content: dict[str, object], key: str, path: Path, source: str) -> object:
    """`content[key]`, or a `UserError` naming the file and the entries it does hold."""
    if key not in content:
        held = ", ".join(sorted(str(k) for k in content)) or "nothing"
        raise bad_file(path, f"no '{key}' entry (it holds {held}); a damaged or foreign file; {source}")
    return content[key]


def as_names(values: object, path: Path, key: str) -> list[str]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str | bytes) for v in values):
        raise bad_file(path, f"'{key}' is not a list of class names")
    return [v.decode("latin1") if isinstance(v, bytes) else v for v in values]


def as_images(rows: object, path: Path) -> torch.Tensor:
    """N × 3072 uint8 rows (1024 red, 1024 green, 1024 blue values, row-major) as uint8 N × 3 × 32 × 32."""
    if not isinstance(rows, np.ndarray) or rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != ROW:
        found = (f"a {rows.dtype} array of shape {rows.shape}" if isinstance(rows, np.ndarray)
                 else f"a {type(rows).__name__}")
        raise bad_file(path, f"'data' is {found}; expected a uint8 array of shape (N, {ROW}), one row per "
                       f"3 × 32 × 32 image")
    return torch.from_numpy(rows.reshape(-1, 3, 32, 32).copy())


def as_labels(values: object, path: Path, key: str, classes: int) -> torch.Tensor:
    """Integer labels, each naming one of `classes` classes."""
    array = np.asarray(values) if isinstance(values, list | tuple | np.ndarray) else None
    if array is None or array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise bad_file(path, f"'{key}' is not a list of integer labels")
    check_labels(array, classes, f"{path}: '{key}'")
    return torch.as_tensor(array.astype(np.int64))


def read_batch(path: Path, source: str, label_keys: dict[str, int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A batch's images and, for each key of `label_keys` (key → number of classes), one label per image."""
    content = read_pickle(path, source)
    images = as_images(entry(content, "data", path, source), path)
    labels = [as_labels(entry(content, key, path, source), path, key, classes) for key, classes in label_keys.items()]
    for key, values in zip(label_keys, labels, strict=True):
        if len(values) != len(images):
            raise bad_file(path, f"{len(images)} images but {len(values)} '{key}'; the counts must match")
    return images, labels


def read_names(path: Path, source: str, keys: list[str]) -> list[list[str]]:
    """The class-name lists under `keys` of a meta file."""
    content = read_pickle(path, source)
    return [as_names(entry(content, key, path, source), path, key) for key in keys]


class Cifar10(ImageSource):
    def load(self) -> ImageData:
        folder = self.root / "cifar-10-batches-py"
        train_files = [folder / f"data_batch_{i}" for i in range(1, 6)]
        source = f"download cifar-10-python.tar.gz from {CIFAR_PAGE} and unpack it"
        self.require([*train_files, folder / "test_batch", folder / "batches.meta"], source)
        [classes] = read_names(folder / "batches.meta", source, ["label_names"])
        keys = {"labels": len(classes)}
        train = [read_batch(f, source, keys) for f in train_files]
        test_images, [test_labels] = read_batch(folder / "test_batch", source, keys)
        return self.build(
            torch.cat([images for images, _ in train]), torch.cat([labels for _, [labels] in train]),
            test_images, test_labels, classes,
        )


class Cifar100(ImageSource):
    """`coarse: true` gives CIFAR-20: the super-class is the label and the fine class the group."""

    def __init__(self, coarse: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.coarse = coarse

    def load(self) -> ImageData:
        folder = self.root / "cifar-100-python"
        source = f"download cifar-100-python.tar.gz from {CIFAR_PAGE} and unpack it"
        self.require([folder / "train", folder / "test", folder / "meta"], source)
        fine_names, coarse_names = read_names(folder / "meta", source, ["fine_label_names", "coarse_label_names"])
        keys = {"fine_labels": len(fine_names), "coarse_labels": len(coarse_names)}
        train_images, [train_fine, train_coarse] = read_batch(folder / "train", source, keys)
        test_images, [test_fine, test_coarse] = read_batch(folder / "test", source, keys)
        if not self.coarse:
            return self.build(train_images, train_fine, test_images, test_fine, fine_names)
        return self.build(train_images, train_coarse, test_images, test_coarse, coarse_names,
                          train_groups=train_fine, test_groups=test_fine, group_names=fine_names)
