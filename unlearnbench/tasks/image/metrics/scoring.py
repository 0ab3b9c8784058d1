"""Scores of one model, and of one model against the retrained one, for every split of a scenario.

Each model's logits on the two pools (train, test) are computed once; a split is a row selection of them. A metric
that cannot be computed (an empty split, a diverged model's NaN or inf) is None, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from unlearnbench.core.catalogue import Metric
from unlearnbench.core.result import finite
from unlearnbench.runtime.seeding import streams
from unlearnbench.runtime.state import full_state_dict
from unlearnbench.tasks.image.data.base import ImageData, Subset, full_pool
from unlearnbench.tasks.image.data.scenarios import Splits
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.evaluate import predict
from unlearnbench.tasks.image.metrics import functions as fn
from unlearnbench.tasks.image.metrics.added import SplitMetric
from unlearnbench.tasks.image.models.store import ModelStore

Scores = dict[tuple[str, str | None], float | None]  # (metric, split) → value; split None for model-level metrics

# `Scorer.comparison_scores`: a model's acc, loss and MIA minus the retrained model's, best at 0
DELTA_ACC = Metric("delta_acc", "Δacc", 0.0, headline=(fn.FORGET_TEST, fn.RETAIN_TEST, fn.FORGET_TRAIN),
                   leaderboard=(fn.FORGET_TRAIN, fn.FORGET_TEST, fn.RETAIN_TEST), figure=(fn.FORGET_TEST,))
DELTA_LOSS = Metric("delta_loss", "Δloss", 0.0)
DELTA_MIA = Metric("delta_mia", "ΔMIA", 0.0, headline=(fn.FORGET_TRAIN,), leaderboard=(fn.FORGET_TRAIN,),
                   figure=(fn.FORGET_TRAIN,))


@dataclass
class Outputs:
    """Logits of one model on the train and test pools (float32 or better, CPU) and its learnable parameters (None
where nothing reads them: a point of the dynamics that records no layer distance)."""

    train: Tensor
    test: Tensor
    params: dict[str, Tensor] | None

    def logits(self, subset: Subset) -> Tensor:
        """The rows of `subset`; a row with a NaN or ±inf (a diverged model) is all NaN, so that every metric of a
        split holding it is None: softmax would make [−inf, 0, 0] a valid output, and argmax a NaN a prediction."""
        rows = (self.train if subset.pool == "train" else self.test)[subset.indices.cpu()]
        return rows.masked_fill(~torch.isfinite(rows).all(1, keepdim=True), math.nan)

    def non_finite(self) -> str | None:
        """Why this model is diverged (its parameters or logits hold NaN or inf), or None when all are finite."""
        reasons = []
        bad = [name for name, value in (self.params or {}).items() if not bool(torch.isfinite(value).all())]
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            reasons.append(f"non-finite parameters in {bad[0]}{more}")
        for pool, logits in (("train", self.train), ("test", self.test)):
            rows = int((~torch.isfinite(logits)).flatten(1).any(1).sum()) if logits.numel() else 0
            if rows:
                reasons.append(f"non-finite logits on {rows} of {len(logits)} {pool} samples")
        return "; ".join(reasons) or None


def labels_of(subset: Subset) -> Tensor:
    return subset.labels[subset.indices].cpu()


class Scorer:
    def __init__(self, splits: Splits, seed_eval: int, target: str, mia_max_members: int, mia_loss_folds: int,
                 added: Sequence[SplitMetric] = ()):
        self.splits = splits
        self.added = added  # the user's metrics (`evaluation.metrics`), scored on every split after the task's
        self.seed_eval = seed_eval
        self.target = target
        self.mia_max_members = mia_max_members
        self.mia_loss_folds = mia_loss_folds

    def rng(self, purpose: str):
        """The same draw for every model scored: the attackers see the same samples (common random numbers)."""
        return streams(purpose, self.seed_eval, self.target).numpy

    def loss_nonmembers(self) -> Subset:
        """The non-members of the loss attacker: unseen samples of D_f's kind, so that it tests membership.

        In the targeted scenarios (full_class, sub_class) that is D'_f, the test samples of the forgotten class: the
        whole test set would let the attacker separate the forgotten class from the others by loss, and the
        retrained model itself would score near 1. In the random-sample scenario D'_f is D_f itself (pool "train";
        docs/metrics.md) and the whole test set is drawn from the same distribution as D_f.
        """
        forget_test = self.splits.forget_test
        return forget_test if forget_test.pool == "test" else full_pool(forget_test.data, "test")

    def model_scores(self, out: Outputs, attacks: bool = True) -> Scores:
        """The model's own scores on every split; `attacks=False` leaves out the membership attacks, which read
        whole pools (a point of the dynamics reads a sample of each split)."""
        scores: Scores = {}
        for split, subset in self.splits.items():
            logits, labels = out.logits(subset), labels_of(subset)
            scores["acc", split] = finite(fn.accuracy(logits, labels))
            scores["loss", split] = finite(fn.mean_loss(logits, labels))
            for metric in self.added:
                scores[metric.declaration.name, split] = finite(float(metric(logits, labels)))
        return scores | self.attack_scores(out) if attacks else scores

    def attack_scores(self, out: Outputs) -> Scores:
        """The membership attacks' scores on D_f (the entropy attack and the loss attack)."""
        scores: Scores = {}
        forget, retain = self.splits.forget_train, self.splits.retain_train
        member_entropy = fn.entropy(fn.probabilities(out.logits(retain)))
        test_entropy = fn.entropy(fn.probabilities(out.logits(full_pool(forget.data, "test"))))
        forget_entropy = fn.entropy(fn.probabilities(out.logits(forget)))
        scores["mia", "forget_train"] = finite(fn.entropy_mia(
            member_entropy, test_entropy, forget_entropy, self.mia_max_members, self.rng("mia")))
        unseen = self.loss_nonmembers()
        forget_loss = fn.per_sample_loss(out.logits(forget), labels_of(forget))
        unseen_loss = fn.per_sample_loss(out.logits(unseen), labels_of(unseen))
        scores["mia_loss", "forget_train"] = finite(fn.loss_mia(
            forget_loss, unseen_loss, self.mia_loss_folds, self.rng("mia_loss")))
        return scores

    def comparison_scores(self, out_u: Outputs, scores_u: Scores, out_r: Outputs, scores_r: Scores) -> Scores:
        """Model `u` against the retrained model `r` (whose own scores are `scores_r`)."""
        distance = fn.layer_distance(out_u.params, out_r.params) if out_u.params is not None else math.nan
        scores: Scores = {("layer_distance", None): finite(distance)}
        for split, subset in self.splits.items():
            logits_u, logits_r = out_u.logits(subset), out_r.logits(subset)
            probs_u, probs_r = fn.probabilities(logits_u), fn.probabilities(logits_r)
            scores["activation_distance", split] = finite(fn.activation_distance(probs_r, probs_u))
            scores["js_divergence", split] = finite(fn.js_divergence(fn.log_probabilities(logits_r),
                                                                     fn.log_probabilities(logits_u)))
            scores["completeness", split] = finite(fn.completeness(logits_r, logits_u))
        for (metric, split), value in scores_u.items():
            other = scores_r.get((metric, split))
            if metric in ("acc", "loss", "mia") and value is not None and other is not None:
                scores[f"delta_{metric}", split] = finite(value - other)
        deltas = [scores.get(("delta_acc", s)) for s in ("retain_train", "forget_train", "retain_test")]
        scores["tow", None] = None if None in deltas else finite(fn.tug_of_war(*deltas))
        return scores


class Evaluator:
    """Each model's outputs on the train and test pools, computed once: a model seen before is not run again
    (the `retrain` method returns M_r itself, so its scores reuse M_r's logits)."""

    def __init__(self, fabric, data: ImageData, store: ModelStore, normalizer: Normalizer, batch_size: int) -> None:
        self.fabric, self.data, self.store = fabric, data, store
        self.normalizer, self.batch_size = normalizer, batch_size
        self.seen: list[tuple[object, Outputs]] = []

    def outputs_on(self, model, rows: dict[str, Tensor], params: bool) -> Outputs:
        """The model's outputs on the pools' `rows` alone (pool → sorted indices; every other row NaN), for a
        point of its dynamics; its parameters only where `params` asks (a copy of every weight: the layer distance)."""
        pools = {}
        for pool in ("train", "test"):
            size = len(self.data.pool(pool)[1])
            pools[pool] = torch.full((size, self.data.num_classes), math.nan, dtype=torch.float64)
            if len(rows[pool]):
                subset = Subset(self.data, pool, rows[pool])
                logits = predict(self.fabric, model, subset, self.batch_size, self.normalizer)
                pools[pool][rows[pool].cpu()] = logits.double()
        weights = self.store.parameters_of(full_state_dict(self.fabric, model)) if params else None
        return Outputs(pools["train"], pools["test"], weights)

    def outputs(self, model, remember: bool = False) -> Outputs:
        """`remember` keeps the model and its outputs for the job (M_o and M_r); others are scored once."""
        for known, outputs in self.seen:
            if known is model:
                return outputs
        train, test = (predict(self.fabric, model, full_pool(self.data, pool), self.batch_size, self.normalizer)
                       for pool in ("train", "test"))
        outputs = Outputs(train, test, self.store.parameters_of(full_state_dict(self.fabric, model)))
        if remember:
            self.seen.append((model, outputs))
        return outputs
