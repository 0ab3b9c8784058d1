"""Damaged, foreign and hostile dataset files: each loader refuses them with one `UserError` line that names the file
and what is wrong, and a CIFAR pickle cannot run code."""

from __future__ import annotations

import gzip
import os
import pickle
import re

import numpy as np
import pytest
import torch
from fabricate import (
    FASHION_FILES,
    IDX_LABELS_MAGIC,
    NUMPY_MODULES,
    idx_bytes,
    write_cifar10,
    write_cifar100,
    write_fashion_mnist,
)

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.data.base import ImageData, ImageSource
from unlearnbench.tasks.image.data.cifar import Cifar10, Cifar100
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.fashion_mnist import FashionMnist
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, SubClass
from unlearnbench.tasks.ranking.data import FEATURES, Mq2007, SyntheticLetor, read_letor

STATS = {"mean": [0.5], "std": [0.25]}


def one_line_error(match: str, load) -> str:
    """The message of the `UserError` that `load()` raises; it must match `match` and be a single line."""
    with pytest.raises(UserError, match=match) as error:
        load()
    message = str(error.value)
    assert "\n" not in message, message
    return message


def cifar10(root):
    return lambda: Cifar10(name="cifar10", root=str(root), **STATS).load()


def cifar100(root, coarse: bool = False):
    return lambda: Cifar100(name="cifar100", root=str(root), coarse=coarse, **STATS).load()


def fashion(root):
    return lambda: FashionMnist(name="fashion_mnist", root=str(root), **STATS).load()


def rewrite(path, change) -> None:
    """Load a fabricated CIFAR pickle, let `change` edit its dict in place, write it back (protocol 2)."""
    with open(path, "rb") as f:
        content = pickle.load(f, encoding="latin1")
    change(content)
    path.write_bytes(pickle.dumps(content, protocol=2))


# --- CIFAR: the unpickler runs no code ----------------------------------------------------------------------


class Payload:
    """Unpickles as `function(*args)`: what a crafted dataset file would do."""

    def __init__(self, function, *args) -> None:
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def hostile(kind: str, marker) -> Payload:
    """A payload that would create `marker`."""
    return {
        "system": Payload(os.system, f"touch {marker}"),
        "open": Payload(open, str(marker), "w"),
        "eval": Payload(eval, f"__import__('pathlib').Path({str(marker)!r}).touch()"),
        "exec": Payload(exec, f"open({str(marker)!r}, 'w')"),
    }[kind]


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("kind", ["system", "open", "eval", "exec"])
def test_cifar_pickle_cannot_run_code(tmp_path, kind, protocol):
    written = write_cifar10(tmp_path / "data")
    marker = tmp_path / "marker"
    payload = hostile(kind, marker)
    name = payload.function.__name__  # posix.system, io.open, builtins.eval (__builtin__.eval at protocol 2) …
    batch = written["folder"] / "data_batch_1"
    rows = written["train_rows"][:3]
    batch.write_bytes(pickle.dumps({"data": rows, "labels": [0, 1, 2], "evil": payload}, protocol=protocol))
    message = one_line_error(rf"data_batch_1: refusing to unpickle [\w.]+\.{name} \(not part of the CIFAR "
                             r"format\)", cifar10(tmp_path / "data"))
    assert str(batch) in message
    assert not marker.exists()
    pickle.loads(batch.read_bytes())  # the payload is live: plain pickle runs it
    assert marker.exists()


@pytest.mark.parametrize("global_name", [b"numpy\nload", b"numpy.lib.npyio\nload", b"subprocess\ncall",
                                         b"builtins\ngetattr", b"copyreg\n_reconstructor", b"numpy\nfromfile"])
def test_cifar_pickle_refuses_any_other_global(tmp_path, global_name):
    """Hand-written protocol-0 pickles naming a global the CIFAR format never holds, numpy's own loaders included."""
    written = write_cifar10(tmp_path)
    (written["folder"] / "batches.meta").write_bytes(b"c" + global_name + b"\n(S'x'\ntR.")
    module, name = global_name.decode().split("\n")
    one_line_error(rf"batches.meta: refusing to unpickle {re.escape(module)}\.{name} ", cifar10(tmp_path))


@pytest.mark.parametrize("numpy_module", NUMPY_MODULES)
def test_cifar10_loads_with_numpy_1_and_2_module_paths(tmp_path, numpy_module):
    written = write_cifar10(tmp_path, numpy_module=numpy_module)
    raw = (written["folder"] / "data_batch_1").read_bytes()
    assert f"c{numpy_module}.multiarray\n_reconstruct".encode() in raw
    data = cifar10(tmp_path)()
    assert np.array_equal(data.train_images.numpy(), written["train_images"])
    assert data.train_labels.tolist() == written["train_labels"].tolist()
    assert np.array_equal(data.test_images.numpy(), written["test_images"])


@pytest.mark.parametrize("numpy_module", NUMPY_MODULES)
def test_cifar20_loads_with_numpy_1_and_2_module_paths(tmp_path, numpy_module):
    written = write_cifar100(tmp_path, bytes_keys=True, numpy_module=numpy_module)
    data = cifar100(tmp_path, coarse=True)()
    assert np.array_equal(data.train_images.numpy(), written["train_images"])
    assert data.train_labels.tolist() == written["train_coarse"].tolist()
    assert data.test_groups.tolist() == written["test_fine"].tolist()


def test_cifar_numpy_scalars_and_protocol_4_load(tmp_path):
    """numpy scalars (`scalar`) and protocol 4's STACK_GLOBAL name the same admitted globals."""
    written = write_cifar10(tmp_path)
    batch = written["folder"] / "data_batch_4"
    with open(batch, "rb") as f:
        content = pickle.load(f, encoding="latin1")
    content["labels"] = [np.int64(v) for v in content["labels"]]
    batch.write_bytes(pickle.dumps(content, protocol=4))
    assert cifar10(tmp_path)().train_labels.tolist() == written["train_labels"].tolist()


# --- CIFAR: damaged and foreign files -----------------------------------------------------------------------


def test_cifar_truncated_pickle(tmp_path):
    written = write_cifar10(tmp_path)
    batch = written["folder"] / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:300])
    message = one_line_error("data_batch_3: not a readable CIFAR pickle", cifar10(tmp_path))
    assert "cifar-10-python.tar.gz" in message and "cs.toronto.edu" in message


def test_cifar_garbage_file(tmp_path):
    written = write_cifar10(tmp_path)
    (written["folder"] / "test_batch").write_bytes(b"<html>404 Not Found</html>\n")
    one_line_error("test_batch: not a readable CIFAR pickle", cifar10(tmp_path))


def test_cifar_pickle_of_a_list(tmp_path):
    written = write_cifar10(tmp_path)
    (written["folder"] / "data_batch_5").write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    one_line_error("data_batch_5: holds a list, not the dict of a CIFAR file", cifar10(tmp_path))


@pytest.mark.parametrize("key", ["data", "labels"])
def test_cifar10_batch_without_key(tmp_path, key):
    written = write_cifar10(tmp_path)
    rewrite(written["folder"] / "data_batch_3", lambda content: content.pop(key))
    message = one_line_error(f"data_batch_3: no '{key}' entry", cifar10(tmp_path))
    assert "cifar-10-python.tar.gz" in message


def test_cifar10_meta_without_label_names(tmp_path):
    written = write_cifar10(tmp_path)
    rewrite(written["folder"] / "batches.meta", lambda content: content.pop("label_names"))
    one_line_error("batches.meta: no 'label_names' entry", cifar10(tmp_path))


@pytest.mark.parametrize(("data", "described"), [
    (np.zeros((3, 3071), np.uint8), r"a uint8 array of shape \(3, 3071\)"),
    (np.zeros((3, 3, 32, 32), np.uint8), r"a uint8 array of shape \(3, 3, 32, 32\)"),
    (np.zeros((3, 3072), np.int64), r"a int64 array of shape \(3, 3072\)"),
    ([[0] * 3072] * 3, "a list"),
])
def test_cifar10_data_of_the_wrong_shape(tmp_path, data, described):
    written = write_cifar10(tmp_path)
    rewrite(written["folder"] / "data_batch_1", lambda content: content.update(data=data))
    one_line_error(rf"data_batch_1: 'data' is {described}; expected a uint8 array of shape \(N, 3072\)",
                   cifar10(tmp_path))


@pytest.mark.parametrize("change", ["longer", "shorter"])
def test_cifar10_images_and_labels_of_different_counts(tmp_path, change):
    written = write_cifar10(tmp_path, n_per_batch=3)

    def edit(content):
        content["labels"] = [*content["labels"], 0] if change == "longer" else content["labels"][:2]

    rewrite(written["folder"] / "test_batch", edit)
    count = 4 if change == "longer" else 2
    one_line_error(f"test_batch: 3 images but {count} 'labels'; the counts must match", cifar10(tmp_path))


@pytest.mark.parametrize("label", [10, -1, 255])
def test_cifar10_label_out_of_range(tmp_path, label):
    written = write_cifar10(tmp_path)
    rewrite(written["folder"] / "data_batch_4", lambda content: content["labels"].__setitem__(1, label))
    one_line_error(rf"data_batch_4: 'labels': label {label} is out of range for 10 classes; valid: 0 to 9",
                   cifar10(tmp_path))


@pytest.mark.parametrize("labels", [["cat", "dog", "cat"], [0.5, 1.0, 2.0], 7])
def test_cifar10_labels_that_are_not_integers(tmp_path, labels):
    written = write_cifar10(tmp_path)
    rewrite(written["folder"] / "data_batch_1", lambda content: content.update(labels=labels))
    one_line_error("data_batch_1: 'labels' is not a list of integer labels", cifar10(tmp_path))


@pytest.mark.parametrize(("key", "label", "classes"), [("fine_labels", 100, 100), ("coarse_labels", 20, 20),
                                                       ("fine_labels", -3, 100)])
def test_cifar100_label_out_of_range(tmp_path, key, label, classes):
    written = write_cifar100(tmp_path)
    rewrite(written["folder"] / "train", lambda content: content[key].__setitem__(5, label))
    one_line_error(rf"cifar-100-python/train: '{key}': label {label} is out of range for {classes} classes",
                   cifar100(tmp_path))


def test_cifar100_without_coarse_labels(tmp_path):
    written = write_cifar100(tmp_path)
    rewrite(written["folder"] / "test", lambda content: content.pop("coarse_labels"))
    message = one_line_error("cifar-100-python/test: no 'coarse_labels' entry", cifar100(tmp_path, coarse=True))
    assert "cifar-100-python.tar.gz" in message


def test_cifar100_meta_names_not_a_list(tmp_path):
    written = write_cifar100(tmp_path)
    rewrite(written["folder"] / "meta", lambda content: content.update(fine_label_names=3))
    one_line_error("meta: 'fine_label_names' is not a list of class names", cifar100(tmp_path))


# --- Fashion-MNIST ------------------------------------------------------------------------------------------


def test_fashion_truncated_gzip(tmp_path):
    written = write_fashion_mnist(tmp_path)
    path = written["paths"]["train_images"]
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    message = one_line_error(r"train-images-idx3-ubyte.gz: cannot be read \(EOFError", fashion(tmp_path))
    assert "dataset-fashion-mnist" in message


def test_fashion_file_that_is_not_gzip(tmp_path):
    written = write_fashion_mnist(tmp_path)
    written["paths"]["test_labels"].write_bytes(b"not a gzip stream at all")
    one_line_error(r"t10k-labels-idx1-ubyte.gz: cannot be read \(BadGzipFile", fashion(tmp_path))


def test_fashion_corrupt_gzip_stream(tmp_path):
    written = write_fashion_mnist(tmp_path)
    path = written["paths"]["train_labels"]
    raw = bytearray(path.read_bytes())
    raw[12:-8] = bytes(len(raw) - 20)  # the header stays, the deflate stream is zeroed
    path.write_bytes(bytes(raw))
    one_line_error("train-labels-idx1-ubyte.gz: cannot be read", fashion(tmp_path))


@pytest.mark.parametrize("gz", [False, True])
def test_fashion_truncated_idx(tmp_path, gz):
    write_fashion_mnist(tmp_path, n_train=6, gz=gz)
    path = tmp_path / ("train-images-idx3-ubyte" + (".gz" if gz else ""))
    content = idx_bytes(np.zeros((6, 28, 28), np.uint8), 0x00000803)[:-100]
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(content)
    else:
        path.write_bytes(content)
    message = one_line_error(r"train-images-idx3-ubyte(\.gz)?: truncated: its header promises 6 × 28 × 28 values "
                             r"\(4720 bytes with the header\) but it holds 4620 bytes", fashion(tmp_path))
    assert "dataset-fashion-mnist" in message


@pytest.mark.parametrize(("content", "problem"), [
    (b"", "truncated: 0 bytes, fewer than the 16 of the IDX header"),
    (b"\x00\x00", "truncated: 2 bytes, fewer than the 16 of the IDX header"),
    (b"\x00\x00\x08\x03\x00\x00\x00\x06\x00\x00", "truncated: 10 bytes, fewer than the 16 of the IDX header"),
])
def test_fashion_truncated_header(tmp_path, content, problem):
    write_fashion_mnist(tmp_path, gz=False)
    (tmp_path / FASHION_FILES["test_images"]).write_bytes(content)
    one_line_error(f"t10k-images-idx3-ubyte: {problem}", fashion(tmp_path))


def test_fashion_idx_too_long(tmp_path):
    written = write_fashion_mnist(tmp_path, gz=False, n_test=4)
    path = written["paths"]["test_labels"]
    path.write_bytes(path.read_bytes() + b"\x01\x02")
    one_line_error("t10k-labels-idx1-ubyte: too long: its header promises 4 values", fashion(tmp_path))


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_images_and_labels_of_different_counts(tmp_path, gz):
    written = write_fashion_mnist(tmp_path, n_train=6, gz=gz)
    path = written["paths"]["train_labels"]
    content = idx_bytes(written["train_labels"][:5], IDX_LABELS_MAGIC)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(content)
    else:
        path.write_bytes(content)
    one_line_error(r"train-images-idx3-ubyte(\.gz)? holds 6 images but .*train-labels-idx1-ubyte(\.gz)? holds 5 "
                   "labels; the counts must match", fashion(tmp_path))


def test_fashion_label_out_of_range(tmp_path):
    written = write_fashion_mnist(tmp_path, gz=False)
    labels = written["test_labels"].copy()
    labels[2] = 10
    written["paths"]["test_labels"].write_bytes(idx_bytes(labels, IDX_LABELS_MAGIC))
    one_line_error("t10k-labels-idx1-ubyte: label 10 is out of range for 10 classes; valid: 0 to 9",
                   fashion(tmp_path))


# --- digits and the checks every loader's result passes -------------------------------------------------------


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.2, float("nan")])
def test_digits_test_fraction_outside_unit_interval(fraction):
    one_line_error(rf"the 'test_fraction' option of dataset digits must be in \(0, 1\) .*; got {fraction} instead",
                   lambda: Digits(name="digits", test_fraction=fraction, **STATS))


def test_digits_test_fraction_that_empties_the_test_pool():
    """round(0.001 · n_c) is 0 for every class of 174 to 183 samples."""
    one_line_error("dataset digits, test pool: no samples",
                   lambda: Digits(name="digits", test_fraction=0.001, **STATS).load())


class Given(ImageSource):
    """A loader that returns the tensors it was given, to reach the checks of `build` directly."""

    def __init__(self, pools: dict, **kwargs) -> None:
        super().__init__(name="given", mean=[0.5], std=[0.25], **kwargs)
        self.pools = pools

    def load(self) -> ImageData:
        return self.build(**self.pools)


def pools(n_train: int = 4, n_test: int = 2, **changes) -> dict:
    base = {"train_images": torch.zeros(n_train, 1, 4, 4, dtype=torch.uint8), "train_labels": torch.arange(n_train) % 2,
            "test_images": torch.zeros(n_test, 1, 4, 4, dtype=torch.uint8), "test_labels": torch.arange(n_test) % 2,
            "classes": ["a", "b"]}
    return base | changes


@pytest.mark.parametrize(("changes", "match"), [
    ({"train_labels": torch.tensor([0, 1, 2, 0])}, "given, train pool: label 2 is out of range for 2 classes"),
    ({"test_labels": torch.tensor([-1, 0])}, "given, test pool: label -1 is out of range for 2 classes"),
    ({"test_labels": torch.tensor([0, 1, 1])}, "given, test pool: 2 images but 3 labels"),
    ({"train_images": torch.zeros(0, 1, 4, 4, dtype=torch.uint8), "train_labels": torch.zeros(0, dtype=torch.long)},
     "given, train pool: no samples"),
    ({"test_images": torch.zeros(2, 1, 5, 5, dtype=torch.uint8)},
     "train images are 1 × 4 × 4 but test images 1 × 5 × 5"),
    ({"train_groups": torch.tensor([0, 1, 3, 0]), "test_groups": torch.tensor([0, 1]), "group_names": ["x", "y", "z"]},
     "given, train pool: sub-class label 3 is out of range for 3 classes"),
])
def test_build_refuses_inconsistent_pools(changes, match):
    one_line_error(match, lambda: Given(pools(**changes)).load())


def test_build_accepts_consistent_pools():
    data = Given(pools(train_groups=torch.tensor([0, 1, 2, 0]), test_groups=torch.tensor([2, 1]),
                       group_names=["x", "y", "z"])).load()
    assert data.num_classes == 2 and len(data.train_labels) == 4


# --- scenarios: no empty split ------------------------------------------------------------------------------


def tiny(train_labels: list[int], test_labels: list[int], classes=("a", "b", "c")) -> ImageData:
    return Given(pools(len(train_labels), len(test_labels), train_labels=torch.tensor(train_labels),
                       test_labels=torch.tensor(test_labels), classes=list(classes))).load()


@pytest.mark.parametrize("fraction", [1.0, 1, "1"])
def test_random_sample_of_everything_is_refused(fraction):
    data = tiny([0, 1, 2, 0, 1], [0, 1])
    one_line_error(r"random-sample fraction 1.0 leaves no retained sample .*; valid: \(0, 1\)",
                   lambda: RandomSample(name="random_sample", targets=[fraction]).targets(data))


def test_random_sample_that_rounds_up_to_everything_is_refused():
    """ceil(0.9 · 5) = 5: the draw would forget every training sample."""
    data = tiny([0, 1, 2, 0, 1], [0, 1])
    one_line_error("random-sample fraction 0.9 leaves no retained sample",
                   lambda: RandomSample(name="random_sample", targets=[0.9]).targets(data))
    assert RandomSample(name="random_sample", targets=[0.7]).targets(data) == ["0.7"]  # ceil(3.5) = 4 < 5


def test_random_sample_split_of_everything_is_refused():
    """Even past `targets()`, the split itself refuses an empty D_r."""
    data = tiny([0, 1, 2, 0, 1], [0, 1])
    one_line_error(r"target 1.0: D_r \(retain_train\) is empty",
                   lambda: RandomSample(name="random_sample").split(data, "1.0", torch.Generator().manual_seed(0)))


@pytest.mark.parametrize(("train", "test", "match"), [
    ([0, 1, 0, 1], [0, 1, 2], r"target c: D_f \(forget_train\) is empty: the target has no training sample"),
    ([0, 1, 2, 1], [0, 1, 1], r"target c: D'_f \(forget_test\) is empty: the target has no test sample"),
    ([2, 1, 2, 0], [2, 2], r"target c: D'_r \(retain_test\) is empty"),
    ([2, 2, 2], [0, 2], r"target c: D_r \(retain_train\) is empty"),
])
def test_full_class_with_an_empty_split(train, test, match):
    data = tiny(train, test)
    one_line_error(match, lambda: FullClass(name="full_class").split(data, "c", torch.Generator().manual_seed(0)))


def test_sub_class_without_test_samples(tmp_path):
    written = write_cifar100(tmp_path)
    data = cifar100(tmp_path, coarse=True)()
    train_only = [c for c in range(100) if (written["train_fine"] == c).any() and not (written["test_fine"] == c).any()]
    name = data.group_names[train_only[0]]
    scenario = SubClass(name="sub_class", targets=[name])
    assert scenario.targets(data) == [name]
    one_line_error(rf"scenario sub_class, target {name}: D'_f \(forget_test\) is empty: the target has no test sample",
                   lambda: scenario.split(data, name, torch.Generator().manual_seed(0)))


# --- LETOR text ---------------------------------------------------------------------------------------------


def letor_line(relevance: object = 1, qid: object = 7, features: str | None = None) -> str:
    values = features if features is not None else " ".join(f"{j}:0.{j:02d}" for j in range(1, FEATURES + 1))
    return f"{relevance} qid:{qid} {values} #docid = GX000-00-0000000 inc = 1 prob = 0.5"


def fold(root, train_lines: list[str], test_lines: list[str] | None = None):
    folder = root / "MQ2007" / "Fold1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.txt").write_text("\n".join(train_lines) + "\n")
    (folder / "test.txt").write_text("\n".join(test_lines or [letor_line()]) + "\n")
    return lambda: Mq2007(name="mq2007", root=str(root), fold=1).load()


@pytest.mark.parametrize(("bad", "problem"), [
    (letor_line(relevance="x"), "relevance 'x' is not a whole number ≥ 0"),
    (letor_line(relevance="-1"), "relevance '-1' is not a whole number ≥ 0"),
    (letor_line(relevance="1.5"), "relevance '1.5' is not a whole number ≥ 0"),
    ("2 1:0.5 2:0.25", "missing qid: '1:0.5' stands where qid:QID"),
    ("2", "missing qid: the line ends where qid:QID belongs"),
    (letor_line(qid="abc"), "missing qid: 'qid:abc' stands where qid:QID"),
    (letor_line(features="1:0.5 47:0.25"), "feature index 47 is outside 1…46"),
    (letor_line(features="0:0.5 1:0.25"), "feature index 0 is outside 1…46"),
    (letor_line(features="1:0.5 3-0.25"), "token '3-0.25' is not INDEX:VALUE"),
    (letor_line(features="1:0.5 x:0.25"), "token 'x:0.25' is not INDEX:VALUE"),
    (letor_line(features="1:0.5 2:abc"), "feature 2 has the value 'abc', not a finite number"),
    (letor_line(features="1:0.5 2:nan"), "feature 2 has the value 'nan', not a finite number"),
    (letor_line(features="1:0.5 5:0.1 3:0.25"), "feature index 3 follows 5; indices must increase along a line"),
    (letor_line(features="1:0.5 1:0.25"), "feature index 1 follows 1"),
])
def test_malformed_letor_line_names_file_and_line(tmp_path, bad, problem):
    load = fold(tmp_path, [letor_line(), "", letor_line(qid=8), bad, letor_line(qid=9)])
    message = one_line_error(rf"MQ2007/Fold1/train.txt:4: {re.escape(problem)}", load)
    assert "MQ2007.rar" in message


def test_malformed_letor_line_in_the_test_file(tmp_path):
    load = fold(tmp_path, [letor_line()], [letor_line(), letor_line(relevance="high")])
    one_line_error("MQ2007/Fold1/test.txt:2: relevance 'high'", load)


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n"])
def test_letor_file_without_documents(tmp_path, content):
    path = tmp_path / "train.txt"
    path.write_text(content)
    one_line_error("train.txt: no documents", lambda: read_letor(path))


def test_letor_binary_garbage(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(b"Rar!\x1a\x07\x00\xcf\x90\x73\x00\x00")
    one_line_error("train.txt:1: relevance 'Rar!", lambda: read_letor(path))


def test_damaged_synthetic_letor_says_how_to_regenerate(tmp_path):
    source = SyntheticLetor(name="synthetic_letor", root=str(tmp_path), train_queries=8, test_queries=4)
    source.load()
    test_file = source.folder() / "test.txt"
    lines = test_file.read_text().splitlines()
    test_file.write_text("\n".join([*lines[:3], "\0" * 64]) + "\n")  # the NUL block a crash can leave
    message = one_line_error("test.txt:4: ", source.load)
    assert f"delete {source.folder()} and it is written again" in message


def test_letor_parser_matches_svmlight(tmp_path):
    """The checking parser reads what scikit-learn's svmlight reader reads: sparse lines, CRLF, comments."""
    from sklearn.datasets import load_svmlight_file

    from unlearnbench.tasks.ranking.data import group

    lines = [letor_line(2, 10), letor_line(0, 10, "1:0.5 3:-0.25 46:1e-3"), letor_line(1, 3, "2:1"),
             "0 qid:3 4:0.75", letor_line(0, 10)]
    path = tmp_path / "train.txt"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    ours = read_letor(path)
    matrix, labels, qids = load_svmlight_file(str(path), n_features=FEATURES, query_id=True)
    theirs = group(matrix.toarray(), labels.astype(np.int64), qids)
    for field in ("features", "labels", "sizes", "qids"):
        assert np.array_equal(getattr(ours, field), getattr(theirs, field)), field
        assert getattr(ours, field).dtype == getattr(theirs, field).dtype, field
    assert ours.qids.tolist() == [10, 3] and ours.sizes.tolist() == [3, 2]
