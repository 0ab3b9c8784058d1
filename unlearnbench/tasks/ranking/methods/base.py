"""The interface of the ranking task's unlearning methods: `unlearn(trained, task)` runs the unlearning rounds.

A ranking method is one module in this package with one class deriving from `FederatedMethod` and one YAML in
`conf/method/` whose keys are its constructor's arguments, as every task's method is (`unlearnbench.core.method`,
whose `Method` supplies the option checks). Every method starts from the trained federation (final model, stored
global and local models, partitions, query pointers) and returns the global model after each unlearning round, each
kept with `Rounds.ended` as its round ends (a round is one step of `evaluation.during`; no method counts epochs).
Every stream it uses after training is re-seeded from the unlearning seed (docs/ranking.md: seeds).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from unlearnbench.core.config import AT_LEAST_1, Range
from unlearnbench.core.method import Method
from unlearnbench.tasks.ranking.data import LetorData
from unlearnbench.tasks.ranking.federation import (
    QUERY_BUDGETS,
    ModelPoisoning,
    QueryCursor,
    Rounds,
    Simulator,
    TrainedFederation,
    client_streams,
)


@dataclass
class FederatedTask:
    data: LetorData
    scenario: ModelPoisoning
    simulator: Simulator
    seed_train: int
    seed_unlearn: int

    @property
    def rounds(self) -> int:
        return self.scenario.unlearning_rounds

    def client_streams(self) -> list[np.random.Generator]:
        """Each client's stream after training: SeedSequence([0xF2, seed_train, seed_unlearn, k]) (clicks, list
        sampling, attack noise, query draws)."""
        return client_streams(self.scenario.clients, 0xF2, self.seed_train, self.seed_unlearn)

    def rng(self, purpose: int) -> np.random.Generator:
        """A stream of the unlearning phase that belongs to no client (e.g. retraining's w0)."""
        return np.random.default_rng(np.random.SeedSequence([0xF3, purpose, self.seed_train, self.seed_unlearn]))


class FederatedMethod(Method):
    task = "ranking"

    @abstractmethod
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        """The global model after each of the `task.rounds` unlearning rounds (and each round's online NDCG)."""


class InteractingMethod(FederatedMethod):
    """A method whose clients keep interacting after training: `interactions_per_round` queries per client and
    round (5, the training budget, by default), capped at one pass over the client's partition as the reference
    caps it (`query_budget: capped`), or exactly that many, going round the partition (`wrapped`)."""

    ranges: ClassVar[dict[str, Range]] = {"interactions_per_round": AT_LEAST_1,
                                          "query_budget": Range(choices=tuple(QUERY_BUDGETS))}

    def __init__(self, name: str, interactions_per_round: int = 5, query_budget: str = "capped") -> None:
        super().__init__(name)
        self.interactions_per_round = interactions_per_round
        self.wrap = QUERY_BUDGETS[query_budget]

    def continuing_cursor(self, trained: TrainedFederation) -> QueryCursor:
        """The clients' partitions with the query pointers where training left them (as the reference's clients,
        which keep their `current_query_index` from training into unlearning)."""
        return QueryCursor(trained.partitions, trained.pointers, self.wrap)
