"""Noisy fine-tuning: perturb the original model's weights with Gaussian noise, then fine-tune on the retain set.

The noise blurs what the model knows about every class; fine-tuning on D_r restores what it should keep, and the
forget set, never seen again, is left blurred.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from unlearnbench.core.config import POSITIVE, Range
from unlearnbench.tasks.image.methods.base import Method, UnlearningTask, setting
from unlearnbench.tasks.image.train import cross_entropy_epochs


class NoisyFineTune(Method):
    # Checked before any work: `method.sigma=0` stops the sweep with one line naming the valid range.
    ranges: ClassVar[dict[str, Range]] = {"sigma": POSITIVE}

    def __init__(self, name: str, sigma: float = 0.01, epochs: int = 2, lr: float = 0.02, momentum: float = 0.9,
                 weight_decay: float = 5e-4, batch_size: int = 64) -> None:
        super().__init__(name)
        self.sigma, self.epochs, self.lr = sigma, epochs, lr
        self.momentum, self.weight_decay, self.batch_size = momentum, weight_decay, batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        generator = task.rng.torch  # derived from the unlearning seed: the same seed gives the same noise
        with torch.no_grad():
            for parameter in model.parameters():
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.add_(noise.to(parameter) * self.sigma)
        model, optimizer = task.sgd(model, self.lr, self.momentum, self.weight_decay)
        batches = task.batches(task.splits.retain_train, setting(self.batch_size, task))
        cross_entropy_epochs(task.fabric, model, optimizer, batches, setting(self.epochs, task))
        return model
