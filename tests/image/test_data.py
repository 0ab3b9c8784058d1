"""Dataset loaders (on fabricated copies of the real files), forgetting scenarios and batch augmentation."""

from __future__ import annotations

import hashlib
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
import torch
from fabricate import (
    CIFAR10_NAMES,
    CIFAR100_COARSE_NAMES,
    CIFAR100_FINE_NAMES,
    FINE_TO_COARSE,
    IDX_IMAGES_MAGIC,
    IDX_LABELS_MAGIC,
    write_cifar10,
    write_cifar100,
    write_fashion_mnist,
)

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.data.cifar import Cifar10, Cifar100
from unlearnbench.tasks.image.data.digits import Digits, stratified_split
from unlearnbench.tasks.image.data.fashion_mnist import FashionMnist
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, SubClass
from unlearnbench.tasks.image.data.transforms import Normalizer, augment

DIGITS_MEAN, DIGITS_STD = [0.3], [0.37]
CIFAR_MEAN, CIFAR_STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
# sha256 of the digits test indices (int64, little-endian) for test_fraction 0.2 and split_seed 0: a change of
# the recorded split must be deliberate.
DIGITS_TEST_SHA256 = "f71c9ddf317ebe278f01acb013a7eed702a00236a3733c9eefc19ea0e7aefeee"
DIGITS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # samples per class in sklearn's digits


def digits_labels() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().target


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def as_set(subset) -> set[int]:
    return set(subset.indices.tolist())


@pytest.fixture(scope="module")
def digits():
    return Digits(name="digits", mean=DIGITS_MEAN, std=DIGITS_STD,
                  targets={"full_class": ["3"], "random_sample": [0.1]}).load()


@pytest.fixture(scope="module")
def cifar20(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar100")
    written = write_cifar100(root)
    data = Cifar100(name="cifar20", mean=CIFAR_MEAN, std=CIFAR_STD, root=str(root), coarse=True,
                    targets={"sub_class": ["rocket", "mushroom"], "full_class": ["vehicles_2"]}).load()
    return data, written


# --- digits -------------------------------------------------------------------------------------------------


def test_digits_tensors(digits):
    from sklearn.datasets import load_digits

    raw = load_digits()
    assert digits.train_images.dtype == torch.uint8 and digits.test_images.dtype == torch.uint8
    assert digits.train_images.shape[1:] == (1, 8, 8) and digits.test_images.shape[1:] == (1, 8, 8)
    assert digits.train_labels.dtype == torch.int64
    assert len(digits.train_labels) + len(digits.test_labels) == 1797
    assert len(digits.train_images) == len(digits.train_labels)
    both = torch.cat([digits.train_images, digits.test_images])
    assert int(both.min()) == 0 and int(both.max()) == 255  # 0–16 scaled to the full uint8 range
    assert digits.classes == [str(c) for c in range(10)]
    assert (digits.channels, digits.image_size, digits.num_classes) == (1, 8, 10)
    assert digits.mean == (0.3,) and digits.std == (0.37,)
    # The pools are the split's rows of sklearn's data, with 16 ↦ 255.
    train_idx, test_idx = stratified_split(raw.target, 0.2, 0)
    expected = np.round(raw.images * 255 / 16).astype(np.uint8)[:, None]
    assert np.array_equal(digits.train_images.numpy(), expected[train_idx])
    assert np.array_equal(digits.test_images.numpy(), expected[test_idx])
    assert np.array_equal(digits.train_labels.numpy(), raw.target[train_idx])
    assert np.array_equal(digits.test_labels.numpy(), raw.target[test_idx])


def test_digits_split_is_disjoint_covering_and_stratified():
    labels = digits_labels()
    assert np.bincount(labels).tolist() == DIGITS_COUNTS
    train_idx, test_idx = stratified_split(labels, 0.2, 0)
    assert len(np.intersect1d(train_idx, test_idx)) == 0
    assert np.array_equal(np.sort(np.concatenate([train_idx, test_idx])), np.arange(1797))
    assert np.all(np.diff(train_idx) > 0) and np.all(np.diff(test_idx) > 0)
    test_counts = np.bincount(labels[test_idx], minlength=10)
    assert test_counts.tolist() == [round(0.2 * n) for n in DIGITS_COUNTS]
    assert len(test_idx) == 359 and len(train_idx) == 1438


def test_digits_split_is_stable_and_pinned():
    labels = digits_labels()
    first = stratified_split(labels, 0.2, 0)
    second = stratified_split(labels, 0.2, 0)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    assert hashlib.sha256(first[1].astype("<i8").tobytes()).hexdigest() == DIGITS_TEST_SHA256
    again = Digits(name="digits", mean=DIGITS_MEAN, std=DIGITS_STD).load()
    assert hashlib.sha256(again.test_labels.numpy().tobytes()).hexdigest() == hashlib.sha256(
        labels[first[1]].astype(np.int64).tobytes()).hexdigest()


def test_digits_split_seed_changes_the_split():
    labels = digits_labels()
    _, test0 = stratified_split(labels, 0.2, 0)
    _, test1 = stratified_split(labels, 0.2, 1)
    assert not np.array_equal(test0, test1)
    assert np.bincount(labels[test1]).tolist() == np.bincount(labels[test0]).tolist()  # still stratified
    other = Digits(name="digits", mean=DIGITS_MEAN, std=DIGITS_STD, split_seed=1).load()
    base = Digits(name="digits", mean=DIGITS_MEAN, std=DIGITS_STD).load()
    assert not torch.equal(other.test_images, base.test_images)


# --- CIFAR-10 -----------------------------------------------------------------------------------------------


def load_cifar10(root) -> object:
    return Cifar10(name="cifar10", mean=CIFAR_MEAN, std=CIFAR_STD, root=str(root)).load()


def test_cifar10_loads_fabricated_files(tmp_path):
    written = write_cifar10(tmp_path, n_per_batch=3)
    data = load_cifar10(tmp_path)
    assert data.train_images.shape == (15, 3, 32, 32) and data.test_images.shape == (3, 3, 32, 32)
    assert data.train_images.dtype == torch.uint8 and data.test_images.dtype == torch.uint8
    assert data.train_labels.dtype == torch.int64 and data.test_labels.dtype == torch.int64
    assert data.classes == CIFAR10_NAMES
    assert data.train_labels.tolist() == written["train_labels"].tolist()
    assert data.test_labels.tolist() == written["test_labels"].tolist()
    assert np.array_equal(data.train_images.numpy(), written["train_images"])
    assert np.array_equal(data.test_images.numpy(), written["test_images"])
    assert data.train_groups is None and data.group_names is None


def test_cifar10_pixel_layout(tmp_path):
    """Each row is 1024 red, 1024 green, 1024 blue values, each plane row-major: row[c·1024 + y·32 + x]."""
    written = write_cifar10(tmp_path, n_per_batch=2)
    data = load_cifar10(tmp_path)
    rows = written["train_rows"]
    for n, c, y, x in [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (3, 1, 5, 7), (7, 2, 31, 30), (9, 2, 17, 3)]:
        assert int(data.train_images[n, c, y, x]) == int(rows[n, c * 1024 + y * 32 + x])
    assert int(data.test_images[1, 1, 2, 3]) == int(written["test_rows"][1, 1024 + 2 * 32 + 3])
    # Not height × width × channel (the PNG layout).
    assert not np.array_equal(data.train_images.numpy(), rows.reshape(-1, 32, 32, 3).transpose(0, 3, 1, 2))


@pytest.mark.parametrize("bytes_batch", [1, 2, 5, 6])
def test_cifar10_bytes_keys_batch_loads_the_same(tmp_path, bytes_batch):
    plain = load_cifar10(write_cifar10(tmp_path / "str", bytes_keys_batch=None)["folder"].parent)
    written = write_cifar10(tmp_path / "bytes", bytes_keys_batch=bytes_batch)
    name = f"data_batch_{bytes_batch}" if bytes_batch <= 5 else "test_batch"
    with open(written["folder"] / name, "rb") as f:
        assert all(isinstance(k, bytes) for k in pickle.load(f, encoding="latin1"))
    mixed = load_cifar10(tmp_path / "bytes")
    for key in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(plain, key), getattr(mixed, key)), key
    assert mixed.classes == CIFAR10_NAMES


def test_cifar10_train_is_batches_1_to_5_in_order(tmp_path):
    written = write_cifar10(tmp_path, n_per_batch=4)
    data = load_cifar10(tmp_path)
    for i in range(5):
        with open(written["folder"] / f"data_batch_{i + 1}", "rb") as f:
            batch = pickle.load(f, encoding="latin1")
        batch = {(k.decode() if isinstance(k, bytes) else k): v for k, v in batch.items()}
        rows = slice(4 * i, 4 * (i + 1))
        assert np.array_equal(data.train_images[rows].reshape(4, -1).numpy(), batch["data"])
        assert data.train_labels[rows].tolist() == batch["labels"]


# --- CIFAR-100 / CIFAR-20 -----------------------------------------------------------------------------------


def test_fabricated_cifar100_uses_the_official_map():
    pairs = {"rocket": "vehicles_2", "mushroom": "fruit_and_vegetables", "baby": "people",
             "lamp": "household_electrical_devices", "sea": "large_natural_outdoor_scenes",
             "apple": "fruit_and_vegetables", "whale": "aquatic_mammals", "pine_tree": "trees",
             "tractor": "vehicles_2"}
    for fine, coarse in pairs.items():
        assert CIFAR100_COARSE_NAMES[FINE_TO_COARSE[CIFAR100_FINE_NAMES.index(fine)]] == coarse
    assert len(CIFAR100_FINE_NAMES) == 100 and sorted(CIFAR100_FINE_NAMES) == CIFAR100_FINE_NAMES
    assert len(CIFAR100_COARSE_NAMES) == 20 and sorted(set(FINE_TO_COARSE)) == list(range(20))
    assert np.bincount(FINE_TO_COARSE).tolist() == [5] * 20


@pytest.mark.parametrize("bytes_keys", [False, True])
def test_cifar100_fine_labels(tmp_path, bytes_keys):
    written = write_cifar100(tmp_path, bytes_keys=bytes_keys)
    data = Cifar100(name="cifar100", mean=CIFAR_MEAN, std=CIFAR_STD, root=str(tmp_path), coarse=False).load()
    assert data.classes == CIFAR100_FINE_NAMES and data.num_classes == 100
    assert data.train_images.shape == (40, 3, 32, 32) and data.test_images.shape == (20, 3, 32, 32)
    assert data.train_images.dtype == torch.uint8
    assert data.train_labels.tolist() == written["train_fine"].tolist()
    assert data.test_labels.tolist() == written["test_fine"].tolist()
    assert np.array_equal(data.train_images.numpy(), written["train_images"])
    assert np.array_equal(data.test_images.numpy(), written["test_images"])
    assert data.train_groups is None and data.test_groups is None and data.group_names is None


@pytest.mark.parametrize("bytes_keys", [False, True])
def test_cifar20_coarse_labels_with_fine_groups(tmp_path, bytes_keys):
    written = write_cifar100(tmp_path, bytes_keys=bytes_keys)
    data = Cifar100(name="cifar20", mean=CIFAR_MEAN, std=CIFAR_STD, root=str(tmp_path), coarse=True).load()
    assert data.classes == CIFAR100_COARSE_NAMES and data.num_classes == 20
    assert data.train_labels.tolist() == written["train_coarse"].tolist()
    assert data.test_labels.tolist() == written["test_coarse"].tolist()
    assert data.train_groups.tolist() == written["train_fine"].tolist()
    assert data.test_groups.tolist() == written["test_fine"].tolist()
    assert data.group_names == CIFAR100_FINE_NAMES
    assert data.train_labels.tolist() == [FINE_TO_COARSE[f] for f in data.train_groups.tolist()]
    assert np.array_equal(data.train_images.numpy(), written["train_images"])


# --- Fashion-MNIST ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_reads_idx(tmp_path, gz):
    written = write_fashion_mnist(tmp_path, n_train=6, n_test=4, gz=gz)
    assert all(p.name.endswith(".gz") == gz for p in written["paths"].values())
    data = FashionMnist(name="fashion_mnist", mean=[0.286], std=[0.353], root=str(tmp_path)).load()
    assert data.train_images.shape == (6, 1, 28, 28) and data.test_images.shape == (4, 1, 28, 28)
    assert data.train_images.dtype == torch.uint8 and data.train_labels.dtype == torch.int64
    assert np.array_equal(data.train_images[:, 0].numpy(), written["train_images"])
    assert np.array_equal(data.test_images[:, 0].numpy(), written["test_images"])
    assert data.train_labels.tolist() == written["train_labels"].tolist()
    assert data.test_labels.tolist() == written["test_labels"].tolist()
    assert data.num_classes == 10 and data.classes[1] == "Trouser" and data.classes[8] == "Bag"


@pytest.mark.parametrize("which", ["images", "labels"])
def test_fashion_mnist_wrong_magic(tmp_path, which):
    bad = {"images_magic": 0x00000801} if which == "images" else {"labels_magic": IDX_IMAGES_MAGIC}
    write_fashion_mnist(tmp_path, **bad)
    with pytest.raises(UserError, match="magic") as error:
        FashionMnist(name="fashion_mnist", mean=[0.286], std=[0.353], root=str(tmp_path)).load()
    assert f"idx{3 if which == 'images' else 1}-ubyte" in str(error.value)
    assert IDX_LABELS_MAGIC == 0x00000801


# --- missing files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("loader", "expected", "source"), [
    (Cifar10, "cifar-10-batches-py/data_batch_1", "cifar-10-python.tar.gz"),
    (Cifar100, "cifar-100-python/train", "cifar-100-python.tar.gz"),
    (FashionMnist, "train-images-idx3-ubyte", "dataset-fashion-mnist"),
])
def test_missing_files_name_path_root_and_source(tmp_path, loader, expected, source):
    root = tmp_path / "empty_root"
    root.mkdir()
    with pytest.raises(UserError) as error:
        loader(name="x", mean=[0.5], std=[0.5], root=str(root)).load()
    message = str(error.value)
    assert str(root / expected) in message
    assert f"under {root}" in message
    assert source in message
    assert "\n" not in message


@pytest.mark.parametrize("loader", [Cifar10, Cifar100, FashionMnist])
def test_loader_without_root_is_a_user_error(loader, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # without a root, files are looked for in the working directory
    with pytest.raises(UserError, match="root"):
        loader(name="x", mean=[0.5], std=[0.5]).load()


def test_missing_single_cifar10_batch_is_named(tmp_path):
    written = write_cifar10(tmp_path)
    (written["folder"] / "data_batch_3").unlink()
    with pytest.raises(UserError, match="data_batch_3") as error:
        load_cifar10(tmp_path)
    assert "more" not in str(error.value)


# --- scenarios ----------------------------------------------------------------------------------------------


def assert_partition(splits, data) -> None:
    """D_f, D_r partition the train pool; D'_f, D'_r the test pool."""
    assert splits.forget_train.pool == "train" and splits.retain_train.pool == "train"
    assert splits.forget_test.pool == "test" and splits.retain_test.pool == "test"
    for forget, retain, n in ((splits.forget_train, splits.retain_train, len(data.train_labels)),
                              (splits.forget_test, splits.retain_test, len(data.test_labels))):
        assert not as_set(forget) & as_set(retain)
        assert as_set(forget) | as_set(retain) == set(range(n))
        assert len(forget) + len(retain) == n


def test_full_class_digits(digits):
    scenario = FullClass(name="full_class", targets=None, batch_size=64)
    assert scenario.targets(digits) == ["3"]  # the loader's standard target
    splits = scenario.split(digits, "3", generator(0))
    assert_partition(splits, digits)
    assert splits.forget_train.indices.tolist() == torch.nonzero(digits.train_labels == 3).flatten().tolist()
    assert splits.forget_test.indices.tolist() == torch.nonzero(digits.test_labels == 3).flatten().tolist()
    assert len(splits.forget_train) == 183 - 37 and len(splits.forget_test) == 37
    assert bool((splits.retain_train.labels[splits.retain_train.indices] != 3).all())
    assert bool((splits.retain_test.labels[splits.retain_test.indices] != 3).all())
    images, labels = splits.forget_train.take(torch.arange(5))
    assert images.shape == (5, 1, 8, 8) and labels.tolist() == [3] * 5
    names = [name for name, _ in splits.items()]
    assert names == ["forget_train", "retain_train", "forget_test", "retain_test"]


@pytest.mark.parametrize("target", ["7", 7, " 7 "])
def test_full_class_given_targets(digits, target):
    scenario = FullClass(name="full_class", targets=[target])
    assert scenario.targets(digits) == ["7"]


def test_sub_class_cifar20(cifar20):
    data, written = cifar20
    scenario = SubClass(name="sub_class", targets=None)
    assert scenario.targets(data) == ["rocket", "mushroom"]
    rocket, vehicles_2 = CIFAR100_FINE_NAMES.index("rocket"), CIFAR100_COARSE_NAMES.index("vehicles_2")
    splits = scenario.split(data, "rocket", generator(0))
    assert_partition(splits, data)
    assert splits.forget_train.indices.tolist() == np.flatnonzero(written["train_fine"] == rocket).tolist()
    assert splits.forget_test.indices.tolist() == np.flatnonzero(written["test_fine"] == rocket).tolist()
    assert len(splits.forget_train) >= 2 and len(splits.forget_test) >= 1
    # The label stays the super-class, and the super-class's other members (tractor, streetcar) are retained.
    assert set(splits.forget_train.labels[splits.forget_train.indices].tolist()) == {vehicles_2}
    assert set(splits.forget_test.labels[splits.forget_test.indices].tolist()) == {vehicles_2}
    retained = splits.retain_train.indices
    assert (data.train_labels[retained] == vehicles_2).any()
    assert not (data.train_groups[retained] == rocket).any()


@pytest.mark.parametrize(("given", "canonical"), [
    ("Rocket", "rocket"), ("ROCKET", "rocket"), (" rocket ", "rocket"), ("sweet pepper", "sweet_pepper"),
    ("Sweet-Pepper", "sweet_pepper"), ("lawn mower", "lawn_mower"), ("Maple-Tree", "maple_tree"),
])
def test_sub_class_names_match_loosely(cifar20, given, canonical):
    data, _ = cifar20
    assert SubClass(name="sub_class", targets=[given]).targets(data) == [canonical]


def test_full_class_cifar20_names_match_loosely(cifar20):
    data, _ = cifar20
    scenario = FullClass(name="full_class", targets=["Vehicles 2", "large man made outdoor things"])
    assert scenario.targets(data) == ["vehicles_2", "large_man-made_outdoor_things"]
    assert FullClass(name="full_class").targets(data) == ["vehicles_2"]


def random_split(data, fraction, seed):
    scenario = RandomSample(name="random_sample", targets=[fraction], batch_size=128)
    [target] = scenario.targets(data)
    return scenario.split(data, target, generator(seed))


def test_random_sample_digits(digits):
    assert RandomSample(name="random_sample").targets(digits) == ["0.1"]  # the loader's standard target
    n = len(digits.train_labels)
    splits = random_split(digits, 0.1, seed=3)
    assert len(splits.forget_train) == math.ceil(Fraction(1, 10) * n) == 144  # 0.1 · 1438 = 143.8
    assert splits.forget_test.pool == "train"
    assert torch.equal(splits.forget_test.indices, splits.forget_train.indices)
    assert splits.retain_test.pool == "test"
    assert splits.retain_test.indices.tolist() == list(range(len(digits.test_labels)))
    assert splits.retain_train.pool == "train"
    assert as_set(splits.forget_train) | as_set(splits.retain_train) == set(range(n))
    assert not as_set(splits.forget_train) & as_set(splits.retain_train)
    assert len(as_set(splits.forget_train)) == 144


@pytest.mark.parametrize("fraction", [0.07, 0.1, 0.14, 0.28, 0.55, 0.99])
def test_random_sample_exact_integer_sizes(tmp_path, fraction):
    """c·N is an integer (N = 100): the size must be exactly c·N, not one more from a floating-point product
    (0.07 · 100 and 0.55 · 100 are just above 7 and 55 in floating point)."""
    write_cifar10(tmp_path, n_per_batch=20)
    data = load_cifar10(tmp_path)
    assert len(data.train_labels) == 100
    expected = Fraction(str(fraction)) * 100
    assert expected.denominator == 1
    assert len(random_split(data, fraction, seed=0).forget_train) == int(expected)


def test_random_sample_is_seeded_and_nested(digits):
    first = random_split(digits, 0.1, seed=5).forget_train.indices
    assert torch.equal(first, random_split(digits, 0.1, seed=5).forget_train.indices)
    assert not torch.equal(first, random_split(digits, 0.1, seed=6).forget_train.indices)
    small = random_split(digits, 0.05, seed=5).forget_train
    assert len(small) == math.ceil(Fraction(5, 100) * len(digits.train_labels))
    assert as_set(small) < set(first.tolist())


def test_unknown_class_lists_valid_names(digits, cifar20):
    with pytest.raises(UserError, match="seven") as error:
        FullClass(name="full_class", targets=["seven"]).targets(digits)
    assert "0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in str(error.value)
    with pytest.raises(UserError) as error:
        SubClass(name="sub_class", targets=["spaceship"]).targets(cifar20[0])
    assert "spaceship" in str(error.value) and "rocket" in str(error.value) and "worm" in str(error.value)


@pytest.mark.parametrize("fraction", [0, 0.0, -0.1, 1.5, "0", "nan", float("inf")])
def test_random_sample_rejects_fractions_outside_unit_interval(digits, fraction):
    expected = rf"the .targets. option of scenario random_sample must be fractions in \(0, 1\); got {fraction} instead"
    with pytest.raises(UserError, match=expected):
        RandomSample(name="random_sample", targets=[fraction]).targets(digits)


@pytest.mark.parametrize("target", ["ten", None, [0.1]])
def test_random_sample_rejects_non_numbers(digits, target):
    with pytest.raises(UserError, match="not a fraction"):
        RandomSample(name="random_sample", targets=[target]).targets(digits)


def test_sub_class_needs_sub_classes(digits):
    with pytest.raises(UserError, match="sub-classes"):
        SubClass(name="sub_class", targets=["3"]).targets(digits)


@pytest.mark.parametrize("scenario", [
    SubClass(name="sub_class"), FullClass(name="full_class"), RandomSample(name="random_sample"),
])
def test_no_targets_anywhere(scenario):
    data = Digits(name="digits", mean=DIGITS_MEAN, std=DIGITS_STD).load()  # no standard targets
    assert data.standard_targets == {}
    with pytest.raises(UserError, match=r"scenario\.targets"):
        scenario.targets(data)


# --- augmentation -------------------------------------------------------------------------------------------


def unit_images(n=64, channels=3, height=8, width=8, seed=0):
    return torch.rand(n, channels, height, width, generator=generator(seed))


def shifted(image, dx: int, dy: int):
    """out[..., y, x] = image[..., y + dy, x + dx], zero outside."""
    out = torch.zeros_like(image)
    height, width = image.shape[-2:]
    ys, yd = slice(max(dy, 0), height + min(dy, 0)), slice(max(-dy, 0), height + min(-dy, 0))
    xs, xd = slice(max(dx, 0), width + min(dx, 0)), slice(max(-dx, 0), width + min(-dx, 0))
    out[..., yd, xd] = image[..., ys, xs]
    return out


def matching_shift(output, image, p):
    for dy in range(-p, p + 1):
        for dx in range(-p, p + 1):
            if torch.allclose(output, shifted(image, dx, dy), atol=1e-5, rtol=0):
                return dx, dy
    return None


def test_augment_all_off_is_identity():
    images = unit_images()
    out = augment(images, generator(0), crop_padding=0, flip=False, rotation=0)
    assert torch.equal(out, images)


@pytest.mark.parametrize("size", [(8, 8), (6, 10)])
def test_augment_crop_is_an_integer_shift_with_zero_fill(size):
    images = unit_images(height=size[0], width=size[1])
    out = augment(images, generator(1), crop_padding=2, flip=False, rotation=0)
    assert out.shape == images.shape
    found = [matching_shift(o, i, 2) for o, i in zip(out, images, strict=True)]
    assert None not in found, [k for k, s in enumerate(found) if s is None]
    assert len(set(found)) > 5  # the shifts vary over the batch


def test_augment_flip_mirrors_some_images():
    images = unit_images()
    out = augment(images, generator(2), crop_padding=0, flip=True, rotation=0)
    mirrored = []
    for o, i in zip(out, images, strict=True):
        same = torch.allclose(o, i, atol=1e-5, rtol=0)
        flipped = torch.allclose(o, torch.flip(i, dims=[-1]), atol=1e-5, rtol=0)
        assert same != flipped
        mirrored.append(flipped)
    assert any(mirrored) and not all(mirrored)


def test_augment_crop_and_flip():
    images = unit_images()
    out = augment(images, generator(3), crop_padding=1, flip=True, rotation=0)
    for o, i in zip(out, images, strict=True):
        mirror = torch.flip(i, dims=[-1])
        assert matching_shift(o, i, 1) is not None or matching_shift(o, mirror, 1) is not None


def test_augment_is_seeded():
    images = unit_images()
    kwargs = {"crop_padding": 2, "flip": True, "rotation": 15.0}
    first = augment(images, generator(7), **kwargs)
    assert torch.equal(first, augment(images, generator(7), **kwargs))
    assert not torch.equal(first, augment(images, generator(8), **kwargs))


def test_augment_rotation_keeps_shape_and_range():
    images = unit_images(n=16, height=16, width=16)
    out = augment(images, generator(4), crop_padding=0, flip=False, rotation=30.0)
    assert out.shape == images.shape and out.dtype == images.dtype
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0 + 1e-6
    assert not torch.allclose(out, images)


def test_normalizer_per_channel():
    images = unit_images(n=4)
    mean, std = [0.1, 0.5, 0.9], [0.2, 0.25, 0.5]
    out = Normalizer(mean, std)(images)
    for c in range(3):
        assert torch.allclose(out[:, c], (images[:, c] - mean[c]) / std[c], atol=1e-6)
