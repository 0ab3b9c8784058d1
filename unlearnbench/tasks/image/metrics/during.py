"""The image task's points of a method's dynamics (`evaluation.during`, runtime/during.py).

A point scores the model on a sample of each split: at most `evaluation.during.max_examples` examples, drawn once per
target with the evaluation seed (its own stream, so no method's draws move), the same for every point and every
method. It computes what a split's logits give (accuracy, loss, the distances to M_r, the added metrics, and their
differences to M_r's on the same sample); the membership attacks, which fit an attacker on whole pools, are left
to the final evaluation. By default it computes the task's leaderboard metrics among those.
"""

from __future__ import annotations

import torch
from torch import Tensor

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.dynamics import chosen_metrics
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.scenarios import Splits
from unlearnbench.tasks.image.metrics import functions as fn
from unlearnbench.tasks.image.metrics.scoring import DELTA_ACC, DELTA_LOSS, Evaluator, Outputs, Scorer, Scores

# what a point can compute from a sample of each split's logits (and the parameters, for the layer distance)
POINT_METRICS = (fn.ACC.name, fn.LOSS.name, DELTA_ACC.name, DELTA_LOSS.name, fn.ACTIVATION_DISTANCE.name,
                 fn.JS_DIVERGENCE.name, fn.COMPLETENESS.name, fn.LAYER_DISTANCE.name, fn.TOW.name)


def point_metrics(asked: list[str] | None, catalogue: Catalogue, added: list[str]) -> list[str]:
    """The metrics each point computes: those `evaluation.during.metrics` names, or (null) the catalogue's
    leaderboard metrics that a point can compute."""
    return chosen_metrics(asked, [*POINT_METRICS, *added], [m for m, _ in catalogue.roles("leaderboard")],
                          "the membership attacks are scored at the end alone")


def sample(subset: Subset, size: int, generator: torch.Generator) -> Subset:
    """At most `size` rows of `subset`, in the subset's order."""
    if len(subset) <= size:
        return subset
    keep = torch.randperm(len(subset), generator=generator)[:size].sort().values
    return subset.with_indices(subset.indices[keep.to(subset.indices.device)])


class Points:
    """One target's points: the sampled splits, M_r's scores on them, and each point's scores of a model."""

    def __init__(self, evaluator: Evaluator, splits: Splits, seed_eval: int, target: str, max_examples: int,
                 metrics: list[str], out_r: Outputs, added=()) -> None:
        generator = streams("during", seed_eval, target).torch
        self.splits = Splits(*(sample(subset, max_examples, generator) for _, subset in splits.items()))
        self.evaluator, self.metrics = evaluator, metrics
        self.rows = {pool: rows_of(self.splits, pool) for pool in ("train", "test")}
        self.scorer = Scorer(self.splits, seed_eval, target, 0, 0, added)
        self.out_r, self.scores_r = out_r, self.scorer.model_scores(out_r, attacks=False)

    def scores(self, model, outputs: Outputs | None = None) -> Scores:
        """`model`'s scores on the samples (`outputs`: its outputs on the whole pools, where they are known)."""
        out = outputs if outputs is not None else self.evaluator.outputs_on(
            model, self.rows, params=fn.LAYER_DISTANCE.name in self.metrics)
        own = self.scorer.model_scores(out, attacks=False)
        every = own | self.scorer.comparison_scores(out, own, self.out_r, self.scores_r)
        return {key: value for key, value in every.items() if key[0] in self.metrics}


def rows_of(splits: Splits, pool: str) -> Tensor:
    """The sorted rows of `pool` that the splits' samples hold."""
    held = [subset.indices for _, subset in splits.items() if subset.pool == pool]
    device = splits.forget_train.indices.device
    return torch.cat(held).unique() if held else torch.empty(0, dtype=torch.long, device=device)
