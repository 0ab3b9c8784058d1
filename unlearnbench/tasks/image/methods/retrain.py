"""Retrain: the gold standard, trained from scratch on D_r with the original recipe and the unlearning seed.

The job already holds M_r (from the model cache), so this baseline returns it and reports the retraining's own cost.
The SSD authors' `retrain` (if-loops/selective-synaptic-dampening, src/forget_full_class_strategies.py) calls
`reset_parameters` on the model's top-level children only, which on their ResNet18 (src/resnet.py: `conv1` and
`conv2_x`…`conv5_x` are Sequentials) re-initialises the final layer alone, then trains with `fit_one_cycle` at its
default lr 0.01 (src/utils.py), i.e. it fine-tunes the backbone; here, as in Deep Unlearn, every parameter and
normalisation statistic is re-initialised.
"""

from __future__ import annotations

from torch import nn

from unlearnbench.runtime.monitor import Cost
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask


class Retrain(ImageMethod):
    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        return task.retrained

    def cost(self, measured: Cost, task: UnlearningTask) -> Cost:
        return task.retrained_cost
