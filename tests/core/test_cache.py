"""The artifact cache (docs/running.md, "The cache"): publish, validate, rebuild, key, concurrency, pickle."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import pickle
import struct
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from unlearnbench.runtime.cache import COMPLETE, META, WEIGHTS, ModelCache, cache_key

KEY = cache_key({"dataset": "tiny", "seed": 0})


def small_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "conv.weight": torch.randn(4, 3, 3, 3, generator=g),
        "fc.bias": torch.randn(10, generator=g, dtype=torch.float64),
        "bn.num_batches_tracked": torch.tensor(7, dtype=torch.int64),
    }


class Builder:
    """A build function that counts its calls."""

    def __init__(self, seed: int = 0) -> None:
        self.calls = 0
        self.seed = seed

    def __call__(self) -> tuple[dict[str, torch.Tensor], dict]:
        self.calls += 1
        return small_state(self.seed), {"train_s": 1.5, "final_train_acc": 0.9}


def assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".stale-")))


# ----------------------------------------------------------------------------------- miss, then hit


def test_miss_builds_once_and_publishes_a_complete_entry(tmp_path):
    cache = ModelCache(tmp_path)
    build = Builder()
    entry = cache.get_or_build(KEY, build)
    assert build.calls == 1
    assert entry.hit is False and entry.key == KEY
    assert_same_state(entry.state, small_state())

    folder = tmp_path / KEY
    assert (folder / WEIGHTS).is_file()
    assert (folder / COMPLETE).is_file()
    meta = json.loads((folder / META).read_text())
    assert meta["sha256"] == sha256_of(folder / WEIGHTS)
    assert meta["train_s"] == 1.5 and meta["final_train_acc"] == 0.9
    assert entry.meta["sha256"] == meta["sha256"]


def test_second_get_is_a_hit_without_building(tmp_path):
    cache = ModelCache(tmp_path)
    first = cache.get_or_build(KEY, Builder())
    build = Builder(seed=99)  # would give other tensors, were it called
    second = ModelCache(tmp_path).get_or_build(KEY, build)
    assert build.calls == 0
    assert second.hit is True
    assert_same_state(second.state, first.state)
    assert second.meta == first.meta


def test_no_temporary_folders_are_left_behind(tmp_path):
    cache = ModelCache(tmp_path)
    cache.get_or_build(KEY, Builder())
    cache.get_or_build(cache_key({"other": 1}), Builder(1))
    assert leftovers(tmp_path) == []
    entries = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert entries == sorted([KEY, cache_key({"other": 1})])


def test_read_of_an_absent_key_is_none(tmp_path):
    assert ModelCache(tmp_path).read(KEY) is None


# ---------------------------------------------------------------------------------- damaged entries


def truncate_weights(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])


def flip_one_weight_byte(folder: Path) -> None:
    data = bytearray((folder / WEIGHTS).read_bytes())
    data[-1] ^= 0xFF  # a bit of the last tensor's data: still a loadable file, but not the stored one
    (folder / WEIGHTS).write_bytes(bytes(data))


def delete_weights(folder: Path) -> None:
    (folder / WEIGHTS).unlink()


def delete_complete(folder: Path) -> None:
    (folder / COMPLETE).unlink()


def garble_meta(folder: Path) -> None:
    (folder / META).write_text('{"sha256": "abc", "train_s": ')  # truncated JSON


def empty_meta(folder: Path) -> None:
    (folder / META).write_bytes(b"")


def meta_without_hash(folder: Path) -> None:
    meta = json.loads((folder / META).read_text())
    del meta["sha256"]
    (folder / META).write_text(json.dumps(meta))


def meta_not_an_object(folder: Path) -> None:
    (folder / META).write_text("[1, 2, 3]")


DAMAGES = [truncate_weights, flip_one_weight_byte, delete_weights, delete_complete, garble_meta, empty_meta,
           meta_without_hash,
           meta_not_an_object]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_entry_is_rebuilt(tmp_path, damage):
    cache = ModelCache(tmp_path)
    cache.get_or_build(KEY, Builder())
    damage(tmp_path / KEY)

    assert cache.read(KEY) is None
    build = Builder()
    entry = cache.get_or_build(KEY, build)
    assert build.calls == 1
    assert entry.hit is False
    assert_same_state(entry.state, small_state())

    again = cache.read(KEY)  # the rebuilt entry is valid
    assert again is not None and again.hit is True
    assert_same_state(again.state, small_state())
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------- cache_key


def test_cache_key_ignores_key_order():
    a = {"dataset": "digits", "model": {"width": 16, "depth": 18}, "seed": 3, "precision": "32-true"}
    b = {"precision": "32-true", "seed": 3, "model": {"depth": 18, "width": 16}, "dataset": "digits"}
    assert cache_key(a) == cache_key(b)
    assert len(cache_key(a)) == 64 and int(cache_key(a), 16) >= 0


@pytest.mark.parametrize("change", [
    ("dataset", "cifar10"), ("seed", 4), ("precision", "bf16-mixed"), ("model", {"width": 32, "depth": 18}),
    ("model", {"width": 16, "depth": 34}), ("indices", "f00"), ("seed", "3"), ("seed", 3.5),
])
def test_cache_key_changes_with_any_value(change):
    base = {"dataset": "digits", "model": {"width": 16, "depth": 18}, "seed": 3, "precision": "32-true",
            "indices": "abc"}
    name, value = change
    assert cache_key({**base, name: value}) != cache_key(base)


def test_cache_key_changes_with_an_added_field():
    base = {"dataset": "digits", "seed": 3}
    assert cache_key({**base, "version": "0.1"}) != cache_key(base)


# -------------------------------------------------------------------------------------- concurrency


def slow_build(counter: str) -> tuple[dict[str, torch.Tensor], dict]:
    with open(counter, "a") as f:
        f.write("built\n")
    time.sleep(1.0)
    return small_state(5), {"train_s": 1.0}


def ask(root: str, counter: str, barrier) -> tuple[bool, dict[str, list]]:
    from functools import partial

    cache = ModelCache(root)
    barrier.wait(timeout=60)  # every process has imported everything: they ask at the same moment
    entry = cache.get_or_build(KEY, partial(slow_build, counter))
    return entry.hit, {name: tensor.tolist() for name, tensor in entry.state.items()}


def worker(root: str, counter: str, barrier, results) -> None:
    results.put(ask(root, counter, barrier))


@pytest.mark.processes
def test_concurrent_processes_build_once(tmp_path):
    """Two processes (this one and a spawned one) ask for one key at once: one builds, the other waits.

    The test process takes part itself because a spawned process spends most of this test importing torch and
    lightning; one child rather than two keeps the test at a few seconds on a 2-core machine.
    """
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    counter, root = tmp_path / "counter.txt", tmp_path / "cache"
    child = context.Process(target=worker, args=(str(root), str(counter), barrier, results))
    child.start()
    try:
        outcomes = [ask(str(root), str(counter), barrier), results.get(timeout=60)]
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0

    assert counter.read_text().splitlines() == ["built"]
    assert sorted(hit for hit, _ in outcomes) == [False, True]
    expected = {name: tensor.tolist() for name, tensor in small_state(5).items()}
    for _, state in outcomes:
        assert state == expected
    assert ModelCache(root).read(KEY) is not None
    assert leftovers(root) == []


# ---------------------------------------------------------------------------------------- no pickle


def test_weights_are_safetensors(tmp_path):
    ModelCache(tmp_path).get_or_build(KEY, Builder())
    path = tmp_path / KEY / WEIGHTS
    raw = path.read_bytes()
    (header_size,) = struct.unpack("<Q", raw[:8])  # safetensors: u64 header length, then a JSON header
    header = json.loads(raw[8 : 8 + header_size])
    assert set(header) - {"__metadata__"} == set(small_state())
    assert not raw.startswith((b"PK", b"\x80"))  # neither a torch zip archive nor a pickle stream
    assert_same_state(load_file(path), small_state())


def test_no_pickle_is_used(tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "dump", "dumps", "Unpickler", "Pickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(torch, "save", forbidden)

    cache = ModelCache(tmp_path)
    miss = cache.get_or_build(KEY, Builder())
    hit = cache.get_or_build(KEY, Builder())
    assert miss.hit is False and hit.hit is True
    assert_same_state(hit.state, small_state())
