"""The text task's points of a method's dynamics (`evaluation.during`, runtime/during.py), for TOFU, MUSE and WMDP.

A point scores the model with the benchmark's own evaluator restricted to a sample of each of its example sets (at
most `evaluation.during.max_examples` of each: TOFU's splits, MUSE's VerbMem, KnowMem and PrivLeak sets, WMDP's
question sets), drawn once per target with the evaluation seed from a stream of its own (so no method's draws move),
the same at every point and for every method of the target. M_r's outputs, the reference of forget quality and
privleak, and M_o's, the point at step 0, are the rows of the sample in the outputs the final evaluation already
holds: neither model is evaluated again.

By default a point computes the benchmark's leaderboard metrics that need no generation; a leaderboard metric that
needs it is replaced by its parts that do not (TOFU's model utility, a harmonic mean over probability, ROUGE-L and
truth ratio, by the probabilities and truth ratios; MUSE's VerbMem ROUGE by the extraction strength of the same
VerbMem texts, teacher-forced). A generation-based metric (ROUGE, Leak@k) runs where `evaluation.during.metrics`
names it, at its cost. The GradNorm attack (a backward pass per example) is left to the final evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from unlearnbench.runtime.errors import invalid
from unlearnbench.runtime.seeding import streams

Scores = dict[tuple[str, str | None], float | None]


@dataclass(frozen=True)
class PointMetrics:
    """What a benchmark's evaluator can record at a point: the metrics, those that generate text, those that need
    `evaluation.sampling` (Leak@k), and the generation-free stand-ins of a generation-based leaderboard metric."""

    computed: tuple[str, ...]
    generated: frozenset[str] = frozenset()
    sampled: frozenset[str] = frozenset()
    standins: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def chosen(self, asked: list[str] | None, leaderboard: list[str], sampling: bool) -> list[str]:
        """The metrics each point computes: those `evaluation.during.metrics` names, or (null) the leaderboard
        metrics that need no generation, each of the others replaced by its stand-ins."""
        valid = [name for name in self.computed if sampling or name not in self.sampled]
        if asked is None:
            default = [part for name in leaderboard if name in valid
                       for part in (self.standins.get(name, ()) if name in self.generated else (name,))]
            return list(dict.fromkeys(default))
        if isinstance(asked, str) or not all(isinstance(name, str) for name in asked) or set(asked) - set(valid):
            raise invalid("metrics", "evaluation.during", f"null or a list of {', '.join(valid)}" + (
                "" if sampling else " (leak_at_k and max_rouge_at_k with evaluation.sampling.k > 0)"), asked)
        return list(dict.fromkeys(asked))

    def generates(self, metrics: list[str]) -> bool:
        return any(name in self.generated for name in metrics)

    def samples(self, metrics: list[str]) -> bool:
        return any(name in self.sampled for name in metrics)


@dataclass(frozen=True)
class PointSettings:
    """`evaluation.during` as a job reads it: the metrics chosen, the sample size, the evaluation seed."""

    metrics: list[str]
    max_examples: int
    seed_eval: int


def sample(size: int, max_examples: int, generator: torch.Generator) -> np.ndarray:
    """At most `max_examples` of `size` rows, in their order."""
    if size <= max_examples:
        return np.arange(size)
    return torch.randperm(size, generator=generator)[:max_examples].sort().values.numpy()


class Points:
    """One target's points: the evaluator on the sampled examples, M_o's and M_r's outputs on them, and each point's
    scores of a model. The evaluator says what it samples (`sizes`), restricts itself to the sample (`restricted`)
    and takes the sample's rows of outputs it computed whole (`selected`)."""

    def __init__(self, evaluator: Any, points: PointMetrics, settings: PointSettings, target: str, out_o: Any,
                 out_r: Any) -> None:
        generator = streams("during", settings.seed_eval, target).torch
        rows = {name: sample(size, settings.max_examples, generator) for name, size in evaluator.sizes().items()}
        self.metrics = settings.metrics
        self.evaluator = evaluator.restricted(rows, points.generates(self.metrics), points.samples(self.metrics))
        self.out_o, self.out_r = evaluator.selected(out_o, rows), evaluator.selected(out_r, rows)
        self.keys = list(self.chosen(self.out_o))  # what a point records: M_o's, null where a model diverged

    def scores(self, model) -> Scores:
        """`model`'s scores on the sample (None: M_o's); null where its losses there are not finite."""
        if model is None:
            return self.chosen(self.out_o)
        outputs = self.evaluator.outputs(model)
        if not self.evaluator.finite(outputs):
            return dict.fromkeys(self.keys)
        return self.chosen(outputs)

    def chosen(self, outputs: Any) -> Scores:
        every = self.evaluator.values(outputs, self.out_r)
        return {key: value for key, value in every.items() if key[0] in self.metrics}
