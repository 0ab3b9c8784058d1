"""Per-example outputs: `examples.parquet`, one row per (target, model, split, example), beside `result.json`.

The per-example privacy scores (the NeurIPS 2023 unlearning competition's ε and forgetting quality, LiRA) compare many
models on the same examples, so every job writes what they need, and the reporter pools jobs:

- the examples: all of D_f, and `evaluation.examples_per_split` examples each of D_r and D'_r. The sample of a pool
  is the first examples of that split in one permutation of the pool drawn from the dataset's identity alone, so
  every job of a sweep holds the same examples (and jobs with the same D_f the same D_r sample; a tuning's jobs,
  which score a part of the test pool (core/validation.py), a permutation of that part);
- per example: its position `index` in its pool (train or test, as the dataset orders it: in the pool as loaded
  where a job scores a part of it), `label`, the logit-scaled confidence `conf` = log p_y − log Σ_{k≠y} p_k
  (Carlini et al. 2022, "Membership inference attacks from first principles"), the cross-entropy `loss` and the
  prediction `pred`.

`conf` is computed as z_y − logsumexp_{k≠y} z_k from the logits in float64: the softmax's normaliser cancels, so it
is finite at any logit gap (log(1 − p) would be −inf once p rounds to 1, at gaps of about 37 in float64).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from unlearnbench.core.files import atomic_path
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.data.base import ImageData, Subset
from unlearnbench.tasks.image.data.scenarios import Splits

SPLITS = ("forget_train", "retain_train", "retain_test")  # D_f whole; samples of D_r and D'_r
COLUMNS = ("target", "role", "method", "split", "index", "label", "conf", "loss", "pred")


def confidence_and_loss(logits: Tensor, labels: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(logit-scaled confidence, cross-entropy) per row, float64 (module docstring)."""
    z = logits.double()
    rows = torch.arange(len(labels))
    true = z[rows, labels]
    others = z.clone()
    others[rows, labels] = -torch.inf
    conf = true - torch.logsumexp(others, dim=1)
    loss = torch.logsumexp(z, dim=1) - true
    return conf.numpy(), loss.numpy()


def pool_order(data: ImageData, fingerprint: str, pool: str) -> np.ndarray:
    """One permutation of a pool, from the dataset's identity alone (the same in every job on this dataset)."""
    size = len(data.pool(pool)[1])
    return torch.randperm(size, generator=streams("examples", data.name, fingerprint, pool).torch).numpy()


def sampled(subset: Subset, order: np.ndarray, count: int) -> np.ndarray:
    """The positions (in the pool) of the first `count` examples of `subset` in the pool's `order`, ascending."""
    members = np.zeros(len(order), dtype=bool)
    members[subset.indices.cpu().numpy()] = True
    return np.sort(order[members[order]][:count])


@dataclass
class ExampleTable:
    """The rows of one job's `examples.parquet`, gathered model by model, as NumPy arrays and lists (it goes back
    from a spawned rank to the launching process under ddp_spawn: `__getstate__`)."""

    per_split: int
    fingerprint: str  # the dataset's (`ImageData.fingerprint`): the samples' seed
    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in COLUMNS})
    chosen: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # target → split → positions in pool
    orders: dict[str, np.ndarray] = field(default_factory=dict)

    def choose(self, target: str, splits: Splits) -> None:
        """Fix the examples of `target`: all of D_f, the sampled ones of D_r and D'_r."""
        chosen = {}
        for split, subset in splits.items():
            if split not in SPLITS:
                continue
            if split == "forget_train":
                chosen[split] = np.sort(subset.indices.cpu().numpy())
                continue
            if subset.pool not in self.orders:
                self.orders[subset.pool] = pool_order(subset.data, self.fingerprint, subset.pool)
            chosen[split] = sampled(subset, self.orders[subset.pool], self.per_split)
        self.chosen[target] = chosen

    def add(self, target: str, role: str, method: str | None, train: Tensor, test: Tensor, splits: Splits) -> None:
        """The rows of one model (its logits on the train and test pools) for `target`'s chosen examples."""
        pools = {"train": train, "test": test}
        for split, subset in splits.items():
            if split not in SPLITS:
                continue
            positions = self.chosen[target][split]
            rows = torch.from_numpy(positions)
            labels = subset.data.pool(subset.pool)[1].cpu()[rows]
            logits = pools[subset.pool][rows]
            conf, loss = confidence_and_loss(logits, labels)
            n = len(positions)
            self.columns["target"] += [target] * n
            self.columns["role"] += [role] * n
            self.columns["method"] += [method] * n
            self.columns["split"] += [split] * n
            self.columns["index"].append(subset.data.loaded_positions(subset.pool, positions))
            self.columns["label"].append(labels.numpy())
            self.columns["conf"].append(conf)
            self.columns["loss"].append(loss)
            self.columns["pred"].append(logits.argmax(1).numpy() if n else np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.columns["target"])

    def __getstate__(self) -> dict:
        """Pickled as the path of a temporary file that holds it: a spawned rank returns its outcome through a pipe
        that Lightning reads only after the rank has ended, so a table larger than the pipe's buffer (64 KiB) would
        block the rank forever."""
        handle, path = tempfile.mkstemp(prefix="unlearnbench-examples-", suffix=".pickle")
        with os.fdopen(handle, "wb") as file:
            pickle.dump(self.__dict__, file, protocol=pickle.HIGHEST_PROTOCOL)
        return {"spilled": path}

    def __setstate__(self, state: dict) -> None:
        with open(state["spilled"], "rb") as file:
            self.__dict__.update(pickle.load(file))
        os.unlink(state["spilled"])

    def frame(self):
        import pandas as pd

        numeric = {name: np.concatenate(self.columns[name]) if self.columns[name] else np.zeros(0)
                   for name in ("index", "label", "conf", "loss", "pred")}
        return pd.DataFrame({
            "target": pd.Series(self.columns["target"], dtype="string"),
            "role": pd.Series(self.columns["role"], dtype="string"),
            "method": pd.Series(self.columns["method"], dtype="string"),
            "split": pd.Series(self.columns["split"], dtype="string"),
            "index": numeric["index"].astype(np.int64), "label": numeric["label"].astype(np.int64),
            "conf": numeric["conf"].astype(np.float64), "loss": numeric["loss"].astype(np.float64),
            "pred": numeric["pred"].astype(np.int64)})

    def write(self, path: Path) -> None:
        """Publish the table whole (a temporary file renamed into place) or leave no file: a crash while writing
        leaves the previous file or none."""
        frame = self.frame()
        with atomic_path(path) as temporary:
            frame.to_parquet(temporary, index=False)
