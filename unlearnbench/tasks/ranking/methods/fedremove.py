"""FedRemove: replay training without the malicious clients' updates, with no new interaction.

Unlearning round i sets the global model to the mean of the retained clients' stored local models of training
round i (the reference's `fed_remove`). Deterministic given training (zero variance across unlearning seeds), and it
stays poisoned: the retained clients' local models were trained from poisoned global models. No list is shown, so
it has no online NDCG (the reference records none either).
"""

from __future__ import annotations

import numpy as np

from unlearnbench.tasks.ranking.federation import Rounds, TrainedFederation
from unlearnbench.tasks.ranking.methods.base import FederatedMethod, FederatedTask


class FedRemove(FederatedMethod):
    deterministic = True

    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        stored = trained.locals[:, task.scenario.retained].mean(1)  # T × F
        rounds = Rounds()
        for i in range(task.rounds):  # past T: the last one
            rounds.ended(stored[min(i, len(stored) - 1)], np.nan)
        return rounds
