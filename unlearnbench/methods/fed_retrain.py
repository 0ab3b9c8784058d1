"""Federated retraining: a fresh w0 (drawn with the unlearning seed) trained by the retained clients only.

The gold standard of the ranking task: what the federation would have learned without the malicious clients.
"""

from __future__ import annotations

from unlearnbench.ltr.federation import HONEST, QueryCursor, Rounds, TrainedFederation, run_rounds
from unlearnbench.ltr.unlearning import FederatedTask, InteractingMethod


class FedRetrain(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        cursor = QueryCursor(trained.partitions)  # from the start of every partition, as a new training run
        honest = [HONEST] * task.scenario.clients
        return run_rounds(task.simulator, task.fresh_weights(), lambda c: cursor.take(c, self.interactions_per_round),
                          task.scenario.retained, task.client_streams(), honest, task.rounds)
