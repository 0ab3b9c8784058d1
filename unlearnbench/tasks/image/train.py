"""The image task's training: batches of device-resident images, the cross-entropy loop and the reference recipe.

No DataLoader and no workers: a batch is an index into the uint8 tensors already on the device (`runtime.train`'s
batch positions, one chunk per rank), augmented there and normalised. M_o and M_r are trained with `train_recipe`;
the methods fine-tune with `cross_entropy_epochs` or loops of their own over `Batches`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.runtime.train import batch_count, batch_positions, descend, float_logits, recipe_schedule
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.transforms import Normalizer, augment, to_unit


class Batches:
    """One epoch of this rank's batches of `subset` each time it is iterated: (normalised images, labels).

    `generator` shuffles (a new permutation per epoch, continuing the stream); None keeps the subset's order.
    `augmentation` (keyword arguments of `transforms.augment`) draws its parameters from the same generator.
    `training=False` keeps a last batch of a single sample (for passes in evaluation mode, e.g. SSD's importance).
    `indexed()` also yields each batch's positions in the subset, to look up per-sample values (new labels, flags).
    """

    def __init__(self, fabric: Fabric, subset: Subset, batch_size: int, normalizer: Normalizer,
                 generator: torch.Generator | None = None, augmentation: dict | None = None,
                 training: bool = True) -> None:
        self.fabric = fabric
        self.subset = subset
        self.batch_size = batch_size
        self.normalizer = normalizer
        self.generator = generator
        self.augmentation = augmentation
        self.training = training

    def __len__(self) -> int:
        return batch_count(len(self.subset), self.batch_size, self.fabric.world_size, self.training)

    def positions(self) -> Iterator[Tensor]:
        return batch_positions(len(self.subset), self.batch_size, self.generator, self.fabric.world_size,
                               self.fabric.global_rank, self.training)

    def indexed(self) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for positions in self.positions():
            images, labels = self.subset.take(positions)
            unit = to_unit(images)
            if self.augmentation:
                unit = augment(unit, self.generator, **self.augmentation)
            yield self.normalizer(unit), labels, positions.to(labels.device)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for inputs, labels, _ in self.indexed():
            yield inputs, labels


def cross_entropy_epochs(fabric: Fabric, model: nn.Module, optimizer: torch.optim.Optimizer, batches: Batches,
                         epochs: int, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
                         regulariser: Callable[[int], Tensor] | None = None) -> float:
    """Minimise cross-entropy for `epochs` epochs (model and optimizer already set up by Fabric).

    `regulariser(step)`, if given, is added to the loss. Each epoch's loss, accuracy and learning rate go to the
    training run being watched (`progress.training`). Returns the accuracy of the last epoch's training batches.
    """
    model.train()
    meter = EpochMeter(fabric, epochs, len(batches))
    step = 0
    with meter:
        for _ in range(epochs):
            for inputs, labels in batches:
                logits = float_logits(model(inputs))
                loss = F.cross_entropy(logits, labels)
                if regulariser is not None:
                    loss = loss + regulariser(step)
                meter.batch(loss, logits, labels, optimizer)
                descend(fabric, optimizer, loss, scheduler, model=model)
                step += 1
            meter.end_epoch()
    return meter.accuracy


def recipe_optimizer(model: nn.Module, recipe) -> torch.optim.Optimizer:
    """The recipe's optimizer: SGD with momentum (the SSD authors' ResNet recipe) or AdamW (the SUPREME ViT one)."""
    if recipe.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                           weight_decay=recipe.weight_decay)


def train_recipe(fabric: Fabric, model: nn.Module, subset: Subset, recipe, normalizer: Normalizer,
                 generator: torch.Generator) -> tuple[nn.Module, float]:
    """Train a freshly initialised model with the reference recipe (SGD or AdamW, warm-up, multi-step or cosine
    decay, augmentation).

    Returns the Fabric-wrapped model and its accuracy on the last epoch's augmented training batches.
    """
    model, optimizer = fabric.setup(model, recipe_optimizer(model, recipe))
    augmentation = {"crop_padding": recipe.augment.crop_padding, "flip": recipe.augment.flip,
                    "rotation": recipe.augment.rotation}
    batches = Batches(fabric, subset, recipe.batch_size, normalizer, generator, augmentation)
    scheduler = recipe_schedule(optimizer, len(batches), recipe.warmup_epochs, list(recipe.milestones),
                                recipe.gamma, recipe.schedule, recipe.epochs)
    accuracy = cross_entropy_epochs(fabric, model, optimizer, batches, recipe.epochs, scheduler)
    return model, accuracy
