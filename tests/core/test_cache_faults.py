"""The artifact cache under faults: failed writes, dead writers' leftovers, read-only folders, entries that misfit."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch
from test_cache import KEY, Builder, assert_same_state, leftovers, small_state

from unlearnbench.runtime import cache as cache_module
from unlearnbench.runtime.cache import COMPLETE, LEFTOVER_AGE_S, ModelCache, cache_key, scratch_name, writer_host
from unlearnbench.runtime.errors import UserError

OTHER = cache_key({"other": 1})


def unwritable_message(root: Path) -> str:
    return (f"cache folder {root} is not writable and has no entry for this model; make it writable or choose another "
            "with paths.cache_dir=...")


# ------------------------------------------------------------------------------------------ failed writes


def fail_save(*args, **kwargs):
    Path(args[1]).write_bytes(b"half a file")  # the failure comes after something was written
    raise OSError(errno.ENOSPC, "No space left on device")


def fail_fsync(fd):
    raise OSError(errno.EIO, "Input/output error")


def interrupt_save(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(("name", "replacement", "error"), [
    ("save_file", fail_save, OSError),
    ("fsync", fail_fsync, OSError),
    ("save_file", interrupt_save, KeyboardInterrupt),
])
def test_failed_publish_removes_its_temporary_folder(tmp_path, monkeypatch, name, replacement, error):
    target = cache_module.os if name == "fsync" else cache_module
    with monkeypatch.context() as patch:
        patch.setattr(target, name, replacement)
        with pytest.raises(error):
            ModelCache(tmp_path).get_or_build(KEY, Builder())
    assert leftovers(tmp_path) == []
    assert not (tmp_path / KEY).exists()

    build = Builder()  # the failure left nothing in the way of the next writer
    assert ModelCache(tmp_path).get_or_build(KEY, build).hit is False and build.calls == 1
    assert ModelCache(tmp_path).get_or_build(KEY, Builder()).hit is True
    assert leftovers(tmp_path) == []


def test_failed_rebuild_keeps_no_scratch_folder(tmp_path, monkeypatch):
    """Replacing a rejected entry moves it to a `.stale-` folder; a write that then fails leaves neither behind."""
    cache = ModelCache(tmp_path)
    cache.get_or_build(KEY, Builder())
    monkeypatch.setattr(cache_module, "save_file", fail_save)
    with pytest.raises(OSError, match="No space"):
        cache.get_or_build(KEY, Builder(), accept=lambda entry: False)
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------- leftovers of dead writers


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def scratch(root: Path, name: str, age_s: float = 0.0) -> str:
    """A scratch folder `name` with a file in it, last modified `age_s` ago."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "weights.safetensors").write_bytes(b"partial")
    stamp = time.time() - age_s
    os.utime(folder, (stamp, stamp))
    return name


def named(kind: str, host: str, pid: int) -> str:
    return f".{kind}-{KEY[:16]}-{host}-{pid}-{uuid.uuid4().hex}"


def test_scratch_names_record_the_writer():
    name = scratch_name("tmp", KEY)
    match = cache_module.SCRATCH_NAME.fullmatch(name)
    assert match is not None and name.startswith(f".tmp-{KEY[:16]}-")
    assert match["host"] == writer_host() and int(match["pid"]) == os.getpid()


@pytest.mark.processes
def test_first_use_sweeps_the_leftovers_of_dead_writers_only(tmp_path):
    here, gone, old = writer_host(), dead_pid(), LEFTOVER_AGE_S + 3600
    removed = [
        scratch(tmp_path, named("tmp", here, gone)),  # this host, writer dead
        scratch(tmp_path, named("stale", here, gone)),
        scratch(tmp_path, named("tmp", "another.host", 12345), age_s=old),  # any host, older than a day
        scratch(tmp_path, f".tmp-{KEY[:16]}-{uuid.uuid4().hex}", age_s=old),  # an unnamed writer, older than a day
    ]
    kept = [
        scratch(tmp_path, named("tmp", here, os.getpid())),  # this host, writer alive (this process)
        scratch(tmp_path, named("tmp", "another.host", gone)),  # another host, young: its writer may be alive
        scratch(tmp_path, named("stale", "another.host", 1), age_s=LEFTOVER_AGE_S - 3600),
        scratch(tmp_path, f".tmp-{KEY[:16]}-{uuid.uuid4().hex}"),  # an unnamed writer, young
    ]
    ModelCache(tmp_path).get_or_build(OTHER, Builder(1))  # an entry of this cache, intact
    ModelCache(tmp_path).get_or_build(KEY, Builder())

    assert leftovers(tmp_path) == sorted(kept)
    assert not any((tmp_path / name).exists() for name in removed)
    assert ModelCache(tmp_path).read(OTHER) is not None
    assert (tmp_path / f"{OTHER}.lock").exists()


@pytest.mark.processes
def test_the_sweep_runs_once_per_cache_instance(tmp_path):
    cache = ModelCache(tmp_path)
    cache.get_or_build(KEY, Builder())
    late = scratch(tmp_path, named("tmp", writer_host(), dead_pid()))
    cache.get_or_build(KEY, Builder())
    assert leftovers(tmp_path) == [late]  # the same instance does not list the folder again
    ModelCache(tmp_path).get_or_build(KEY, Builder())
    assert leftovers(tmp_path) == []


@pytest.mark.processes
def test_publish_alone_sweeps_too(tmp_path):
    scratch(tmp_path, named("stale", writer_host(), dead_pid()))
    ModelCache(tmp_path).publish(KEY, small_state(), {})
    assert leftovers(tmp_path) == []
    assert (tmp_path / KEY / COMPLETE).exists()


@pytest.mark.processes
def test_a_failing_sweep_does_not_fail_the_job(tmp_path, monkeypatch, caplog):
    stuck = scratch(tmp_path, named("tmp", writer_host(), dead_pid()))

    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(cache_module.shutil, "rmtree", refuse)
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        entry = ModelCache(tmp_path).get_or_build(KEY, Builder())
    assert entry.hit is False and ModelCache(tmp_path).read(KEY) is not None
    assert leftovers(tmp_path) == [stuck]
    assert any(stuck in record.getMessage() for record in caplog.records)


@pytest.mark.processes
def test_an_unreadable_leftover_does_not_fail_the_job(tmp_path, monkeypatch):
    def broken(path, now):
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(cache_module, "abandoned", broken)
    scratch(tmp_path, named("tmp", writer_host(), dead_pid()))
    assert ModelCache(tmp_path).get_or_build(KEY, Builder()).hit is False
    assert ModelCache(tmp_path).get_or_build(KEY, Builder()).hit is True


# ------------------------------------------------------------------------------------------ read-only cache


@pytest.fixture
def read_only(monkeypatch):
    """Make a cache root refuse writes the way a read-only folder does, even for root (who ignores permission bits):
    the lock file cannot be opened and no folder can be created under it."""

    def make(root: Path, error: int = errno.EACCES) -> None:
        make_folder = Path.mkdir

        def mkdir(self, mode=0o777, parents=False, exist_ok=False):
            if self == root or root in self.parents:
                if exist_ok and self.is_dir():
                    return
                raise OSError(error, os.strerror(error), str(self))
            return make_folder(self, mode, parents, exist_ok)

        class Lock:
            def __init__(self, path: str) -> None:
                self.path = path

            def acquire(self) -> None:
                raise (PermissionError if error in (errno.EACCES, errno.EPERM) else OSError)(
                    error, os.strerror(error), self.path)

        monkeypatch.setattr(Path, "mkdir", mkdir)
        monkeypatch.setattr(cache_module, "FileLock", Lock)

    return make


@pytest.mark.parametrize("error", [errno.EACCES, errno.EROFS], ids=["EACCES", "EROFS"])
def test_a_read_only_cache_serves_its_entries(tmp_path, read_only, error):
    ModelCache(tmp_path).get_or_build(KEY, Builder())
    before = sorted(p.name for p in tmp_path.iterdir())
    read_only(tmp_path, error)

    build = Builder(seed=99)
    entry = ModelCache(tmp_path).get_or_build(KEY, build)
    assert entry.hit is True and build.calls == 0
    assert_same_state(entry.state, small_state())
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("error", [errno.EACCES, errno.EROFS], ids=["EACCES", "EROFS"])
def test_a_miss_in_a_read_only_cache_is_a_user_error(tmp_path, read_only, error):
    ModelCache(tmp_path).get_or_build(KEY, Builder())
    read_only(tmp_path, error)
    build = Builder()
    with pytest.raises(UserError) as raised:
        ModelCache(tmp_path).get_or_build(OTHER, build)
    assert str(raised.value) == unwritable_message(tmp_path)
    assert build.calls == 0  # it fails before training a model it could not store


def test_a_read_only_cache_rebuilds_nothing(tmp_path, read_only):
    """A damaged or rejected entry cannot be replaced there: the same one-line error as a miss."""
    ModelCache(tmp_path).get_or_build(KEY, Builder())
    read_only(tmp_path)
    with pytest.raises(UserError) as raised:
        ModelCache(tmp_path).get_or_build(KEY, Builder(), accept=lambda entry: False)
    assert str(raised.value) == unwritable_message(tmp_path)
    assert ModelCache(tmp_path).read(KEY) is not None  # the entry is still there


def test_a_cache_folder_that_cannot_be_created_is_a_user_error(tmp_path, read_only):
    read_only(tmp_path)
    root = tmp_path / "cache"
    with pytest.raises(UserError) as raised:
        ModelCache(root).get_or_build(KEY, Builder())
    assert str(raised.value) == unwritable_message(root)
    assert not root.exists()


def test_other_lock_errors_are_not_taken_for_a_read_only_folder(tmp_path, monkeypatch):
    class Lock:
        def __init__(self, path: str) -> None:
            pass

        def acquire(self) -> None:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cache_module, "FileLock", Lock)
    with pytest.raises(OSError, match="Input/output"):
        ModelCache(tmp_path).get_or_build(KEY, Builder())


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root ignores permission bits: test_a_read_only_cache_* simulate the folder instead")
def test_a_chmod_read_only_cache_serves_hits_and_names_a_miss(tmp_path):
    root = tmp_path / "cache"
    ModelCache(root).get_or_build(KEY, Builder())
    root.chmod(0o555)
    try:
        build = Builder(seed=99)
        entry = ModelCache(root).get_or_build(KEY, build)
        assert entry.hit is True and build.calls == 0
        assert_same_state(entry.state, small_state())
        with pytest.raises(UserError) as raised:
            ModelCache(root).get_or_build(OTHER, build)
        assert str(raised.value) == unwritable_message(root)
        assert build.calls == 0
    finally:
        root.chmod(0o755)


# ------------------------------------------------------------------------------- entries that do not fit


def test_a_rejected_entry_is_rebuilt_then_hits(tmp_path):
    cache = ModelCache(tmp_path)
    wrong = {"conv.weight": torch.zeros(8, 3, 3, 3)}  # intact, hashed, but not what the reader expects
    cache.publish(KEY, wrong, {"train_s": 0.1})

    def accept(entry):
        return {name: tuple(t.shape) for name, t in entry.state.items()} == {
            name: tuple(t.shape) for name, t in small_state().items()}

    build = Builder()
    rebuilt = cache.get_or_build(KEY, build, accept=accept)
    assert rebuilt.hit is False and build.calls == 1
    assert_same_state(rebuilt.state, small_state())
    again = ModelCache(tmp_path).get_or_build(KEY, build, accept=accept)
    assert again.hit is True and build.calls == 1
    assert_same_state(again.state, small_state())
    assert leftovers(tmp_path) == []


def store_of(root: Path, monkeypatch):
    """A ModelStore of a real small ResNet18 (one channel, width 4) whose training is stubbed and counted."""
    from lightning_fabric import Fabric

    from unlearnbench.runtime.monitor import CostMonitor
    from unlearnbench.tasks.image.data.base import Subset
    from unlearnbench.tasks.image.data.transforms import Normalizer
    from unlearnbench.tasks.image.models import store as models
    from unlearnbench.tasks.image.models.resnet import ResNet18

    trainings = []

    def train_recipe(fabric, model, subset, recipe, normalizer, generator):
        trainings.append(len(subset))
        return model, 0.5

    monkeypatch.setattr(models, "train_recipe", train_recipe)
    store = models.ModelStore(Fabric(accelerator="cpu", devices=1), lambda: ResNet18(10, in_channels=1, width=4),
                              ModelCache(root), Normalizer([0.5], [0.5]), CostMonitor(torch.device("cpu")),
                              recipe=None, identity={"model": "resnet18", "width": 4})
    return store, Subset(None, "train", torch.arange(8)), trainings


def wider(state):
    from unlearnbench.tasks.image.models.resnet import ResNet18

    return ResNet18(10, in_channels=1, width=8).state_dict()


def renamed(state):
    return {f"module.{name}": tensor for name, tensor in state.items()}  # as a wrapped model would save it


def one_less(state):
    return {name: tensor for name, tensor in state.items() if name != "fc.bias"}


@pytest.mark.parametrize("replace", [wider, renamed, one_less])
def test_a_model_entry_that_does_not_fit_is_rebuilt(tmp_path, monkeypatch, caplog, replace):
    store, subset, trainings = store_of(tmp_path, monkeypatch)
    first = store.trained(subset, "original", seed=0)
    assert first.cache["hit"] is False and trainings == [8]
    key = first.cache["key"]
    store.cache.publish(key, replace(first.state), {"train_s": 1.0})  # an intact entry under the same key
    assert store.cache.read(key) is not None

    with caplog.at_level(logging.WARNING):
        second = store.trained(subset, "original", seed=0)
    assert second.cache["hit"] is False and trainings == [8, 8]
    assert any("does not fit the model" in record.getMessage() for record in caplog.records)
    assert_same_state(second.state, first.state)  # the same seed trains the same model
    assert_same_state(second.module.state_dict(), first.state)

    third = store.trained(subset, "original", seed=0)
    assert third.cache["hit"] is True and trainings == [8, 8]
    assert_same_state(third.state, first.state)
    assert leftovers(tmp_path) == []
