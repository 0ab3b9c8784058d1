"""Image-folder datasets (unlearnbench.tasks.image.data.folders): `image_folder`, `pins`, `caltech101` on fabricated
trees."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch
from fabricate import write_caltech101, write_image, write_pins
from helpers import TINY, results, run_cli

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.data import folders
from unlearnbench.tasks.image.data.folders import ImageFolder
from unlearnbench.tasks.image.data.scenarios import FullClass, SubClass


def caltech(root, cache=None, **options) -> ImageFolder:
    return ImageFolder(name="caltech101", root=str(root), folder="101_ObjectCategories",
                       exclude=["BACKGROUND_Google"], cache_dir=str(cache) if cache else None, **options)


def pins(root, cache=None, **options) -> ImageFolder:
    return ImageFolder(name="pins", root=str(root), folder="105_classes_pins_dataset", prefix="pins_",
                       mean=[0.516, 0.419, 0.373], std=[0.286, 0.255, 0.246], cache_dir=str(cache) if cache else None,
                       **options)


def test_caltech_classes_are_sorted_case_sensitively_without_background_and_every_image_is_rgb(tmp_path):
    write_caltech101(tmp_path)
    data = caltech(tmp_path).load()
    assert data.classes == ["Faces", "Leopards", "airplanes", "ant"]
    assert data.train_images.dtype == torch.uint8 and data.train_images.shape[1:] == (3, 32, 32)
    assert len(data.train_labels) + len(data.test_labels) == 4 * 5 + 1
    grey = folders.decode(tmp_path / "101_ObjectCategories" / "ant" / "image_0099.jpg", 32)
    assert grey.shape == (32, 32, 3) and (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()


def test_the_split_is_stratified_seeded_and_stable_across_runs(tmp_path):
    write_caltech101(tmp_path, per_class=10)
    first, again = caltech(tmp_path).load(), caltech(tmp_path).load()
    assert torch.equal(first.train_images, again.train_images) and torch.equal(first.test_labels, again.test_labels)
    for label in range(4):  # 20% of each class held out (ant has an 11th, greyscale image: round(2.2) = 2)
        assert int((first.test_labels == label).sum()) == 2
    other = caltech(tmp_path, split_seed=1).load()
    assert not torch.equal(first.test_images, other.test_images)
    protocol = caltech(tmp_path, test_fraction=None, train_per_class=3).load()
    assert [int((protocol.train_labels == c).sum()) for c in range(4)] == [3, 3, 3, 3]
    assert len(protocol.test_labels) == 10 * 4 + 1 - 12
    train_rows = {bytes(row.numpy()) for row in first.train_images}  # no image is in both pools
    assert not any(bytes(row.numpy()) in train_rows for row in first.test_images)


def test_pins_class_names_keep_spaces_and_case_and_targets_match_them_loosely(tmp_path):
    write_pins(tmp_path)
    data = pins(tmp_path).load()
    assert data.classes == ["Alex Lawther", "Bill Gates", "Danielle Panabaker", "Hugh Jackman", "Josh Radnor",
                            "barack obama"]
    assert data.mean == (0.516, 0.419, 0.373)
    scenario = FullClass(name="full_class", targets=["bill_gates", "BARACK_OBAMA", "josh radnor"])
    assert scenario.targets(data) == ["Bill Gates", "barack obama", "Josh Radnor"]
    splits = scenario.split(data, "Bill Gates", torch.Generator().manual_seed(0))
    assert len(splits.forget_train) + len(splits.forget_test) == 7  # six JPEGs and a PNG
    with pytest.raises(UserError, match="unknown class 'bill_clinton' for dataset pins; valid: Alex Lawther, "):
        FullClass(name="full_class", targets=["bill_clinton"]).targets(data)
    with pytest.raises(UserError, match="sub-class"):
        SubClass(name="sub_class", targets=["bill_gates"]).targets(data)


def test_the_decode_cache_makes_the_second_load_read_no_image_file(tmp_path, monkeypatch):
    write_pins(tmp_path / "data")
    cache = tmp_path / "decoded"
    first = pins(tmp_path / "data", cache).load()
    assert len(list(cache.glob("pins-*.pt"))) == 1

    def no_decoding(path, size):
        raise AssertionError(f"decoded {path} again")

    monkeypatch.setattr(folders, "decode", no_decoding)
    second = pins(tmp_path / "data", cache).load()
    assert torch.equal(first.train_images, second.train_images) and torch.equal(first.test_labels,
                                                                                second.test_labels)
    changed = tmp_path / "data" / "105_classes_pins_dataset" / "pins_Bill Gates" / "Bill Gates0_10.jpg"
    os.utime(changed, ns=(1, 1))  # another modification time: another entry, decoded again
    with pytest.raises(UserError, match=r"decoded .* again"):
        pins(tmp_path / "data", cache).load()
    monkeypatch.undo()
    (entry,) = cache.glob("pins-*.pt")
    entry.write_bytes(b"damaged")  # a damaged entry is decoded again, not an error
    assert torch.equal(pins(tmp_path / "data", cache).load().train_images, pins(tmp_path / "data").load().train_images)


def test_a_corrupt_image_is_named_in_one_line_or_skipped_with_a_warning_when_allowed(tmp_path, caplog):
    write_caltech101(tmp_path)
    broken = tmp_path / "101_ObjectCategories" / "Leopards" / "image_0042.jpg"
    broken.write_bytes(b"\xff\xd8\xff not really a jpeg")
    with pytest.raises(UserError, match=r"^file .*image_0042.jpg: cannot decode it .*dataset.skip_unreadable=true"):
        caltech(tmp_path).load()
    with caplog.at_level(logging.WARNING):
        data = caltech(tmp_path, skip_unreadable=True).load()
    assert len(data.train_labels) + len(data.test_labels) == 4 * 5 + 1 and data.split["skipped"] == 1
    assert "skipping" in caplog.text and "image_0042.jpg" in caplog.text


def test_image_folder_statistics_come_from_the_training_pool_and_bad_trees_fail_clearly(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        for k in range(4):
            write_image(tmp_path / "mine" / name / f"{k}.png", rng)
    data = ImageFolder(name="image_folder", root=str(tmp_path / "mine"), image_size=8).load()
    pixels = data.train_images.float() / 255
    assert data.mean == pytest.approx(tuple(pixels.mean(dim=(0, 2, 3)).tolist()), rel=1e-6)
    assert data.std == pytest.approx(tuple(pixels.std(dim=(0, 2, 3)).tolist()), rel=1e-6)
    assert data.train_images.shape[1:] == (3, 8, 8)
    with pytest.raises(UserError, match="is not a folder; put one folder of images per class there"):
        ImageFolder(name="image_folder", root=str(tmp_path / "absent")).load()
    (tmp_path / "mine" / "empty").mkdir()
    with pytest.raises(UserError, match=r"class folder .*empty holds no image file"):
        ImageFolder(name="image_folder", root=str(tmp_path / "mine")).load()
    with pytest.raises(UserError, match=r"exactly one of dataset\.test_fraction and dataset\.train_per_class"):
        ImageFolder(name="image_folder", root=str(tmp_path), train_per_class=3)


@pytest.mark.processes
def test_pins_runs_end_to_end_through_the_console_script(tmp_path):
    write_pins(tmp_path / "data" / "pins", per_class=12)
    run = run_cli(["dataset=pins", "+method=ssd", "scenario.targets=[bill_gates]", "model.width=8", *TINY[1:]],
                  tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    (result,) = results(tmp_path / "sweep").values()
    assert result["status"] == "complete"
    assert {r["target"] for r in result["records"]} == {"Bill Gates"}
    assert (tmp_path / "cache" / "decoded").is_dir()
    dataset = result["dataset"]  # the split, recorded
    assert (dataset["name"], dataset["classes"], dataset["split_seed"], dataset["test_fraction"]) == ("pins", 6, 0, 0.2)
    assert dataset["train"] + dataset["test"] == dataset["files"] == 6 * 12 + 2 and dataset["skipped"] == 0
    assert len(dataset["test_files_sha256"]) == 64 and len(dataset["fingerprint"]) == 64
