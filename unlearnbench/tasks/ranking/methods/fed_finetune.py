"""Federated fine-tuning: only the retained clients keep training from the poisoned model; FedAvg over them.

As the reference's `fine_tuning`, continuing each client's query pointer from training. Budget: the reference
passes 1000 interactions per round, which its clients cap at their partition's size (`client_ranker_update`:
min(n, len(queries))), so each retained client makes exactly one pass over its ~101 MQ2007 queries per round, about
20× the training budget. `interactions_per_round` is 5 (the training budget) by default; 1000 reproduces the
reference (capped the same way); `query_budget=wrapped` takes all 1000 (about ten passes).
"""

from __future__ import annotations

from unlearnbench.tasks.ranking.federation import HONEST, Rounds, TrainedFederation, run_rounds
from unlearnbench.tasks.ranking.methods.base import FederatedTask, InteractingMethod


class FedFinetune(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        cursor = self.continuing_cursor(trained)
        honest = [HONEST] * task.scenario.clients
        return run_rounds(task.simulator, trained.final, lambda c: cursor.take(c, self.interactions_per_round),
                          task.scenario.retained, task.client_streams(), honest, task.rounds)
