"""Batch positions from device-resident data, and the pieces of a training step every task shares.

No DataLoader and no workers: a batch is a set of positions into data already on the device, which the task turns
into inputs (e.g. the image task's `Batches`). Under data parallelism every global batch is cut
into one chunk per rank, so each rank runs the same number of steps and DDP's average of the ranks' batch-mean
gradients is that of the global batch when the chunks are of one size (a batch that does not split evenly, e.g. the
last of an epoch, weighs its chunks equally; SSD's importance passes reweight their losses to be exact). Batch
normalisation uses each rank's own chunk statistics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.runtime import during, interrupt


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
    module the step trains, which DeepSpeed needs named once a job has set up more than one, and which an evaluation
    along the steps (runtime/during.py) evaluates: a step without it updates something else (UNSIR's noise)."""
    optimizer.zero_grad(set_to_none=True)
    fabric.backward(loss, model=model)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    if model is not None:
        during.stepped(model)


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
