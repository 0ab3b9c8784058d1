"""l1-sparse: fine-tune on D_r with an ℓ1 penalty whose weight decays linearly, pushing M_o towards a sparse model.

Jia et al., "Model Sparsity Can Simplify Machine Unlearning" (NeurIPS 2023), github OPTML-Group/Unlearn-Sparse
(`FT_prune`, i.e. `FT_l1`). Train mode, shuffled D_r, loss CE + α_e · ‖θ‖₁ over every learnable parameter, with
α_e = α · (1 − e / E) in epoch e = 0 … E−1: α in the first epoch, falling linearly towards 0 at the end of the run
(per epoch, as the reference, with its `no_l1_epochs` = 0).

Defaults: 10 epochs, SGD lr 0.01 (the authors' scripts), momentum 0.9, weight decay 5e-4, batch 256 (the
authors' argument defaults), α = 1e-4 (the authors' scripts leave α to a search; 1e-4 is not checked here).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting
from unlearnbench.tasks.image.train import cross_entropy_epochs


def l1_weight(alpha: float, epoch: int, epochs: int) -> float:
    """α_e = α · (1 − e/E) for epoch e counted from 0."""
    return alpha * (1 - epoch / epochs)


def l1_norm(params: list[Tensor]) -> Tensor:
    """‖θ‖₁ over the given parameters, in float32 or better."""
    return sum(p.abs().sum(dtype=torch.promote_types(p.dtype, torch.float32)) for p in params)


class L1Sparse(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"alpha": AT_LEAST_0}
    def __init__(self, name: str, epochs: int = 10, lr: float = 0.01, momentum: float = 0.9,
                 weight_decay: float = 5e-4, alpha: float = 1e-4, batch_size: int = 256) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.alpha, self.batch_size = alpha, batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        model, optimizer = task.sgd(model, self.lr, self.momentum, self.weight_decay)
        batches = task.batches(task.splits.retain_train, setting(self.batch_size, task))
        params = [p for p in model.parameters() if p.requires_grad]
        alpha, epochs, steps_per_epoch = setting(self.alpha, task), setting(self.epochs, task), max(len(batches), 1)

        def regulariser(step: int) -> Tensor:
            return l1_weight(alpha, step // steps_per_epoch, epochs) * l1_norm(params)

        cross_entropy_epochs(task.fabric, model, optimizer, batches, epochs, regulariser=regulariser)
        return model
