"""Content-addressed cache of trained models, safe for concurrent jobs on a shared filesystem.

An entry `<root>/<key>/` holds `weights.safetensors`, `meta.json` (with the sha256 of the weights) and a `COMPLETE`
marker written last. Writers build the entry in a temporary folder and publish it with an atomic rename; a file lock
only avoids duplicate work. Readers trust an entry only when COMPLETE exists, the weights' hash matches and the
reader accepts it (e.g. its tensors fit the model); anything else is rebuilt. Weights are never unpickled.

Housekeeping: a failed write removes its temporary folder; scratch folders (`.tmp-*`, `.stale-*`) are named after
their writer's host and pid, so that the first use of a cache removes those whose writer is certainly dead. A cache
folder that is not writable (a read-only copy or mount) still serves its entries, read without the lock.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from lightning_fabric import Fabric
from safetensors.torch import load_file, save_file

from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.progress import Stage

log = logging.getLogger(__name__)

WEIGHTS, META, COMPLETE = "weights.safetensors", "meta.json", "COMPLETE"
SCRATCH_PREFIXES = (".tmp-", ".stale-")
SCRATCH_NAME = re.compile(r"\.(?:tmp|stale)-[0-9a-f]{16}-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)-[0-9a-f]{32}")
LEFTOVER_AGE_S = 24 * 3600  # far longer than any write: past it, a scratch folder is abandoned whoever made it


def cache_key(parts: dict) -> str:
    """sha256 of the canonical JSON of everything that determines the artefact."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def derived_key(model_key: str, kind: str, parts: dict) -> str:
    """The key of an artefact derived from the model under `model_key` (SSD's importances, AltPO's alternates):
    its `kind` and everything else it depends on (`parts`)."""
    return cache_key({"artefact": kind, "model": model_key, **parts})


def tensor_digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.cache
def writer_host() -> str:
    """This machine as scratch-folder names record it: the hostname plus, on Linux, the PID namespace, so that
    containers sharing a hostname (host networking) but not their process IDs never judge each other's pids."""
    host = socket.gethostname()
    with contextlib.suppress(OSError):
        host += "." + re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    return re.sub(r"[^A-Za-z0-9.]", "_", host)


def scratch_name(kind: str, key: str) -> str:
    """`.tmp-…` or `.stale-…`, unique, naming the writer so that a sweep can tell whether it is still alive."""
    return f".{kind}-{key[:16]}-{writer_host()}-{os.getpid()}-{uuid.uuid4().hex}"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host may still run (True when unsure: a sweep must never remove live work)."""
    if pid <= 0 or os.name == "nt":  # 0 and negatives address process groups; on Windows os.kill terminates
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, under another user
        return True
    return True


def abandoned(path: Path, now: float) -> bool:
    """A scratch folder whose writer is certainly gone: a dead pid on this host, or older than LEFTOVER_AGE_S.

    A young folder of another host is kept: on a shared filesystem its writer may be alive."""
    named = SCRATCH_NAME.fullmatch(path.name)
    if named and named["host"] == writer_host() and not pid_alive(int(named["pid"])):
        return True
    return now - path.lstat().st_mtime > LEFTOVER_AGE_S


def remove(path: Path) -> None:
    """Delete a scratch folder; housekeeping never fails a job, so an error is logged (a later sweep retries)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:  # never made, or removed by another sweep
        pass
    except OSError as error:
        log.warning("could not remove cache scratch folder %s (%s); carrying on", path, error)


def unwritable(error: OSError) -> bool:
    """Whether `error` says the folder refuses writes (permissions, a read-only mount), not that something broke."""
    return isinstance(error, PermissionError) or error.errno in (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass
class Entry:
    key: str
    state: dict[str, torch.Tensor]
    meta: dict
    hit: bool


class ModelCache:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.swept = False

    def folder(self, key: str) -> Path:
        return self.root / key

    def read(self, key: str, accept: Callable[[Entry], bool] | None = None) -> Entry | None:
        """The entry if it is complete, intact and accepted by `accept`; otherwise None, after logging why."""
        folder = self.folder(key)
        if not folder.exists():
            return None
        if not (folder / COMPLETE).exists():
            log.warning("cache entry %s has no COMPLETE marker: rebuilding it", key[:12])
            return None
        try:
            meta = json.loads((folder / META).read_text())
            if file_digest(folder / WEIGHTS) != meta["sha256"]:
                log.warning("cache entry %s: weights do not match their hash: rebuilding it", key[:12])
                return None
            state = load_file(folder / WEIGHTS)
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("cache entry %s is unreadable (%s): rebuilding it", key[:12], error)
            return None
        entry = Entry(key, state, meta, hit=True)
        if accept is not None and not accept(entry):
            log.warning("cache entry %s is intact but does not fit its reader: rebuilding it", key[:12])
            return None
        return entry

    def sweep(self) -> None:
        """Remove the scratch folders of dead writers, once per instance: a listing of the root, so it stays cheap.

        Never raises: a job must not fail because of housekeeping."""
        if self.swept:
            return
        self.swept = True
        try:
            now = time.time()
            for path in self.root.iterdir():
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile by another sweep
                    if path.name.startswith(SCRATCH_PREFIXES) and abandoned(path, now):
                        log.info("removing %s, left by a writer that is gone", path)
                        remove(path)
        except Exception as error:
            log.warning("could not sweep the scratch folders of cache %s (%s); carrying on", self.root, error)

    def publish(self, key: str, state: dict[str, torch.Tensor], meta: dict) -> dict:
        """Write into a temporary folder on the same filesystem, fsync, rename into place, then mark COMPLETE.

        Whatever interrupts the write, its temporary folder is removed before the error propagates."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()
        temporary = self.root / scratch_name("tmp", key)
        try:
            meta = self.write(temporary, state, meta)
            published = self.replace(key, temporary)
        except BaseException:
            remove(temporary)
            raise
        if published:
            marker = self.folder(key) / COMPLETE
            marker.write_text(meta["sha256"])
            with open(marker, "rb") as f:
                os.fsync(f.fileno())
        return meta

    @staticmethod
    def write(temporary: Path, state: dict[str, torch.Tensor], meta: dict) -> dict:
        """Weights and meta (with the weights' hash) in a new folder `temporary`, flushed to disk."""
        temporary.mkdir()
        weights = temporary / WEIGHTS
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, weights)
        meta = {**meta, "sha256": file_digest(weights)}
        (temporary / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        for path in (weights, temporary / META):
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        return meta

    def replace(self, key: str, temporary: Path) -> bool:
        """Rename `temporary` into place; False when another writer published first (then theirs is kept)."""
        target = self.folder(key)
        if target.exists():  # a broken entry (the lock holder decided to rebuild it): move it out of the way
            stale = self.root / scratch_name("stale", key)
            os.rename(target, stale)
            remove(stale)
        try:
            os.rename(temporary, target)
        except OSError:  # another writer published first (possible where flock is a no-op): keep theirs
            remove(temporary)
            return False
        return True

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[bool]:
        """Hold `key`'s lock (True), or nothing (False) where the cache folder is not writable: nothing can be
        written there, so there is no duplicate work to avoid and an entry can only be read."""
        lock = FileLock(str(self.root / f"{key}.lock"))  # lock files are never deleted (that would race)
        held = self.acquire(lock)
        try:
            if held:
                self.sweep()
            yield held
        finally:
            if held:
                lock.release()

    def acquire(self, lock: FileLock) -> bool:
        """Create the root and take `lock`; False, holding nothing, when the folder refuses writes."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except OSError as error:
            if not unwritable(error):
                raise
            log.info("cache folder %s is not writable (%s): reading it without a lock", self.root, error)
            return False
        return True

    def get_or_build(self, key: str, build: Callable[[], tuple[dict[str, torch.Tensor], dict]],
                     group: Fabric | None = None, accept: Callable[[Entry], bool] | None = None) -> Entry:
        """A cached entry, or `build()`'s (state, meta) published under `key`; a second caller waits, not rebuilds.

        `accept(entry)` may reject an intact entry (e.g. tensors that do not fit the model): it is then rebuilt,
        like a damaged one. With a Fabric `group` of several ranks, rank 0 alone takes the lock, reads and writes;
        it tells the others whether the entry was found, and on a miss every rank runs `build()` together (it trains
        in parallel). A cache folder that is not writable serves its entries; a miss there is a UserError.
        """
        leader = group is None or group.is_global_zero
        with (self.locked(key) if leader else contextlib.nullcontext(True)) as writable:
            found = self.read(key, accept) if leader else None
            outcome = "hit" if found is not None else "miss" if writable else "unwritable"
            if group is not None:
                outcome = group.broadcast(outcome)
            if outcome == "unwritable":
                raise UserError(f"cache folder {self.root} is not writable and has no entry for this model; make it "
                                "writable or choose another with paths.cache_dir=...")
            if outcome == "miss":
                state, meta = build()
                if leader:
                    meta = self.publish(key, state, meta)
                return Entry(key, state, meta, hit=False)
        return found if leader else self.read(key, accept)


@dataclass
class Provided:
    """A cached artefact as a job uses it: the entry, and the job's record of it (result.json's `cache`)."""

    entry: Entry
    record: dict  # key, hit, and the training time of the run that built it ("train_s", from its meta)


def cached_or_trained(cache: ModelCache, key: str, train: Callable[[], tuple[dict[str, torch.Tensor], dict]],
                      stage: contextlib.AbstractContextManager[Stage], trained: Callable[[dict], str],
                      group: Fabric | None = None, accept: Callable[[Entry], bool] | None = None) -> Provided:
    """The one way a job gets a model it trains (M_o, M_r; the ranking task's federation): the entry under `key`
    from the cache, or built by `train()` and published there (`ModelCache.get_or_build`), inside the job's `stage`,
    whose end line says where it came from: "from the cache", or `trained(meta)` (e.g. "trained, 8 epochs")."""
    with stage as current:
        entry = cache.get_or_build(key, train, group=group, accept=accept)
        current.note("from the cache" if entry.hit else trained(entry.meta))
    return Provided(entry, {"key": key, "hit": entry.hit, "train_s": entry.meta.get("train_s")})
