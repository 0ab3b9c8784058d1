"""Federated gradient ascent: the malicious clients climb their own (still poisoned) gradient on random queries.

All clients take part. The retained clients train as usual on their partitions; each malicious client draws its
queries uniformly with replacement from the whole training set, computes its PDGD gradient g, poisons it as before
but with γ ~ U(0, 1) (g ← −γg + μ), and ascends: g ← −g, w ← w + η·g per query. FedAvg over all clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from unlearnbench.ltr.federation import ASCENDER, HONEST, Rounds, TrainedFederation, run_rounds
from unlearnbench.ltr.unlearning import FederatedTask, InteractingMethod


class FedGradientAscent(InteractingMethod):
    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        scenario, count = task.scenario, self.interactions_per_round
        cursor = task.continuing_cursor(trained)
        streams = task.client_streams()
        everyone = list(range(scenario.clients))
        behaviours = [ASCENDER if k in scenario.malicious else HONEST for k in everyone]

        def queries(clients: Sequence[int]) -> np.ndarray:
            honest = cursor.take(clients, count)
            for row, k in enumerate(clients):
                if k in scenario.malicious:
                    honest[row] = streams[k].integers(0, len(task.data.train), count)
            return honest

        return run_rounds(task.simulator, trained.final, queries, everyone, streams, behaviours, task.rounds)
