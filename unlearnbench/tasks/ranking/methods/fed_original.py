"""Federated `original` baseline: every client keeps training after round T, the malicious ones still poisoning.

The curve an unlearning method must beat from below: what happens when nothing is done (the reference's
`original`; docs/ranking.md).
"""

from __future__ import annotations

from unlearnbench.tasks.ranking.federation import Rounds, TrainedFederation, run_rounds
from unlearnbench.tasks.ranking.methods.base import FederatedTask, InteractingMethod


class FedOriginal(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        cursor = self.continuing_cursor(trained)
        everyone = list(range(task.scenario.clients))
        return run_rounds(task.simulator, trained.final, lambda c: cursor.take(c, self.interactions_per_round),
                          everyone, task.client_streams(), task.scenario.behaviours(), task.rounds)
