"""The interface between the job loop (`core.job.execute`, which is every task's) and a task: its `Bench`.

A task's bench is named by the config's `task.bench` (a dotted path) and built with `(fabric, plan, outcome)`: it
loads the data (the stage `load_data`) and builds the scenario, the model and the methods. The loop then asks it for
each step of the algorithm in order. The models it trains are the task's own (a module, a federated ranker's stored
rounds): the loop hands them back to the bench, and relearns M_o's and M_r's `module` where the bench gives a
`Relearning`. The records the bench gives back are result.json's (`core.outcome.as_records`).

Not every task has every step: the ranking task poisons the training of one federation, so it has one target, no
forget set drawn (`split` gives None) and no retrained model (`retrained` gives None; its gold standard is a method,
`fed_retrain`), and it records its NDCG after every round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from unlearnbench.core.method import Method
from unlearnbench.core.relearn import Relearning
from unlearnbench.runtime.monitor import Cost


@dataclass
class Scored:
    """M_u's records, and why its metrics are meaningless (null or left out) where it diverged (None: it did not)."""

    records: list[dict]
    diverged: str | None = None


class Evaluation(ABC):
    """One target's evaluation: M_o and M_r evaluated once, then every M_u, scored against them."""

    @abstractmethod
    def references(self) -> list[dict]:
        """M_o's and M_r's records for the target (their per-example outputs kept where `evaluation.examples` is
        on)."""

    @abstractmethod
    def unlearned(self, method: str, model: Any, cost: Cost) -> Scored:
        """M_u's records with its cost, evaluated in the stage `evaluation:<method>`; its per-example outputs kept
        unless it diverged."""

    @abstractmethod
    def during(self, method: str, model: Any | None) -> dict[tuple[str, str | None], float | None]:
        """One point of `method`'s dynamics (`evaluation.during`, runtime/during.py): the scores, (metric, split) →
        value, of `model` between two of its updates (None: M_o, before the first), on the metrics and the examples
        `evaluation.during` names. It must leave the run as it found it: no random number drawn but from generators
        of its own, the model's parameters, buffers and optimizer untouched."""


class Bench(ABC):
    """One task's side of a job, the steps of the loop in the order it calls them."""

    targets: Sequence[str]  # the scenario's targets (classes, fractions, forget sets of entities): a unit each
    methods: Sequence[Method]  # the job's methods, in the plan's order
    # Options of its task that this bench does nothing with: option path → why, the one line a job that sets one
    # is refused with before any work (a benchmark of the text task that generates no text ignores Leak@k's).
    ignores: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def original(self) -> Any:
        """M_o, trained on D with the training seed or from the cache (the stage `original`), its cache record and
        training curve kept in the outcome. A task whose M_o is evaluated alike for every target evaluates it here,
        once (the stage `evaluation:original`)."""

    @abstractmethod
    def split(self, target: str) -> Any:
        """The target's forget and retain sets, drawn with the forget seed (None where the task draws none)."""

    @abstractmethod
    def retrained(self, target: str, splits: Any) -> Any | None:
        """M_r, trained on D_r with the unlearning seed or from the cache (the stage `retrained`), its cache record
        and curve kept in the outcome; None where the task has no retrained model."""

    @abstractmethod
    def evaluation(self, target: str, splits: Any, original: Any, retrained: Any | None) -> Evaluation:
        """The target's evaluation, M_o's and M_r's outputs taken (an M_r that diverged in training is an error)."""

    @abstractmethod
    def unlearn(self, method: Method, target: str, splits: Any, original: Any,
                retrained: Any | None) -> tuple[Any, Cost]:
        """M_u = method(copy of M_o) and its cost, in the stage `method:<name>`, with memory and utilisation
        sampled; its randomness from the unlearning seed."""

    def relearning(self, target: str, splits: Any) -> Relearning | None:
        """Relearn time for the target (`evaluation.relearn`), or None where it is off or the task has none."""
        return None
