"""The image task's per-example outputs: its rows of `examples.parquet` (`core.examples.ExampleTable`).

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

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from unlearnbench.core.examples import ExampleTable
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.data.base import ImageData, Subset
from unlearnbench.tasks.image.data.scenarios import Splits

SPLITS = ("forget_train", "retain_train", "retain_test")  # D_f whole; samples of D_r and D'_r


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


@dataclass(kw_only=True)
class ImageExamples(ExampleTable):
    """The rows of an image job's `examples.parquet`: per target, its chosen examples (`choose`), then each model's
    rows for them (`add`)."""

    per_split: int
    fingerprint: str  # the dataset's (`ImageData.fingerprint`): the samples' seed
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
            self.extend(n, {"target": target, "role": role, "method": method, "split": split},
                        {"index": subset.data.loaded_positions(subset.pool, positions), "label": labels.numpy(),
                         "conf": conf, "loss": loss,
                         "pred": logits.argmax(1).numpy() if n else np.zeros(0, np.int64)})
