"""Fine-tune (FT): continue training M_o on D_r alone, so that catastrophic forgetting erases D_f.

Reference: SGD lr 0.02 constant, momentum 0.9, weight decay 5e-4, 5 epochs, train mode, shuffled.
"""

from __future__ import annotations

from torch import nn

from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting
from unlearnbench.tasks.image.train import cross_entropy_epochs


class FineTune(ImageMethod):
    def __init__(self, name: str, epochs: int = 5, lr: float = 0.02, momentum: float = 0.9,
                 weight_decay: float = 5e-4, batch_size: int = 64) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.batch_size = batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        model, optimizer = task.sgd(model, self.lr, self.momentum, self.weight_decay)
        batches = task.batches(task.splits.retain_train, setting(self.batch_size, task))
        cross_entropy_epochs(task.fabric, model, optimizer, batches, setting(self.epochs, task))
        return model
