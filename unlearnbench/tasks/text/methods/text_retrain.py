"""The retrained model as a method: M_u = M_r, fine-tuned on the retain set (and the general sets) from the base
model with the unlearning seed; the gold standard every other method is scored against, with its training cost."""

from __future__ import annotations

import copy

from torch import nn

from unlearnbench.runtime.monitor import Cost
from unlearnbench.tasks.text.methods.base import TextMethod, TextTask


class TextRetrain(TextMethod):
    def unlearn(self, model: nn.Module, task: TextTask) -> nn.Module:
        return copy.deepcopy(task.retrained)

    def cost(self, measured: Cost, task: TextTask) -> Cost:
        return task.retrained_cost
