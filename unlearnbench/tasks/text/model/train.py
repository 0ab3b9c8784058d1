"""Fine-tuning a causal LM on question–answer items: M_o on the full set, M_r on the retain set, the finetune
baseline on the retain set, and the batches every unlearning loop reads.

The recipe is OpenUnlearning's (configs/experiment/finetune/tofu/default.yaml and the HF Trainer's defaults it
keeps): AdamW with weight decay, a linear warm-up over `warmup_epochs` then a linear decay to 0
(`train.schedule: linear`), gradient norm clipped at 1.0, the loss the token-mean NLL of the answer tokens. The data
order comes from the caller's generator (the training seed for M_o, the unlearning seed for M_r); tensors are built
once and stay on the device.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence

import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import DeepSpeedStrategy
from torch import Tensor, nn

from unlearnbench.runtime import during, interrupt
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.runtime.train import NonFiniteStep, recipe_schedule
from unlearnbench.tasks.text.model.encoding import IGNORE, collate
from unlearnbench.tasks.text.model.losses import shifted, token_mean_nll

MAX_GRAD_NORM = 1.0  # the HF Trainer's default, which OpenUnlearning keeps


class Items:
    """Encoded items as one right-padded tensor batch on the device, cut into shuffled batches per epoch."""

    def __init__(self, fabric: Fabric, items: Sequence[dict[str, list[int]]], pad_id: int) -> None:
        self.fabric = fabric
        batch = collate(items, pad_id) | {"row": torch.arange(len(items))}  # `row`: the item's position
        self.batch = {name: tensor.to(fabric.device) for name, tensor in batch.items()}
        self.size = len(items)

    def __len__(self) -> int:
        return self.size

    def rows(self, rows: Tensor) -> dict[str, Tensor]:
        """The items at `rows`, trimmed to their longest (fewer padded positions to compute)."""
        batch = {name: tensor[rows.to(tensor.device)] for name, tensor in self.batch.items()}
        width = int(batch["attention_mask"].sum(1).max())
        return {name: tensor[:, :width] if tensor.dim() == 2 else tensor for name, tensor in batch.items()}

    def subset(self, rows: Sequence[int]) -> Items:
        """The items at `rows`, in that order, as items of their own (a point of the dynamics' sample)."""
        chosen = copy.copy(self)
        index = torch.as_tensor(rows, dtype=torch.long)
        chosen.batch = {name: tensor[index.to(tensor.device)] for name, tensor in self.batch.items()}
        chosen.batch["row"] = torch.arange(len(index), device=self.batch["row"].device)
        chosen.size = len(index)
        return chosen

    def shard(self, rows: Tensor) -> dict[str, Tensor]:
        """This rank's part of the global batch `rows` (every rank draws the same global batch from the same
        generator and takes its own slice), padded to the global batch's width, so that the ranks together compute
        exactly what one process computes on the whole batch (`global_mean`)."""
        width = int(self.batch["attention_mask"][rows.to(self.batch["row"].device)].sum(1).max())
        mine = torch.tensor_split(rows, self.fabric.world_size)[self.fabric.global_rank]
        batch = {name: tensor[mine.to(tensor.device)] for name, tensor in self.batch.items()}
        return {name: tensor[:, :width] if tensor.dim() == 2 else tensor for name, tensor in batch.items()}

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[dict[str, Tensor]]:
        """One epoch's batches (this rank's shards of them), in the order of a permutation from `generator` (in
        order with None)."""
        order = torch.randperm(self.size, generator=generator) if generator is not None else torch.arange(self.size)
        for start in interrupt.checked(range(0, self.size, batch_size)):
            yield self.shard(order[start:start + batch_size])

    def steps(self, batch_size: int) -> int:
        return -(-self.size // batch_size)


def global_mean(fabric: Fabric, local_mean: Tensor, local_count: Tensor | int) -> Tensor:
    """This rank's share of a mean over the global batch: its own mean weighted by its share of the units (tokens,
    sequences, positions) the mean runs over. The ranks' gradients are averaged (DDP), so the step is exactly one
    process's step on the whole batch, whatever the world size; with one rank, the mean itself."""
    if fabric.world_size == 1:
        return local_mean
    local_count = torch.as_tensor(local_count, dtype=torch.float64, device=local_mean.device)
    total = fabric.all_reduce(local_count.clone(), reduce_op="sum")
    return local_mean * (local_count * fabric.world_size / total).to(local_mean.dtype)


def answer_tokens(batch: dict[str, Tensor]) -> Tensor:
    """The labelled next tokens of a batch: the units of a token-mean NLL."""
    return (batch["labels"][:, 1:] != IGNORE).sum()


def forward(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def count(meter: EpochMeter, loss: Tensor, logits: Tensor, labels: Tensor, optimizer) -> None:
    """A step for the epoch's curve: the loss, and the next-token accuracy over the answer tokens."""
    logits, labels, labelled = shifted(logits.detach(), labels)
    meter.batch(loss, logits[labelled], labels[labelled], optimizer)


SCHEDULES = ("linear", "constant")


def adamw(fabric: Fabric, model: nn.Module, lr: float, weight_decay: float, epochs: int, steps_per_epoch: int,
          warmup_epochs: float, parameters=None, schedule: str = "linear", total_steps: int | None = None):
    """`model` and AdamW with its learning-rate schedule, set up by Fabric (`learning_rate_schedule`)."""
    model, optimizer = set_up_adamw(fabric, model, lr, weight_decay, parameters)
    total = epochs * steps_per_epoch if total_steps is None else total_steps
    return model, optimizer, learning_rate_schedule(optimizer, steps_per_epoch, warmup_epochs, total, schedule)


def learning_rate_schedule(optimizer, steps_per_epoch: int, warmup_epochs: float, total_steps: int,
                           schedule: str = "linear") -> torch.optim.lr_scheduler.LambdaLR:
    """A linear warm-up over `warmup_epochs` × `steps_per_epoch` steps, then a linear decay to 0 at `total_steps`
    (`linear`, the HF Trainer's default) or the full rate (`constant`: with no warm-up, the HF Trainer's `constant`,
    which OpenUnlearning's MUSE and WMDP experiments run; with one, its `constant_with_warmup`). The recipe's
    schedule counted in steps, not epochs, so that a run of `max_steps` ends its decay at its last step."""
    kind = "step" if schedule == "constant" else "linear"  # `step` with no milestone: warm-up, then constant
    return recipe_schedule(optimizer, 1, warmup_epochs * steps_per_epoch, [], 1.0, kind, total_steps)


def set_up_adamw(fabric: Fabric, model: nn.Module, lr: float, weight_decay: float, parameters=None):
    """`model` and AdamW over its trainable parameters (or those of `parameters`), set up by Fabric, with the
    gradient clipping `step` applies configured in DeepSpeed's engine where that engine clips."""
    trainable = [p for p in (model.parameters() if parameters is None else parameters) if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    if engine_clips(fabric):
        fabric.strategy.config["gradient_clipping"] = MAX_GRAD_NORM
    return fabric.setup(model, optimizer)


def engine_clips(fabric: Fabric) -> bool:
    """Whether the strategy's own engine clips the gradients: DeepSpeed's does, at its config's `gradient_clipping`
    (which `adamw` sets to 1.0), and Fabric's `clip_gradients` refuses to under it."""
    return isinstance(fabric.strategy, DeepSpeedStrategy)


def step(fabric: Fabric, model: nn.Module, optimizer, schedule, loss: Tensor) -> None:
    """One update: backward through Fabric, the gradient norm clipped at 1.0, the learning rate scheduled.

    A non-finite loss or gradient norm raises `NonFiniteStep` instead of the update (the step's number is the
    schedule's count): the caller records the divergence with what it knows (the model, the option to lower),
    where clipping would have raised torch's own message or stepped on NaN weights."""
    optimizer.zero_grad(set_to_none=True)
    fabric.backward(loss, model=model)  # DeepSpeed needs it named once several models are set up
    norm = None if engine_clips(fabric) else fabric.clip_gradients(model, optimizer, max_norm=MAX_GRAD_NORM,
                                                                   error_if_nonfinite=False)
    if not finite_step(fabric, loss, norm):
        raise NonFiniteStep(schedule.last_epoch + 1, float(loss.detach()), None if norm is None else float(norm))
    optimizer.step()
    schedule.step()
    during.stepped(model)  # a point of the dynamics may follow (runtime/during.py)


def accumulated_step(fabric: Fabric, model: nn.Module, optimizer, schedule,
                     losses: Sequence[Callable[[], Tensor]]) -> None:
    """One update from several micro-batches (gradient accumulation): each loss computed and back-propagated in turn,
    scaled by 1/len(losses), so that the step follows the mean of the micro-batches' losses, as the HF Trainer
    accumulates (OpenUnlearning's `gradient_accumulation_steps`); then clipping, the finite check and the update as
    `step`. Memory holds one micro-batch's activations at a time. One micro-batch is `step` itself."""
    if len(losses) == 1:
        step(fabric, model, optimizer, schedule, losses[0]())
        return
    if engine_clips(fabric):  # DeepSpeed's engine counts its own accumulation steps (its config's, 1 here)
        raise UserError(f"gradient accumulation ({len(losses)} micro-batches a step) does not run under DeepSpeed "
                        f"(strategy=deepspeed_stage_*); set train.unlearn.accumulation=1, or use strategy=fsdp, ddp "
                        f"or single")
    optimizer.zero_grad(set_to_none=True)
    total = None
    for index, loss_of in enumerate(losses):
        with fabric.no_backward_sync(model, enabled=index < len(losses) - 1):
            loss = loss_of() / len(losses)
            fabric.backward(loss, model=model)
        total = loss.detach() if total is None else total + loss.detach()
    norm = None if engine_clips(fabric) else fabric.clip_gradients(model, optimizer, max_norm=MAX_GRAD_NORM,
                                                                   error_if_nonfinite=False)
    if not finite_step(fabric, total, norm):
        raise NonFiniteStep(schedule.last_epoch + 1, float(total), None if norm is None else float(norm))
    optimizer.step()
    schedule.step()
    during.stepped(model)


def finite_step(fabric: Fabric, loss: Tensor, norm: Tensor | None) -> bool:
    """Whether a step's loss is finite on every rank and its gradient norm (of the synchronised gradients) finite.
    Under a loss scaler (16-mixed) a non-finite norm is an overflow the scaler skips and recovers from, not a
    divergence. The verdict is reduced over the ranks, so that all of them stop at the same step or none."""
    bad = ~torch.isfinite(loss.detach())
    if norm is not None and getattr(fabric.strategy.precision, "scaler", None) is None:
        bad = bad | ~torch.isfinite(norm.to(bad.device))
    if fabric.world_size > 1:
        bad = fabric.all_reduce(bad.float(), reduce_op="sum") > 0
    return not bool(bad)


def fine_tune(fabric: Fabric, model: nn.Module, items: Items, recipe, generator: torch.Generator) -> nn.Module:
    """Train `model` on `items` for `recipe.epochs` epochs of `recipe.batch_size`; returns it set up by Fabric."""
    model, optimizer, schedule = adamw(fabric, model, recipe.lr, recipe.weight_decay, recipe.epochs,
                                       items.steps(recipe.batch_size), recipe.warmup_epochs)
    model.train()
    with EpochMeter(fabric, recipe.epochs, items.steps(recipe.batch_size), unit="tokens") as meter:
        for _ in range(recipe.epochs):
            for batch in items.batches(recipe.batch_size, generator):
                logits = forward(model, batch)
                loss = token_mean_nll(logits, batch["labels"])
                count(meter, loss, logits, batch["labels"], optimizer)
                step(fabric, model, optimizer, schedule, global_mean(fabric, loss, answer_tokens(batch)))
            meter.end_epoch()
    model.eval()
    return model
