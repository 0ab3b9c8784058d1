"""FedEraser: retrain from w0 with the retained clients, calibrating every few rounds with the stored updates.

Liu et al., "FedEraser: Enabling Efficient Client-Level Data Removal from Federated Learning Models" (IWQoS 2021),
as the FOLTR unlearning study uses it. With G^t the stored global models and W_k^t the stored local models of
training (round t, 0-based; R the retained clients):
    Ũ^0 = G^0,  Ũ^1 = mean_{k∈R} W_k^0;
    for t ≥ 1 each retained client trains its queries from its own copy of Ũ^t, giving W̃_k, and
    Ũ^{t+1} = Ũ^t + ‖mean_{k∈R} W_k^t − G^t‖ · (mean_k W̃_k − Ũ^t)/‖mean_k W̃_k − Ũ^t‖   when t % interval == 0,
    Ũ^{t+1} = mean_k W̃_k                                                               otherwise.
The reference trains the retained clients one after another on one shared vector and evaluates w_T + 0.1·Σ Ũ
instead of Ũ; this is the intended algorithm.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unlearnbench.config import AT_LEAST_1, Range
from unlearnbench.ltr.federation import HONEST, QueryCursor, Rounds, TrainedFederation
from unlearnbench.ltr.unlearning import FederatedTask, InteractingMethod


class FedEraser(InteractingMethod):
    ranges: ClassVar[dict[str, Range]] = {"calibration_interval": AT_LEAST_1}
    def __init__(self, name: str, interactions_per_round: int = 5, calibration_interval: int = 5) -> None:
        super().__init__(name, interactions_per_round)
        self.calibration_interval = calibration_interval

    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        retained = task.scenario.retained
        cursor = QueryCursor(trained.partitions)
        streams = task.client_streams()
        stored_updates = trained.locals[:, retained].mean(1) - trained.globals[:-1]  # mean_k W_k^t − G^t, T × F
        model = trained.locals[0, retained].mean(0)  # Ũ^1
        result = Rounds([model], [np.nan])
        for t in range(1, task.rounds):
            local, online = task.simulator.local_models(model, cursor.take(retained, self.interactions_per_round),
                                                        [streams[k] for k in retained], [HONEST] * len(retained))
            new = local.mean(0)
            if t % self.calibration_interval == 0 and t < len(stored_updates):
                step = new - model
                norm = np.linalg.norm(step)
                new = model + np.linalg.norm(stored_updates[t]) * step / norm if norm > 0 else model
            model = new
            result.globals.append(model)
            result.online.append(online)
        return result
