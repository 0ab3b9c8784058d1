"""Federated retraining: a fresh w0 (drawn with the unlearning seed) trained by the retained clients only.

The gold standard of the ranking task: what the federation would have learned without the malicious clients. As
the reference's `retrain`: w0 = 0.01·N(0, I) (not the unit-normalised 0.01·u/‖u‖ of training), and each retained
client continues its query pointer from where training left it.
"""

from __future__ import annotations

import numpy as np

from unlearnbench.tasks.ranking.federation import HONEST, Rounds, TrainedFederation, run_rounds
from unlearnbench.tasks.ranking.methods.base import FederatedTask, InteractingMethod


def fresh_weights(task: FederatedTask) -> np.ndarray:
    """Retraining's w0: 0.01·N(0, I) from the unlearning seed (the reference: `np.random.randn(F) * 0.01`)."""
    return 0.01 * task.rng(0).standard_normal(task.data.features)


class FedRetrain(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        cursor = self.continuing_cursor(trained)
        honest = [HONEST] * task.scenario.clients
        return run_rounds(task.simulator, fresh_weights(task), lambda c: cursor.take(c, self.interactions_per_round),
                          task.scenario.retained, task.client_streams(), honest, task.rounds)
