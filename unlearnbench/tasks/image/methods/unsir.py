"""UNSIR: error-maximising noise for the forgotten class, then impair (noise + retain sample) and repair.

Tarun et al., "Fast Yet Effective Machine Unlearning" (IEEE TNNLS 2023), github vikram2000b/Fast-Machine-Unlearning,
as the SSD authors' code runs it (`UNSIR`). Targeted scenarios only: there is no random-sample variant, and the job
refuses one. Steps (defaults of the reference):
  1. Retain sample: the first 500 training samples, in dataset order, of every class other than the target. In the
     sub-class scenario "class" means sub-class, as in the reference's sub-class code: the first 500 of each of the
     other fine classes, the forgotten sub-class's siblings in its super-class included, with their super-class
     labels (on CIFAR-20 that is all of D_r).
  2. Noise: 32 images N ~ N(0, 1) in normalised input space, optimised with Adam lr 0.1 for 25 steps (full-class)
     or 250 (sub-class) on −CE(M(N), forget label) + 0.1 · mean over images of Σ N², with M frozen in eval mode.
  3. Impair: 1 epoch over the noise, labelled with the forget label and repeated 80 times as the reference's
     `num_noise_batches` does, ∪ the retain sample; batch 32, shuffled, Adam lr 1e-4, cross-entropy, train mode.
  4. Repair: 1 epoch over the retain sample, batch 128, shuffled, a fresh Adam lr 1e-4.

Differences from the reference, whose defects are fixed: the impair data holds every noise image (80 copies of each
of the 32; the reference's `batch[0].size(0)` slip kept 3 images × 80); the noise is optimised with the model in
eval mode, so the batch-norm running statistics keep M_o's values (the reference ran it in train mode, overwriting
them with noise statistics); the model's parameters are frozen during the noise steps, so no gradient accumulates
into them and leaks into the first impair step. The noise and the data order come from the unlearning seed. The
repair's fresh Adam is the impair optimizer with its state cleared (the same thing). Refused: the DeepSpeed
strategies (they allow no second optimizer, which the noise needs) and float16 models (Adam's moments underflow).

Under data parallelism every rank optimises the same noise (same seed, same model, the whole noise batch) outside
DDP's gradient synchronisation (its parameters are frozen and `no_backward_sync` leaves the reducer out of these
backward passes), and rank 0's noise is then sent to every rank, so the impair data is one set of images whatever
the device count; the impair and repair steps are ordinary synchronised training steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from lightning_fabric.strategies import DeepSpeedStrategy
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.train import batch_count, batch_positions, descend, float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.scenarios import Scenario, SubClass
from unlearnbench.tasks.image.data.transforms import Normalizer, to_unit
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting
from unlearnbench.tasks.image.train import cross_entropy_epochs


def retain_sample(task: UnlearningTask, per_class: int) -> Subset:
    """The first `per_class` training samples, in dataset order, of every class but the forgotten one, class by
    class; in the sub-class scenario of every sub-class (group) but the forgotten one."""
    data, forget = task.data, task.splits.forget_train
    keys = data.train_groups if isinstance(task.scenario, SubClass) else data.train_labels
    forgotten = int(keys[forget.indices[0]])
    chosen = [torch.nonzero(keys == k).flatten()[:per_class] for k in range(int(keys.max()) + 1) if k != forgotten]
    return Subset(data, "train", torch.cat(chosen))


def noise_loss(logits: Tensor, label: int, noise: Tensor, weight: float) -> Tensor:
    """UNSIR's noise objective, minimised: −CE(logits, label) + weight · mean over images of Σ N² (the reference's
    `UNSIR_noise_train`); minimising it maximises the model's error on the forgotten class while the L2 term keeps
    the noise bounded."""
    labels = torch.full((logits.shape[0],), label, dtype=torch.long, device=logits.device)
    return -F.cross_entropy(logits, labels) + weight * noise.pow(2).sum(dim=(1, 2, 3)).mean()


@contextmanager
def frozen(model: nn.Module) -> Iterator[None]:
    """`model` in eval mode with every parameter's `requires_grad` off, both restored on exit: passes through it
    then change neither its batch-norm statistics nor its parameters nor their gradients."""
    training, parameters = model.training, list(model.parameters())
    flags = [p.requires_grad for p in parameters]
    model.eval()
    for p in parameters:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(parameters, flags, strict=True):
            p.requires_grad_(flag)
        model.train(training)


def same_on_every_rank(fabric: Fabric, tensor: Tensor) -> Tensor:
    """`tensor` as rank 0 holds it, on every rank (a no-op on one process): ranks compute the same noise, and this
    keeps it one noise where kernels are not bit-deterministic across processes."""
    if fabric.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.broadcast(tensor, src=0)
    return tensor


def optimise_noise(fabric: Fabric, model: nn.Module, noise: Tensor, label: int, steps: int, lr: float,
                   weight: float) -> tuple[Tensor, Tensor]:
    """Error-maximising noise for `label`: `steps` Adam steps on `noise_loss`.

    `model` is set up by Fabric; the steps go through `fabric.backward` and a Fabric optimizer, so a mixed-precision
    gradient scaler unscales (and skips overflowing steps) as for any training step. The model is `frozen`, and the
    steps run under `fabric.no_backward_sync`: DDP does not prepare its reducer for these backward passes, which
    produce no parameter gradient, so they are no DDP iteration at all and nothing depends on how the reducer would
    treat an iteration without gradients. Returns the optimised noise (detached, rank 0's on every rank) and the
    loss before each step.
    """
    noise = noise.detach().clone().requires_grad_(True)
    optimizer = fabric.setup_optimizers(torch.optim.Adam([noise], lr=lr))
    losses = []
    with frozen(model), fabric.no_backward_sync(model):
        for _ in interrupt.checked(range(steps)):
            loss = noise_loss(float_logits(model(noise)), label, noise, weight)
            descend(fabric, optimizer, loss)
            losses.append(loss.detach())
    noise = same_on_every_rank(fabric, noise.detach().contiguous())
    return noise, torch.stack(losses) if losses else torch.empty(0, device=noise.device)


class NoisyBatches:
    """One shuffled epoch of `copies` copies of every noise image (labelled `label`) ∪ `retain`, each time it is
    iterated: this rank's (normalised inputs, labels). Positions 0..copies·n−1 are the noise (copy k of image i at
    k·n + i), the rest the retain sample in its order."""

    def __init__(self, fabric: Fabric, noise: Tensor, label: int, copies: int, retain: Subset, batch_size: int,
                 normalizer: Normalizer, generator: torch.Generator) -> None:
        self.fabric, self.noise, self.label, self.copies = fabric, noise, label, copies
        self.retain, self.batch_size, self.normalizer, self.generator = retain, batch_size, normalizer, generator
        self.noise_count = copies * noise.shape[0]

    def __len__(self) -> int:
        return batch_count(self.noise_count + len(self.retain), self.batch_size, self.fabric.world_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        device = self.noise.device
        for positions in batch_positions(self.noise_count + len(self.retain), self.batch_size, self.generator,
                                         self.fabric.world_size, self.fabric.global_rank):
            positions = positions.to(device)
            is_noise = positions < self.noise_count
            inputs = torch.empty((len(positions), *self.noise.shape[1:]), dtype=self.noise.dtype, device=device)
            labels = torch.full((len(positions),), self.label, dtype=torch.long, device=device)
            inputs[is_noise] = self.noise[positions[is_noise] % self.noise.shape[0]]
            images, retain_labels = self.retain.take(positions[~is_noise] - self.noise_count)
            inputs[~is_noise] = self.normalizer(to_unit(images)).to(device)
            labels[~is_noise] = retain_labels.to(device)
            yield inputs, labels


class Unsir(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {
        "retain_per_class": AT_LEAST_1, "noise_images": AT_LEAST_1, "noise_steps": AT_LEAST_0, "noise_lr": POSITIVE,
        "noise_weight": AT_LEAST_0, "noise_copies": AT_LEAST_1, "impair_batch_size": AT_LEAST_1,
        "repair_batch_size": AT_LEAST_1, "impair_epochs": AT_LEAST_0, "repair_epochs": AT_LEAST_0}
    deterministic = False

    def __init__(self, name: str, retain_per_class: int = 500, noise_images: int = 32,
                 noise_steps: int | dict = 25, noise_lr: float = 0.1, noise_weight: float = 0.1,
                 noise_copies: int = 80, impair_batch_size: int = 32, repair_batch_size: int = 128,
                 impair_epochs: int = 1, repair_epochs: int = 1, lr: float = 1e-4) -> None:
        super().__init__(name)
        self.retain_per_class, self.noise_images, self.noise_steps = retain_per_class, noise_images, noise_steps
        self.noise_lr, self.noise_weight, self.noise_copies = noise_lr, noise_weight, noise_copies
        self.impair_batch_size, self.repair_batch_size = impair_batch_size, repair_batch_size
        self.impair_epochs, self.repair_epochs, self.lr = impair_epochs, repair_epochs, lr

    def serves(self, scenario: Scenario) -> bool:
        return scenario.targeted

    def initial_noise(self, task: UnlearningTask) -> Tensor:
        """N(0, 1) images of the data's shape, drawn with the unlearning seed, on the device."""
        data = task.data
        shape = (setting(self.noise_images, task), data.channels, data.image_size, data.image_size)
        return torch.randn(shape, generator=task.rng.torch).to(task.fabric.device)

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        if not self.serves(task.scenario):
            raise UserError(f"method {self.name} serves targeted scenarios only, not {task.scenario.name}")
        fabric, lr = task.fabric, setting(self.lr, task)
        if isinstance(fabric.strategy, DeepSpeedStrategy):
            raise UserError(f"method {self.name} optimises its noise with an optimizer of its own, which DeepSpeed "
                            f"does not allow; use strategy=ddp_spawn, ddp or fsdp")
        retain = retain_sample(task, setting(self.retain_per_class, task))
        label = task.forget_label
        noise = self.initial_noise(task)
        model, optimizer = task.adam(model, lr, self.name)
        noise, _ = optimise_noise(fabric, model, noise, label, setting(self.noise_steps, task),
                                  setting(self.noise_lr, task), setting(self.noise_weight, task))
        optimizer.zero_grad(set_to_none=True)  # nothing accumulated during the noise steps; made explicit
        impair = NoisyBatches(fabric, noise, label, setting(self.noise_copies, task), retain,
                              setting(self.impair_batch_size, task), task.normalizer, task.rng.torch)
        cross_entropy_epochs(fabric, model, optimizer, impair, setting(self.impair_epochs, task))
        optimizer.state.clear()  # a fresh Adam for the repair
        repair = task.batches(retain, setting(self.repair_batch_size, task))
        cross_entropy_epochs(fabric, model, optimizer, repair, setting(self.repair_epochs, task))
        return model
