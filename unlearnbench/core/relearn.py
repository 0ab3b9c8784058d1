"""Relearn time (Golatkar, Achille and Soatto 2020, "Eternal Sunshine of the Spotless Net"): how fast a model learns
the forgotten data back. A method that only hides D_f (suppressed outputs, weights that still hold it) relearns it
in a few steps; a model that never saw it (M_r) needs about as long as learning it afresh.

A copy of each model is fine-tuned on the relearn set R (D_f, or `examples` of it drawn with the evaluation seed)
with one fixed optimiser at a constant rate, every model on the same batches in the same order (the evaluation
seed's stream). After each step the mean loss on R (evaluation mode, float64) is compared with M_o's loss on R, the
threshold: `relearn_steps` is the first step count at which it is at or below it (M_o: 0), or `max_steps` where it
never is by then (a lower bound: max_steps or more). `relearn_acc` is the accuracy on R after k steps.

The loop is here: `relearn` drives any `Learner` (a step, a measurement); each task's `Relearning` gives its learner
(the image task's in `tasks/image/metrics/relearn.py`, the text task's in `tasks/text/relearn.py`), and the job
runs one per model as a stage (`core.job.relearn_stage`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from torch import nn

from unlearnbench.runtime.seeding import Streams, streams
from unlearnbench.runtime.train import NonFiniteStep

STEPS, ACCURACY = "relearn_steps", "relearn_acc"


@dataclass(frozen=True)
class RelearnSettings:
    """`evaluation.relearn` (config.Relearn), with the learning rate resolved (null: the recipe's `train.lr`)."""

    examples: int | None
    max_steps: int
    k: int
    lr: float
    batch_size: int

    @classmethod
    def of(cls, relearn: Mapping[str, Any], train_lr: float) -> RelearnSettings:
        return cls(relearn["examples"], relearn["max_steps"], relearn["k"], relearn["lr"] or train_lr,
                   relearn["batch_size"])


@dataclass(frozen=True)
class Measurement:
    """A model's mean loss and accuracy on the relearn set."""

    loss: float
    accuracy: float

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss)


class Learner(Protocol):
    """One model being relearnt: `step()` takes one optimiser step on the next batch of R, `measure()` scores R."""

    def step(self) -> None: ...

    def measure(self) -> Measurement: ...


@dataclass(frozen=True)
class Relearnt:
    """What one relearning run found: the steps to the threshold (`max_steps` where `capped`), the accuracy after k
    steps; both None where the fine-tuning diverged (a non-finite loss)."""

    steps: int | None
    accuracy: float | None
    capped: bool = False

    def scores(self, split: str) -> dict[tuple[str, str], float | None]:
        return {(STEPS, split): self.steps, (ACCURACY, split): self.accuracy}

    def describe(self, k: int) -> str:
        """The stage's end note."""
        if self.steps is None:
            return "diverged"
        reached = f"not at the threshold after {self.steps} steps" if self.capped else f"{self.steps} steps"
        return f"{reached}, accuracy {self.accuracy:.1%} after {k} step{'' if k == 1 else 's'}"


def relearn(learner: Learner, threshold: float, max_steps: int, k: int,
            start: Measurement | None = None) -> Relearnt:
    """Step `learner` until its loss on R is at or below `threshold` and k steps are done, at most `max_steps`
    steps; `start`, where given, is its measurement before any step (M_o's, which set the threshold)."""
    steps, accuracy = None, None
    for step in range(max_steps + 1):
        if step > 0:
            try:
                learner.step()
            except NonFiniteStep:  # a learner that checks its steps (the text task's) stops before a NaN update
                return Relearnt(None, None)
        measured = start if step == 0 and start is not None else learner.measure()
        if not measured.finite:
            return Relearnt(None, None)
        if steps is None and measured.loss <= threshold:
            steps = step
        if step == k:
            accuracy = measured.accuracy
        if steps is not None and step >= k:
            break
    return Relearnt(max_steps if steps is None else steps, accuracy, capped=steps is None)


class Relearning(ABC):
    """Relearn time for one target: R drawn once by the task, M_o's loss on it the threshold (`original` runs first),
    then any model's copy relearnt on the same batches (`run`)."""

    split: ClassVar[str]  # the name of D_f in the task's records, where the relearn records go

    def __init__(self, settings: RelearnSettings, seed_eval: int, target: str) -> None:
        self.settings, self.seed_eval, self.target = settings, seed_eval, target
        self.threshold: float | None = None

    def stream(self, purpose: str) -> Streams:
        """The evaluation seed's stream for `purpose` (`relearn_set`: drawing R; `relearn_order`: the batches, the
        same for every model)."""
        return streams(purpose, self.seed_eval, self.target)

    @abstractmethod
    def learner(self, model: nn.Module) -> Learner:
        """A fresh copy of `model` (the model itself is left as it is) set up to relearn R."""

    def seeded(self) -> AbstractContextManager:
        """The global RNG state a run needs (none here; a text model's dropout draws from it)."""
        return nullcontext()

    def original(self, model: nn.Module) -> Relearnt:
        """M_o's run, whose loss on R before any step becomes the threshold (so it relearns in 0 steps)."""
        with self.seeded():
            learner = self.learner(model)
            start = learner.measure()
            self.threshold = start.loss
            return relearn(learner, start.loss, self.settings.max_steps, self.settings.k, start)

    def run(self, model: nn.Module) -> Relearnt:
        assert self.threshold is not None, "relearn time: the original model's run sets the threshold: it comes first"
        with self.seeded():
            return relearn(self.learner(model), self.threshold, self.settings.max_steps, self.settings.k)
