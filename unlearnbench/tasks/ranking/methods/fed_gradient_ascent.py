"""Federated gradient ascent: the malicious clients climb their own (still poisoned) objective.

The malicious clients' step is the reference's `client_ranker_unlearning` in both variants: PDGD gradient g,
poisoned as in training but with γ ~ U(0, 1) (g ← −γg + μ, μ ~ N(mean g, std g)), then ascended (g ← −g,
w ← w + η·g per query). `variant` chooses the algorithm around it:

reference (default; the FOLTR unlearning study's executed code, `pga_test`): every client takes part in every
    round from the trained model; the retained clients train on their partitions as usual, each malicious client
    draws `interactions_per_round` queries uniformly with replacement from the whole training set; FedAvg over all.
paper (Halimi et al., "Federated Unlearning: How to Efficiently Erase a Client in FL?", 2022, and IBM's code for
    it): start from the reference model w_ref = the mean of the retained clients' last stored local models (the
    paper's (N·w^T − w_i^{T−1})/(N − 1), for several targets); δ² = the mean squared distance from w_ref to
    `random_models` fresh initialisations (training's w0 distribution) over `squared_radius_divisor` (IBM's code:
    10 models, its `get_distance` being the squared norm, divided by 3); for `ascent_rounds` rounds (IBM's code: 5
    local epochs) the malicious clients each make one pass over their own partition, projecting onto the ℓ2 ball
    B(w_ref, δ) after every step, and the server averages them (a mean of points of the ball stays in it); the
    remaining rounds are the paper's post-training: FedAvg fine-tuning by the retained clients alone. The step is
    the reference's PDGD ascent at the ranker's lr (IBM's code: SGD at lr 0.01 with momentum 0.9 and gradient
    clipping at 5, for its MNIST network). The early stop (IBM's code: once the model is more than 2.2 from the
    target's model) has no counterpart in ranking, so the ascent runs all `ascent_rounds` passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range
from unlearnbench.runtime import interrupt
from unlearnbench.tasks.ranking.federation import (
    ASCENDER,
    HONEST,
    Constraint,
    Rounds,
    TrainedFederation,
    fedavg,
    initial_weights,
    mean_online,
    run_rounds,
)
from unlearnbench.tasks.ranking.methods.base import FederatedTask, InteractingMethod


class FedGradientAscent(InteractingMethod):
    ranges: ClassVar[dict[str, Range]] = {"variant": Range(choices=("reference", "paper")),
                                          "ascent_rounds": AT_LEAST_0, "squared_radius_divisor": POSITIVE,
                                          "random_models": AT_LEAST_1}

    def __init__(self, name: str, interactions_per_round: int = 5, query_budget: str = "capped",
                 variant: str = "reference", ascent_rounds: int = 5, squared_radius_divisor: float = 3.0,
                 random_models: int = 10) -> None:
        super().__init__(name, interactions_per_round, query_budget)
        self.variant, self.ascent_rounds = variant, ascent_rounds
        self.squared_radius_divisor, self.random_models = squared_radius_divisor, random_models

    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        return VARIANTS[self.variant](self, trained, task)


def reference_ascent(method: FedGradientAscent, trained: TrainedFederation, task: FederatedTask) -> Rounds:
    """Every client, every round: the retained ones train, the malicious ones ascend on randomly drawn queries."""
    scenario, simulator, count = task.scenario, task.simulator, method.interactions_per_round
    malicious, retained = list(scenario.malicious), scenario.retained
    cursor, streams = method.continuing_cursor(trained), task.client_streams()
    model, result = trained.final, Rounds()
    for _ in interrupt.checked(range(task.rounds)):
        honest = simulator.local_models(model, cursor.take(retained, count), [streams[k] for k in retained],
                                        [HONEST] * len(retained))
        drawn = np.array([streams[k].integers(0, len(task.data.train), count) for k in malicious]).reshape(-1, count)
        ascending = simulator.local_models(model, drawn, [streams[k] for k in malicious], [ASCENDER] * len(malicious))
        model = fedavg(np.concatenate([honest[0], ascending[0]]))
        result.ended(model, mean_online([honest, ascending]))
    return result


def paper_ascent(method: FedGradientAscent, trained: TrainedFederation, task: FederatedTask) -> Rounds:
    """Projected ascent by the malicious clients from w_ref inside B(w_ref, δ), then post-training without them."""
    scenario, simulator = task.scenario, task.simulator
    malicious, retained = list(scenario.malicious), scenario.retained
    reference = trained.locals[-1, retained].mean(0)
    project = ball(reference, reference_radius(reference, method, task))
    cursor, streams = method.continuing_cursor(trained), task.client_streams()
    epoch = trained.partitions.shape[1]
    model, result = reference, Rounds()
    for _ in interrupt.checked(range(min(method.ascent_rounds, task.rounds) if malicious else 0)):
        local, online = simulator.local_models(model, cursor.take(malicious, epoch), [streams[k] for k in malicious],
                                               [ASCENDER] * len(malicious), constraint=project)
        model = fedavg(local)
        result.ended(model, online)
    post = run_rounds(simulator, model, lambda c: cursor.take(c, method.interactions_per_round), retained, streams,
                      [HONEST] * scenario.clients, task.rounds - len(result.globals))
    return Rounds(result.globals + post.globals, result.online + post.online)


def reference_radius(reference: np.ndarray, method: FedGradientAscent, task: FederatedTask) -> float:
    """δ = √(mean squared ℓ2 distance from w_ref to `random_models` fresh initialisations / `squared_radius_divisor`),
    as IBM's code (10 random models, divisor 3)."""
    rng = task.rng(1)
    squared = [np.sum((reference - initial_weights(len(reference), rng)) ** 2) for _ in range(method.random_models)]
    return float(np.sqrt(np.mean(squared) / method.squared_radius_divisor))


def ball(centre: np.ndarray, radius: float) -> Constraint:
    """The projection of each row onto the ℓ2 ball of `radius` around `centre` (rows inside stay as they are)."""

    def project(weights: np.ndarray) -> np.ndarray:
        offset = weights - centre
        norm = np.linalg.norm(offset, axis=1, keepdims=True)
        return np.where(norm > radius, centre + offset * (radius / np.maximum(norm, radius)), weights)

    return project


VARIANTS: dict[str, Callable[[FedGradientAscent, TrainedFederation, FederatedTask], Rounds]] = {
    "reference": reference_ascent, "paper": paper_ascent}
