"""NegGrad+: descend on D_r while ascending on D_f, in one loss over paired batches.

Each step takes the next retain batch and the next forget batch and minimises
    α · CE(M(x_r), y_r) − (1 − α) · CE(M(x_f), y_f),
with the model in train mode. An epoch is one pass over D_r; the forget stream is reshuffled and restarted whenever
it runs out (the reference zips the retain loader with a cycled forget loader), so every rank takes the same number
of steps. Kurmanji et al., "Towards Unbounded Machine Unlearning" (NeurIPS 2023), github meghdadk/SCRUB; Deep
Unlearn (github xcadet/deepunlearn) recommends it as the baseline every method must beat.

Defaults (Deep Unlearn's `NegGradPlus`): α = 0.95, 10 epochs, SGD lr 0.01, momentum 0.9, no weight decay, batch 256
for both streams. Differences from the reference code: the model trains in train mode as in the SCRUB repository's
`train_negrad` (Deep Unlearn's copy runs it in eval mode, freezing batch-norm statistics); Deep Unlearn's optional
L2 pull towards M_o (its `weight_decay`, 0 by default) is not implemented; a restarted forget stream is reshuffled
rather than replaying the same batches (`itertools.cycle` replays its first pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.core.config import Range
from unlearnbench.runtime import during
from unlearnbench.runtime.train import descend, float_logits
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting
from unlearnbench.tasks.image.train import Batches


def neggrad_loss(model: nn.Module, retain: tuple[Tensor, Tensor], forget: tuple[Tensor, Tensor] | None,
                 alpha: float) -> Tensor:
    """α · CE on the retain batch − (1 − α) · CE on the forget batch (the retain term alone without one)."""
    inputs, labels = retain
    loss = alpha * F.cross_entropy(float_logits(model(inputs)), labels)
    if forget is not None:
        inputs, labels = forget
        loss = loss - (1 - alpha) * F.cross_entropy(float_logits(model(inputs)), labels)
    return loss


def endless(batches: Batches) -> Iterator[tuple[Tensor, Tensor]]:
    """The batches of `batches`, epoch after epoch (each reshuffled); stops only if an epoch has none."""
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            return


class NegGradPlus(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"alpha": Range(0, 1)}
    def __init__(self, name: str, epochs: int = 10, lr: float = 0.01, momentum: float = 0.9,
                 weight_decay: float = 0.0, alpha: float = 0.95, batch_size: int = 256,
                 forget_batch_size: int = 256) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.alpha, self.batch_size, self.forget_batch_size = alpha, batch_size, forget_batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        model, optimizer = task.sgd(model, self.lr, self.momentum, self.weight_decay)
        retain = task.batches(task.splits.retain_train, setting(self.batch_size, task))
        forget = endless(task.batches(task.splits.forget_train, setting(self.forget_batch_size, task)))
        alpha = setting(self.alpha, task)
        model.train()
        for _ in range(setting(self.epochs, task)):
            for retain_batch in retain:
                loss = neggrad_loss(model, retain_batch, next(forget, None), alpha)
                descend(task.fabric, optimizer, loss, model=model)
            during.epoch_ended()
        return model
