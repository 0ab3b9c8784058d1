"""Batches from device-resident tensors, and the training loops every stage shares.

No DataLoader and no workers: a batch is an index into the uint8 tensors already on the device, augmented there.
Under data parallelism every global batch is cut into one chunk per rank, so each rank runs the same number of
steps and the averaged gradient is that of the global batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.data.base import Subset
from unlearnbench.data.transforms import Normalizer, augment, to_unit


class Batches:
    """One epoch of this rank's batches of `subset` each time it is iterated.

    `generator` shuffles (a new permutation per epoch, continuing the stream); None keeps the subset's order.
    `augmentation` (keyword arguments of `transforms.augment`) draws its parameters from the same generator.
    """

    def __init__(self, fabric: Fabric, subset: Subset, batch_size: int, normalizer: Normalizer,
                 generator: torch.Generator | None = None, augmentation: dict | None = None) -> None:
        self.fabric = fabric
        self.subset = subset
        self.batch_size = batch_size
        self.normalizer = normalizer
        self.generator = generator
        self.augmentation = augmentation

    def __len__(self) -> int:
        full, rest = divmod(len(self.subset), self.batch_size)
        return full + (rest >= self.fabric.world_size)

    def positions(self) -> Iterator[Tensor]:
        n = len(self.subset)
        order = torch.randperm(n, generator=self.generator) if self.generator is not None else torch.arange(n)
        for start in range(0, self.batch_size * len(self), self.batch_size):
            chunk = order[start:start + self.batch_size]
            yield chunk.tensor_split(self.fabric.world_size)[self.fabric.global_rank]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for positions in self.positions():
            images, labels = self.subset.take(positions)
            unit = to_unit(images)
            if self.augmentation:
                unit = augment(unit, self.generator, **self.augmentation)
            yield self.normalizer(unit), labels


def float_logits(logits: Tensor) -> Tensor:
    """Logits in float32 or better, whatever precision the model runs in (losses and softmax need it)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def cross_entropy_epochs(fabric: Fabric, model: nn.Module, optimizer: torch.optim.Optimizer, batches: Batches,
                         epochs: int, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                         regulariser: Callable[[int], Tensor] | None = None) -> float:
    """Minimise cross-entropy for `epochs` epochs (model and optimizer already set up by Fabric).

    `regulariser(step)`, if given, is added to the loss. Returns the accuracy of the last epoch's training batches
    on this rank (kept on the device until the end, so there is no synchronisation per step).
    """
    model.train()
    correct = torch.zeros((), device=fabric.device)
    seen = 0
    step = 0
    for epoch in range(epochs):
        last = epoch == epochs - 1
        for inputs, labels in batches:
            logits = float_logits(model(inputs))
            loss = F.cross_entropy(logits, labels)
            if regulariser is not None:
                loss = loss + regulariser(step)
            optimizer.zero_grad(set_to_none=True)
            fabric.backward(loss)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step += 1
            if last:
                correct += (logits.detach().argmax(1) == labels).sum()
                seen += labels.numel()
    return float(correct) / max(seen, 1)


def recipe_schedule(optimizer: torch.optim.Optimizer, steps_per_epoch: int, warmup_epochs: float,
                    milestones: list[int], gamma: float) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over the first `warmup_epochs`, then ×gamma at each milestone epoch; stepped per batch."""
    warmup_steps = max(1, round(warmup_epochs * steps_per_epoch))

    def factor(step: int) -> float:
        epoch = step // max(steps_per_epoch, 1)
        warm = min(1.0, (step + 1) / warmup_steps) if warmup_epochs > 0 else 1.0
        return warm * gamma ** sum(epoch >= m for m in milestones)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_recipe(fabric: Fabric, model: nn.Module, subset: Subset, recipe, normalizer: Normalizer,
                 generator: torch.Generator) -> tuple[nn.Module, float]:
    """Train a freshly initialised model with the reference recipe (SGD, warm-up, multi-step decay, augmentation).

    Returns the Fabric-wrapped model and its accuracy on the last epoch's augmented training batches.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                weight_decay=recipe.weight_decay)
    model, optimizer = fabric.setup(model, optimizer)
    augmentation = {"crop_padding": recipe.augment.crop_padding, "flip": recipe.augment.flip,
                    "rotation": recipe.augment.rotation}
    batches = Batches(fabric, subset, recipe.batch_size, normalizer, generator, augmentation)
    scheduler = recipe_schedule(optimizer, len(batches), recipe.warmup_epochs, list(recipe.milestones),
                                recipe.gamma)
    accuracy = cross_entropy_epochs(fabric, model, optimizer, batches, recipe.epochs, scheduler)
    return model, accuracy
