"""Federated fine-tuning: only the retained clients keep training from the poisoned model; FedAvg over them.

`interactions_per_round` is 5, the training budget. The reference passes 1000 in that slot, so each retained client
makes a full pass over its ~101 queries per round (about 20× the training budget), which is why its curve recovers
fastest there; set `method.interactions_per_round=1000` to reproduce it.
"""

from __future__ import annotations

from unlearnbench.ltr.federation import HONEST, Rounds, TrainedFederation, run_rounds
from unlearnbench.ltr.unlearning import FederatedTask, InteractingMethod


class FedFinetune(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        cursor = task.continuing_cursor(trained)
        honest = [HONEST] * task.scenario.clients
        return run_rounds(task.simulator, trained.final, lambda c: cursor.take(c, self.interactions_per_round),
                          task.scenario.retained, task.client_streams(), honest, task.rounds)
