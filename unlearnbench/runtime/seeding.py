"""Per-stage random streams derived from the documented seeds, and the determinism switches.

Every stage (training M_o, drawing D_f, training M_r, a method, the evaluation) gets generators derived from
`SeedSequence([stage, *seeds])`, so its randomness neither depends on what an earlier stage consumed nor on whether a
model came from the cache.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch


def seed_sequence(stage: str, *seeds: int | str) -> np.random.SeedSequence:
    """Entropy from the stage's name, the number of seeds and the seeds; strings (method names, targets) enter as
    their CRC32. (The count keeps `("s", 0)` apart from `("s",)`: SeedSequence pads short entropy with zeros.)"""
    words = [zlib.crc32(s.encode()) if isinstance(s, str) else int(s) for s in seeds]
    return np.random.SeedSequence([zlib.crc32(stage.encode()), len(words), *words])


@dataclass
class Streams:
    """A torch generator (CPU) and a numpy generator from one seed sequence, plus an integer seed for libraries
    that only take one (e.g. scikit-learn) and for the global torch RNG during model construction."""

    torch: torch.Generator
    numpy: np.random.Generator
    seed: int


def streams(stage: str, *seeds: int | str) -> Streams:
    for_torch, for_numpy, for_int = seed_sequence(stage, *seeds).spawn(3)
    torch_seed = int(for_torch.generate_state(1, np.uint64)[0])
    int_seed = int(for_int.generate_state(1, np.uint32)[0])
    return Streams(torch.Generator().manual_seed(torch_seed), np.random.default_rng(for_numpy), int_seed)


@contextlib.contextmanager
def global_seed(seed: int) -> Iterator[None]:
    """Seed the global CPU RNG inside the block and restore it afterwards (PyTorch's layer initialisers and other
    library code draw from it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def configure_determinism(deterministic: bool, threads: int | None, matmul_precision: str) -> None:
    """Reset per-process switches at the start of every job (Hydra's basic launcher runs many jobs in one process)."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_float32_matmul_precision(matmul_precision)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
