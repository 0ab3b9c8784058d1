"""Content-addressed cache of trained models, safe for concurrent jobs on a shared filesystem.

An entry `<root>/<key>/` holds `weights.safetensors`, `meta.json` (with the sha256 of the weights) and a `COMPLETE`
marker written last. Writers build the entry in a temporary folder and publish it with an atomic rename; a file lock
only avoids duplicate work. Readers trust an entry only when COMPLETE exists and the weights' hash matches; anything
else is rebuilt. Weights are never unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from lightning_fabric import Fabric
from safetensors.torch import load_file, save_file

log = logging.getLogger(__name__)

WEIGHTS, META, COMPLETE = "weights.safetensors", "meta.json", "COMPLETE"


def cache_key(parts: dict) -> str:
    """sha256 of the canonical JSON of everything that determines the artefact."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def tensor_digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Entry:
    key: str
    state: dict[str, torch.Tensor]
    meta: dict
    hit: bool


class ModelCache:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def folder(self, key: str) -> Path:
        return self.root / key

    def read(self, key: str) -> Entry | None:
        """The entry if it is complete and intact; otherwise None, after logging why."""
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
        return Entry(key, state, meta, hit=True)

    def publish(self, key: str, state: dict[str, torch.Tensor], meta: dict) -> dict:
        """Write into a temporary folder on the same filesystem, fsync, rename into place, then mark COMPLETE."""
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self.root / f".tmp-{key[:16]}-{uuid.uuid4().hex}"
        temporary.mkdir()
        weights = temporary / WEIGHTS
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, weights)
        meta = {**meta, "sha256": file_digest(weights)}
        (temporary / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        for path in (weights, temporary / META):
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        target = self.folder(key)
        if target.exists():  # a broken entry (the lock holder decided to rebuild it): move it out of the way
            stale = self.root / f".stale-{key[:16]}-{uuid.uuid4().hex}"
            os.rename(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(temporary, target)
        except OSError:  # another writer published first (possible where flock is a no-op): keep theirs
            shutil.rmtree(temporary, ignore_errors=True)
            return meta
        marker = target / COMPLETE
        marker.write_text(meta["sha256"])
        with open(marker, "rb") as f:
            os.fsync(f.fileno())
        return meta

    def get_or_build(self, key: str, build: Callable[[], tuple[dict[str, torch.Tensor], dict]],
                     group: Fabric | None = None) -> Entry:
        """A cached entry, or `build()`'s (state, meta) published under `key`; a second caller waits, not rebuilds.

        With a Fabric `group` of several ranks, rank 0 alone takes the lock, reads and writes; it tells the others
        whether the entry was found, and on a miss every rank runs `build()` together (it trains in parallel).
        """
        leader = group is None or group.is_global_zero
        if leader:
            self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / f"{key}.lock")) if leader else contextlib.nullcontext()
        with lock:  # lock files are never deleted (that would race)
            found = self.read(key) if leader else None
            hit = found is not None if group is None else group.broadcast(found is not None)
            if not hit:
                state, meta = build()
                if leader:
                    meta = self.publish(key, state, meta)
                return Entry(key, state, meta, hit=False)
        return found if leader else self.read(key)
