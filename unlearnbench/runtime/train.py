"""Batches from device-resident tensors, and the training loops every stage shares.

No DataLoader and no workers: a batch is an index into the uint8 tensors already on the device, augmented there.
Under data parallelism every global batch is cut into one chunk per rank, so each rank runs the same number of
steps and DDP's average of the ranks' batch-mean gradients is that of the global batch when the chunks are of one
size (a batch that does not split evenly, e.g. the last of an epoch, weighs its chunks equally; SSD's importance
passes reweight their losses to be exact). Batch normalisation uses each rank's own chunk statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.transforms import Normalizer, augment, to_unit


def batch_count(n: int, batch_size: int, world_size: int, training: bool = True) -> int:
    """Batches per epoch. A last batch too small to share is dropped: under one sample per rank (a rank would get
    an empty batch) and, for training, under two (batch normalisation in training mode needs two samples)."""
    full, rest = divmod(n, batch_size)
    return full + (rest >= (2 if training else 1) * world_size)


def batch_positions(n: int, batch_size: int, generator: torch.Generator | None, world_size: int = 1,
                    rank: int = 0, training: bool = True) -> Iterator[Tensor]:
    """One epoch of this rank's positions in 0..n−1: a permutation drawn from `generator` (None: in order), cut
    into global batches of `batch_size`, each cut into one chunk per rank. Every batch is a safe point for an
    interrupt (runtime/interrupt.py): a long training stage stops within one step."""
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    for start in interrupt.checked(range(0, batch_size * batch_count(n, batch_size, world_size, training),
                                         batch_size)):
        yield order[start:start + batch_size].tensor_split(world_size)[rank]


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


class NonFiniteStep(ArithmeticError):
    """A training step whose loss or gradient norm is not finite: the run diverged, and the update was not taken.
    The caller knows which model it trained and which option to lower, and says so (`where` says when)."""

    def __init__(self, step: int, loss: float, gradient_norm: float | None = None) -> None:
        self.step, self.loss, self.gradient_norm = step, loss, gradient_norm
        super().__init__(f"diverged {self.where}")

    @property
    def where(self) -> str:
        """When and how: the step, its loss, and the gradient norm where the loss was finite but the norm not."""
        norm = f", gradient norm {self.gradient_norm:.4g}" if math.isfinite(self.loss) else ""
        return f"at step {self.step} (loss {self.loss:.4g}{norm})"


def float_logits(logits: Tensor) -> Tensor:
    """Logits in float32 or better, whatever precision the model runs in (losses and softmax need it)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def descend(fabric: Fabric, optimizer: torch.optim.Optimizer, loss: Tensor,
            scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, model: nn.Module | None = None) -> None:
    """One optimisation step on `loss` through Fabric (precision scaling, gradient synchronisation). `model`: the
    module the step trains, which DeepSpeed needs named once a job has set up more than one."""
    optimizer.zero_grad(set_to_none=True)
    fabric.backward(loss, model=model)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()


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


def recipe_schedule(optimizer: torch.optim.Optimizer, steps_per_epoch: int, warmup_epochs: float,
                    milestones: list[int], gamma: float, schedule: str = "step",
                    epochs: int = 1) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over the first `warmup_epochs`, then (`step`) ×gamma at each milestone epoch, (`cosine`)
    cosine annealing or (`linear`, the Hugging Face Trainer's default) a linear decay from the full rate to 0 over
    the remaining steps; stepped per batch."""
    warmup_steps = max(1, round(warmup_epochs * steps_per_epoch))
    total_steps = max(epochs * steps_per_epoch, warmup_steps + 1)

    def factor(step: int) -> float:
        epoch = step // max(steps_per_epoch, 1)
        warm = min(1.0, (step + 1) / warmup_steps) if warmup_epochs > 0 else 1.0
        if schedule in ("cosine", "linear"):
            done = max(0, step + 1 - warmup_steps) / (total_steps - warmup_steps) if warmup_epochs > 0 else (
                step / total_steps)
            decay = 0.5 * (1 + math.cos(math.pi * min(done, 1.0))) if schedule == "cosine" else 1 - min(done, 1.0)
            return warm * decay
        return warm * gamma ** sum(epoch >= m for m in milestones)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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
