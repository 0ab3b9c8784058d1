"""SalUn (saliency unlearning): random labels on D_f, training only the weights most salient for forgetting.

Fan et al., "SalUn: Empowering Machine Unlearning via Gradient-based Weight Saliency in Both Image Classification
and Generation" (ICLR 2024), github OPTML-Group/Unlearn-Saliency.
1. Saliency mask, with M_o in eval mode: g = Σ over forget batches of ∇θ(−CE) (batch-mean CE per batch), then the
   mask keeps the `mask_fraction` (50%) of all parameter entries with the largest |g|, ranked globally over every
   learnable parameter (ties broken by parameter order).
2. Random-label training in train mode: every epoch each forget sample gets a new label drawn with the unlearning
   seed uniformly among the classes other than its own; training runs over the relabelled D_f ∪ D_r (one shuffled
   stream) minimising CE, and every gradient is multiplied by the mask before the optimiser step, so weights
   outside the mask never change.

Defaults: mask fraction 0.5, SGD lr 0.01, 10 epochs, batch 256 (spec/methods.md, as Deep Unlearn and the authors'
scripts); momentum 0.9 and weight decay 5e-4 are the authors' code defaults (Deep Unlearn runs plain SGD).
Differences from the reference code: the mask is summed over unshuffled forget batches (the reference shuffles
them; unshuffled, the mask is deterministic given M_o) and without the optimiser steps one version of the reference
takes while accumulating it; the new label is never the sample's own (the reference draws among all classes);
weight decay enters the loss as (wd/2)·Σθ², so the mask covers it as well (the reference's latest code instead
restores the masked-out weights after each step: the same result).
The mask reads each parameter's whole gradient from `p.grad`: exact on one device and under DDP; under FSDP the
ranking would only cover each rank's shard, and DeepSpeed's ZeRO keeps gradients out of `p.grad`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.config import Range
from unlearnbench.data.base import Subset
from unlearnbench.methods.base import Method, UnlearningTask, random_other_labels, setting
from unlearnbench.runtime.train import Batches, float_logits


def top_fraction(values: list[Tensor], fraction: float) -> list[Tensor]:
    """Boolean masks (shaped like `values`) of the int(fraction · N) entries of largest |value| among all N."""
    flat = torch.cat([v.detach().abs().flatten().float() for v in values])
    order = torch.argsort(flat, descending=True, stable=True)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep[order[: int(flat.numel() * fraction)]] = True
    return [m.view_as(v) for m, v in zip(keep.split([v.numel() for v in values]), values, strict=True)]


def saliency_mask(fabric: Fabric, model: nn.Module, forget: Batches, fraction: float) -> list[Tensor]:
    """The mask over `model`'s learnable parameters (in `parameters()` order) from the forget batches."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    model.eval()
    for inputs, labels in forget:
        model.zero_grad(set_to_none=True)
        fabric.backward(-F.cross_entropy(float_logits(model(inputs)), labels))
        for t, p in zip(total, params, strict=True):
            if p.grad is not None:
                t += p.grad
    model.zero_grad(set_to_none=True)
    return top_fraction(total, fraction)


class SalUn(Method):
    ranges: ClassVar[dict[str, Range]] = {"mask_fraction": Range(0, 1, low_open=True)}
    def __init__(self, name: str, epochs: int = 10, lr: float = 0.01, momentum: float = 0.9,
                 weight_decay: float = 5e-4, batch_size: int = 256, mask_fraction: float = 0.5) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.batch_size, self.mask_fraction = batch_size, mask_fraction

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        fabric, splits = task.fabric, task.splits
        batch_size = setting(self.batch_size, task)
        model, optimizer = task.sgd(model, self.lr, self.momentum)  # weight decay: in the loss, masked
        params = [p for p in model.parameters() if p.requires_grad]
        forget = task.batches(splits.forget_train, batch_size, shuffle=False, training=False)
        mask = saliency_mask(fabric, model, forget, setting(self.mask_fraction, task))
        mask = [m.to(p.dtype) for m, p in zip(mask, params, strict=True)]

        forget, retain = splits.forget_train, splits.retain_train
        union = Subset(task.data, "train", torch.cat([forget.indices, retain.indices]))
        batches = task.batches(union, batch_size)
        weight_decay = setting(self.weight_decay, task)
        model.train()
        for _ in range(setting(self.epochs, task)):
            labels = union.labels[union.indices]  # a copy: relabel the forget part (positions < |D_f|)
            labels[: len(forget)] = random_other_labels(labels[: len(forget)], task.data.num_classes,
                                                        task.rng.torch)
            for inputs, _, positions in batches.indexed():
                loss = F.cross_entropy(float_logits(model(inputs)), labels[positions])
                if weight_decay:
                    loss = loss + weight_decay / 2 * sum(p.float().pow(2).sum() for p in params)
                optimizer.zero_grad(set_to_none=True)
                fabric.backward(loss)
                for p, m in zip(params, mask, strict=True):
                    if p.grad is not None:
                        p.grad.mul_(m)
                optimizer.step()
        return model
