"""Fine-tuning a causal LM on question–answer items: M_o on the full set, M_r on the retain set, the finetune
baseline on the retain set, and the batches every unlearning loop reads.

The recipe is OpenUnlearning's (configs/experiment/finetune/tofu/default.yaml and the HF Trainer's defaults it
keeps): AdamW with weight decay, a linear warm-up over `warmup_epochs` then a linear decay to 0
(`train.schedule: linear`), gradient norm clipped at 1.0, the loss the token-mean NLL of the answer tokens. The data
order comes from the caller's generator (the training seed for M_o, the unlearning seed for M_r); tensors are built
once and stay on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.runtime.train import recipe_schedule
from unlearnbench.text.data import collate
from unlearnbench.text.losses import shifted, token_mean_nll

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

    def batches(self, batch_size: int, generator: torch.Generator | None) -> Iterator[dict[str, Tensor]]:
        """One epoch's batches, in the order of a permutation from `generator` (in order with None)."""
        order = torch.randperm(self.size, generator=generator) if generator is not None else torch.arange(self.size)
        for start in range(0, self.size, batch_size):
            yield self.rows(order[start:start + batch_size])

    def steps(self, batch_size: int) -> int:
        return -(-self.size // batch_size)


def forward(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def count(meter: EpochMeter, loss: Tensor, logits: Tensor, labels: Tensor, optimizer) -> None:
    """A step for the epoch's curve: the loss, and the next-token accuracy over the answer tokens."""
    logits, labels, labelled = shifted(logits.detach(), labels)
    meter.batch(loss, logits[labelled], labels[labelled], optimizer)


def adamw(fabric: Fabric, model: nn.Module, lr: float, weight_decay: float, epochs: int, steps_per_epoch: int,
          warmup_epochs: float, parameters=None):
    """`model` and AdamW with the linear warm-up and decay, set up by Fabric."""
    trainable = [p for p in (model.parameters() if parameters is None else parameters) if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    model, optimizer = fabric.setup(model, optimizer)
    schedule = recipe_schedule(optimizer, steps_per_epoch, warmup_epochs, [], 1.0, "linear", epochs)
    return model, optimizer, schedule


def step(fabric: Fabric, model: nn.Module, optimizer, schedule, loss: Tensor) -> None:
    """One update: backward through Fabric, the gradient norm clipped at 1.0, the learning rate scheduled."""
    optimizer.zero_grad(set_to_none=True)
    fabric.backward(loss)
    fabric.clip_gradients(model, optimizer, max_norm=MAX_GRAD_NORM)
    optimizer.step()
    schedule.step()


def fine_tune(fabric: Fabric, model: nn.Module, items: Items, recipe, generator: torch.Generator,
              loss_of: Callable[[Tensor, Tensor], Tensor] = token_mean_nll) -> nn.Module:
    """Train `model` on `items` for `recipe.epochs` epochs of `recipe.batch_size`; returns it set up by Fabric."""
    model, optimizer, schedule = adamw(fabric, model, recipe.lr, recipe.weight_decay, recipe.epochs,
                                       items.steps(recipe.batch_size), recipe.warmup_epochs)
    model.train()
    with EpochMeter(fabric, recipe.epochs, items.steps(recipe.batch_size), unit="tokens") as meter:
        for _ in range(recipe.epochs):
            for batch in items.batches(recipe.batch_size, generator):
                logits = forward(model, batch)
                loss = loss_of(logits, batch["labels"])
                count(meter, loss, logits, batch["labels"], optimizer)
                step(fabric, model, optimizer, schedule, loss)
            meter.end_epoch()
    model.eval()
    return model
