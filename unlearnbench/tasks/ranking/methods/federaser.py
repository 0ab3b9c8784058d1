"""FedEraser (Liu et al., "FedEraser: Enabling Efficient Client-Level Data Removal from Federated Learning Models",
IWQoS 2021): rebuild the model without the malicious clients from the stored training updates, their lengths kept
and their directions re-learned by a little new training of the retained clients.

With G^t the stored global models and W_k^t the stored local models of training round t (0-based), U_k^t = W_k^t − G^t
the stored updates and R the retained clients, `variant` chooses:

reference (default; the FOLTR unlearning study's executed code, `unlearning_strategy.unlearning`):
    Ũ^1 = mean_{k∈R} W_k^0; for t ≥ 1 each retained client trains `interactions_per_round` queries from its own
    copy of Ũ^t, continuing its query pointer from training, giving W̃_k, and
    Ũ^{t+1} = Ũ^t + ‖mean_{k∈R} U_k^t‖ · (mean_k W̃_k − Ũ^t)/‖mean_k W̃_k − Ũ^t‖   when t % calibration_interval == 0,
    Ũ^{t+1} = mean_k W̃_k                                                             otherwise (plain FedAvg).
    The reference trains the retained clients one after another on one shared vector and scores w_T + 0.1·Σ Ũ
    instead of Ũ (docs/ranking.md): defects not copied.
paper (the paper's algorithm): only every `retaining_interval`-th round t_j = j·Δt was retained; M̃^0 = G^0,
    M̃^1 = M̃^0 + mean_{k∈R} U_k^{t_0}; for j ≥ 1 each retained client trains from M̃^j on the first
    ⌈calibration_ratio · queries_per_round⌉ queries it took in round t_j (the calibration's fewer local epochs, on
    the data of the update it calibrates), giving Û_k = W̃_k − M̃^j, calibrates every client's update on its own,
    Ũ_k = ‖U_k^{t_j}‖ · Û_k/‖Û_k‖, and M̃^{j+1} = M̃^j + mean_{k∈R} Ũ_k (equal weights: the partitions are equal).
    After the ⌈T/Δt⌉ retained rounds the unlearned model is final: it is held for the remaining unlearning rounds,
    which show no lists.
A client whose new update is zero (no click, no pair) contributes a zero calibrated update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from unlearnbench.core.config import AT_LEAST_1, POSITIVE, Range
from unlearnbench.runtime import interrupt
from unlearnbench.tasks.ranking.federation import HONEST, QueryCursor, Rounds, TrainedFederation
from unlearnbench.tasks.ranking.methods.base import FederatedTask, InteractingMethod


class FedEraser(InteractingMethod):
    ranges: ClassVar[dict[str, Range]] = {"variant": Range(choices=("reference", "paper")),
                                          "calibration_interval": AT_LEAST_1, "retaining_interval": AT_LEAST_1,
                                          "calibration_ratio": POSITIVE}

    def __init__(self, name: str, interactions_per_round: int = 5, query_budget: str = "capped",
                 variant: str = "reference", calibration_interval: int = 5, retaining_interval: int = 2,
                 calibration_ratio: float = 0.5) -> None:
        super().__init__(name, interactions_per_round, query_budget)
        self.variant, self.calibration_interval = variant, calibration_interval
        self.retaining_interval, self.calibration_ratio = retaining_interval, calibration_ratio

    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        return VARIANTS[self.variant](self, trained, task)


def reference_eraser(method: FedEraser, trained: TrainedFederation, task: FederatedTask) -> Rounds:
    """Retraining from Ũ^1 with the mean update rescaled to the stored one's length every `calibration_interval`
    rounds."""
    retained = task.scenario.retained
    cursor, streams = method.continuing_cursor(trained), task.client_streams()
    stored_updates = trained.locals[:, retained].mean(1) - trained.globals[:-1]  # mean_k U_k^t, T × F
    model = trained.locals[0, retained].mean(0)  # Ũ^1
    result = Rounds()
    result.ended(model, np.nan)
    for t in interrupt.checked(range(1, task.rounds)):
        local, online = task.simulator.local_models(model, cursor.take(retained, method.interactions_per_round),
                                                    [streams[k] for k in retained], [HONEST] * len(retained))
        new = local.mean(0)
        if t % method.calibration_interval == 0 and t < len(stored_updates):
            new = model + rescaled(new - model, np.linalg.norm(stored_updates[t]))
        model = new
        result.ended(model, online)
    return result


def paper_eraser(method: FedEraser, trained: TrainedFederation, task: FederatedTask) -> Rounds:
    """One calibrated step per retained round, every retained client's update calibrated on its own."""
    retained, per_round = task.scenario.retained, task.scenario.queries_per_round
    streams = task.client_streams()
    updates = trained.locals[:, retained] - trained.globals[:-1, None]  # U_k^t: T × R × F
    calibration = math.ceil(method.calibration_ratio * per_round)
    model = trained.globals[0] + updates[0].mean(0)  # M̃^1
    result = Rounds()
    result.ended(model, np.nan)
    for t in interrupt.checked(range(0, len(updates), method.retaining_interval)[1: task.rounds]):  # t_1, …
        cursor = QueryCursor(trained.partitions, QueryCursor.pointers_at(trained.partitions, t, per_round))
        local, online = task.simulator.local_models(model, cursor.take(retained, calibration),
                                                    [streams[k] for k in retained], [HONEST] * len(retained))
        calibrated = [rescaled(new - model, np.linalg.norm(old)) for new, old in zip(local, updates[t], strict=True)]
        model = model + np.mean(calibrated, axis=0)
        result.ended(model, online)
    for _ in range(task.rounds - len(result.globals)):  # held: each a round (and a step) that shows no list
        result.ended(model, np.nan)
    return result


def rescaled(step: np.ndarray, length: float) -> np.ndarray:
    """`step` scaled to `length` (FedEraser's calibration: the new direction, the stored length); zero stays zero."""
    norm = np.linalg.norm(step)
    return step * (length / norm) if norm > 0 else np.zeros_like(step)


VARIANTS: dict[str, Callable[[FedEraser, TrainedFederation, FederatedTask], Rounds]] = {
    "reference": reference_eraser, "paper": paper_eraser}
