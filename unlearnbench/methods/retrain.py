"""Retrain: the gold standard, trained from scratch on D_r with the original recipe and the unlearning seed.

The job already holds M_r (from the model cache), so this baseline returns it and reports the retraining's own cost.
The reference re-initialised only the final layer and trained with lr 0.01, i.e. it fine-tuned the backbone; here,
as in Deep Unlearn, every parameter and normalisation statistic is re-initialised.
"""

from __future__ import annotations

from torch import nn

from unlearnbench.methods.base import Method, UnlearningTask
from unlearnbench.runtime.monitor import Cost


class Retrain(Method):
    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        return task.retrained

    def cost(self, measured: Cost, task: UnlearningTask) -> Cost:
        return task.retrained_cost
