"""SalUn (saliency unlearning): random labels on D_f, training only the weights most salient for forgetting.

Fan et al., "SalUn: Empowering Machine Unlearning via Gradient-based Weight Saliency in Both Image Classification
and Generation" (ICLR 2024), github OPTML-Group/Unlearn-Saliency (`Classification/`: `generate_mask.py` for the
mask, `unlearn/RL.py` run by `main_random.py --unlearn RL --mask_path …` for the training).
1. Saliency mask, with M_o in eval mode: g = Σ over forget batches of ∇θ(−CE) (batch-mean CE per batch), then the
   mask keeps the `mask_fraction` (50%) of all parameter entries with the largest |g|, ranked globally over every
   learnable parameter: entry i is kept when its rank in descending |g| is below int(fraction · N).
2. Random-label training in train mode, SGD; every gradient is multiplied by the mask before the optimiser step, so
   weights outside the mask never change. Each epoch every forget sample gets a new label, drawn with the unlearning
   seed, and `order` says how D_f and D_r are visited:
   - `passes` (the reference's branch for CIFAR-10 and SVHN): a shuffled pass over relabelled D_f, then a shuffled
     pass over D_r, both in batches of `batch_size`;
   - `mixed` (its branch for CIFAR-100 and TinyImageNet): one shuffled stream over relabelled D_f ∪ D_r.
   The YAML picks the branch by dataset as the reference does (cifar100, and cifar20, which is CIFAR-100 with its
   super-class labels: `mixed`; every other dataset: `passes`).

Defaults (the reference's `arg_parser.py` and README): SGD lr 0.01 (`--unlearn_lr`; its README's CIFAR-10 example
uses 0.013), momentum 0.9, weight decay 5e-4, 10 epochs (`--unlearn_epochs`), batch 256 for the mask and both
streams (`--batch_size`), mask fraction 0.5 (`mask/with_0.5.pt`); the multi-step decay at epochs 91 and 136 of
`unlearn/impl.py` never fires within 10 epochs.

Relation to the reference code:
- a new label is never the sample's own (`relabel: other`, the rule of unlearnbench's Random Labels); the
  reference code draws among all classes, own included (`torch.randint(0, num_classes)`: `relabel: any`);
- labels are drawn once per epoch for all of D_f before its pass, where the reference's `passes` branch draws them
  per batch: the same distribution (each sample one fresh uniform label per epoch), and the same labels on every
  rank under data parallelism;
- the mask sums the gradients over unshuffled forget batches (the reference shuffles them; unshuffled, the mask is
  deterministic given M_o), without the optimiser steps the reference took while accumulating it until Dec 2023,
  and ties in |g| are broken by parameter order (the reference's `argsort` is unstable);
- weight decay enters the loss as (wd/2)·Σθ², so the mask covers it: masked-out weights and their momentum stay
  untouched, as the reference's restore step after each optimiser step does since Feb 2026 (commit a6e89fd; before
  it, SGD's weight decay shrank the masked-out weights too);
- the data are not augmented (the reference's unlearning loaders use its training transform: random crop, flip),
  and a last training batch of a single sample is dropped (batch normalisation needs two).
The mask reads each parameter's whole gradient from `p.grad`: exact on one device and under DDP; under FSDP the
ranking would only cover each rank's shard, and DeepSpeed's ZeRO keeps gradients out of `p.grad`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.core.config import Range
from unlearnbench.runtime import during
from unlearnbench.runtime.train import float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, random_other_labels, setting
from unlearnbench.tasks.image.train import Batches

ORDERS = ("passes", "mixed")
RELABELS = ("other", "any")


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
        fabric.backward(-F.cross_entropy(float_logits(model(inputs)), labels), model=model)
        for t, p in zip(total, params, strict=True):
            if p.grad is not None:
                t += p.grad
    model.zero_grad(set_to_none=True)
    return top_fraction(total, fraction)


def new_labels(labels: Tensor, num_classes: int, relabel: str, generator: torch.Generator) -> Tensor:
    """One uniform random label per sample: among the other classes (`other`) or among all (`any`)."""
    if relabel == "any":
        return torch.randint(0, num_classes, labels.shape, generator=generator).to(labels.device)
    return random_other_labels(labels, num_classes, generator)


@dataclass
class MaskedTrainer:
    """Cross-entropy SGD steps whose gradients (weight decay included) are multiplied by the saliency mask."""

    fabric: Fabric
    model: nn.Module
    optimizer: torch.optim.Optimizer
    params: list[Tensor]
    mask: list[Tensor]
    weight_decay: float

    def step(self, inputs: Tensor, labels: Tensor) -> None:
        loss = F.cross_entropy(float_logits(self.model(inputs)), labels)
        if self.weight_decay:
            loss = loss + self.weight_decay / 2 * sum(p.float().pow(2).sum() for p in self.params)
        self.optimizer.zero_grad(set_to_none=True)
        self.fabric.backward(loss, model=self.model)
        for p, m in zip(self.params, self.mask, strict=True):
            if p.grad is not None:
                p.grad.mul_(m)
        self.optimizer.step()
        during.stepped(self.model)


def passes_epoch(trainer: MaskedTrainer, forget: Batches, retain: Batches, forget_labels: Tensor) -> None:
    """The reference's CIFAR-10 branch: a pass over D_f with its new labels (by position), then one over D_r."""
    for inputs, _, positions in forget.indexed():
        trainer.step(inputs, forget_labels[positions])
    for inputs, labels in retain:
        trainer.step(inputs, labels)


def mixed_epoch(trainer: MaskedTrainer, union: Batches, labels: Tensor) -> None:
    """The reference's CIFAR-100 branch: one pass over D_f ∪ D_r, `labels` aligned with the union's positions."""
    for inputs, _, positions in union.indexed():
        trainer.step(inputs, labels[positions])


class SalUn(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"mask_fraction": Range(0, 1, low_open=True),
                                          "order": Range(choices=ORDERS), "relabel": Range(choices=RELABELS)}

    def __init__(self, name: str, epochs: int = 10, lr: float = 0.01, momentum: float = 0.9,
                 weight_decay: float = 5e-4, batch_size: int = 256, mask_fraction: float = 0.5,
                 order: str = "passes", relabel: str = "other") -> None:
        super().__init__(name)
        self.epochs, self.lr, self.momentum, self.weight_decay = epochs, lr, momentum, weight_decay
        self.batch_size, self.mask_fraction, self.order, self.relabel = batch_size, mask_fraction, order, relabel

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        batch_size = setting(self.batch_size, task)
        model, optimizer = task.sgd(model, self.lr, self.momentum)  # weight decay: in the loss, masked
        params = [p for p in model.parameters() if p.requires_grad]
        forget = task.batches(task.splits.forget_train, batch_size, shuffle=False, training=False)
        mask = saliency_mask(task.fabric, model, forget, setting(self.mask_fraction, task))
        mask = [m.to(p.dtype) for m, p in zip(mask, params, strict=True)]
        trainer = MaskedTrainer(task.fabric, model, optimizer, params, mask, setting(self.weight_decay, task))
        model.train()
        if setting(self.order, task) == "passes":
            self.train_in_passes(trainer, task, batch_size)
        else:
            self.train_mixed(trainer, task, batch_size)
        return model

    def relabelled_forget(self, task: UnlearningTask) -> Tensor:
        """This epoch's new labels of D_f, by position (drawn from the unlearning seed's stream)."""
        forget = task.splits.forget_train
        return new_labels(forget.labels[forget.indices], task.data.num_classes, setting(self.relabel, task),
                          task.rng.torch)

    def train_in_passes(self, trainer: MaskedTrainer, task: UnlearningTask, batch_size: int) -> None:
        forget = task.batches(task.splits.forget_train, batch_size)
        retain = task.batches(task.splits.retain_train, batch_size)
        for _ in range(setting(self.epochs, task)):
            passes_epoch(trainer, forget, retain, self.relabelled_forget(task))
            during.epoch_ended()

    def train_mixed(self, trainer: MaskedTrainer, task: UnlearningTask, batch_size: int) -> None:
        forget, retain = task.splits.forget_train, task.splits.retain_train
        union = Subset(task.data, "train", torch.cat([forget.indices, retain.indices]))
        batches = task.batches(union, batch_size)
        for _ in range(setting(self.epochs, task)):
            labels = torch.cat([self.relabelled_forget(task), retain.labels[retain.indices]])
            mixed_epoch(trainer, batches, labels)
            during.epoch_ended()
