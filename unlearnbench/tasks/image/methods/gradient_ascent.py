"""Gradient ascent (GA, "NegGrad"): maximise the cross-entropy on D_f, so that the model unfits the forget set.

Every step descends −CE(M(x_f), y_f) on a shuffled forget batch, with the model in train mode; D_r is not used.

Defaults: SGD lr 0.01, momentum 0.9, weight decay 5e-4, batch 256 (Deep Unlearn's `GradientAscent`, adapted from
the l1-sparse authors' `unlearn/GA.py`, whose own scripts use lr 1e-4); 5 epochs (about 5, as in the l1-sparse
authors' scripts; Deep Unlearn uses 10). Published values range over lr 1e-4…1e-2: Deep Unlearn's 0.01 is taken,
because 1e-4 for 5 epochs barely moves a model on small forget sets.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.runtime.train import descend, float_logits
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting


class GradientAscent(ImageMethod):
    def __init__(self, name: str, epochs: int = 5, lr: float = 0.01, momentum: float = 0.9,
                 weight_decay: float = 5e-4, batch_size: int = 256) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.batch_size = batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        model, optimizer = task.sgd(model, self.lr, self.momentum, self.weight_decay)
        batches = task.batches(task.splits.forget_train, setting(self.batch_size, task))
        model.train()
        epochs = setting(self.epochs, task)
        with EpochMeter(task.fabric, epochs, len(batches)) as meter:  # the curve: −CE on D_f, accuracy on D_f
            for _ in range(epochs):
                for inputs, labels in batches:
                    logits = float_logits(model(inputs))
                    loss = -F.cross_entropy(logits, labels)
                    meter.batch(loss, logits, labels, optimizer)
                    descend(task.fabric, optimizer, loss, model=model)
                meter.end_epoch()
        return model
