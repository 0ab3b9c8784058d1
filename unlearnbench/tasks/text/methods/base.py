"""The interface of the text task's methods, and the loop most of them share.

A text method is one module in this package with one class deriving from `TextMethod` and one YAML in
`conf/method/` whose keys are its constructor's arguments, as every task's method is
(`unlearnbench.core.method`).
`unlearn(model, task)` turns a copy of M_o into M_u; every random choice draws from `task.rng`, derived from the
unlearning seed.

`ForgetRetainMethod` is OpenUnlearning's unlearning loop (locuslab/open-unlearning `src/trainer/unlearn/`,
`src/data/unlearn.py`): an epoch is one pass over the forget set in shuffled batches; each forget example comes
with one retain example drawn uniformly at random (`ForgetRetainDataset`, anchor forget), and the step minimises
γ·L_forget + α·L_retain with AdamW, a linear warm-up and decay and the gradient norm clipped at 1.0. Where
OpenUnlearning draws the retain examples and the data order from the global RNG, the same on every rank
(open-unlearning #139), here both come from the unlearning seed.

The loop's options are the HF Trainer arguments that OpenUnlearning's experiments set (`trainer.args`): `epochs`, or
`max_steps` optimiser steps (which replace the epochs, as the Trainer's `max_steps` does), `lr`, `batch_size` rows a
step (the reference's per-device batch × devices × `gradient_accumulation_steps`), `accumulation` micro-batches that
batch is cut into (its `gradient_accumulation_steps`: each micro-batch's loss is its own mean, the step follows their
mean), `weight_decay`, `warmup_epochs` and `schedule` (`linear` decay, or `constant`). `train.unlearn` sets any of
them for every method of a job at once (the reference presets, `experiment=*_reference`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, Range
from unlearnbench.core.method import Method
from unlearnbench.runtime import during, interrupt
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import Streams
from unlearnbench.tasks.text.model.causal_lm import Encoder
from unlearnbench.tasks.text.model.losses import kl_to_reference, token_mean_nll
from unlearnbench.tasks.text.model.train import (
    SCHEDULES,
    Items,
    accumulated_step,
    adamw,
    answer_tokens,
    forward,
    global_mean,
)
from unlearnbench.tasks.text.scenario import TextSplits

RETAIN_LOSSES = ("nll", "kl")
# The units a loss term averages over, counted on a batch: labelled next tokens (token-mean NLL), sequences (NPO,
# SimNPO, DPO, RMU), next-token positions (UNDIAL), every position (the KL retain term).
UNITS: dict[str, Callable[[dict[str, Tensor]], Tensor | int]] = {
    "tokens": answer_tokens,
    "rows": lambda batch: batch["input_ids"].shape[0],
    "positions": lambda batch: batch["input_ids"].shape[0] * (batch["input_ids"].shape[1] - 1),
    "cells": lambda batch: batch["input_ids"].numel(),
}


@dataclass
class TextTask:
    """Everything a text method may use. Its random choices draw from `rng` (derived from the unlearning seed)."""

    fabric: Fabric
    encoder: Encoder
    splits: TextSplits
    forget: Items  # D_f's question–answer items
    retain: Items  # D_r's and the general sets' items: what M_r trains on
    rng: Streams
    recipe: object  # the fine-tuning recipe of M_o and M_r (`train`)
    original: Callable[[], nn.Module]  # a fresh copy of M_o (a frozen reference)
    retrained: nn.Module  # M_r, for the `text_retrain` baseline only
    retrained_cost: Cost
    kept: Callable[[str, dict, Callable[[], dict]], dict] | None = None  # the job's `TextBench.kept`, bound to M_o

    def of_original(self, title: str, parts: dict, compute: Callable[[], dict]) -> dict:
        """`compute()`, a JSON-able result drawn from M_o (AltPO's alternates), made once per M_o and `parts` (all
        that determines it besides M_o): kept in the job's model cache beside M_o, computed here without one."""
        return compute() if self.kept is None else self.kept(title, parts, compute)

    def pairs(self, batch_size: int) -> Iterator[tuple[dict[str, Tensor], dict[str, Tensor]]]:
        """One epoch: shuffled forget batches, each with as many retain examples drawn uniformly at random, and
        a `draw` per forget example (a uniform 62-bit integer for a method's own choice, e.g. IdkDPO's answer).
        The global batch is drawn alike on every rank; each rank takes its own slice of it (`Items.shard`), so no
        two ranks see the same retain examples (open-unlearning #139) and the ranks together step as one process."""
        for (pair,) in self.steps(batch_size, 1):
            yield pair

    def steps(self, batch_size: int, accumulation: int) -> Iterator[list[tuple[dict[str, Tensor], dict[str, Tensor]]]]:
        """One epoch as `pairs`, each global batch cut into micro-batches of ⌈batch_size / accumulation⌉ rows (an
        epoch's shorter last batch into fewer): the same draws, whatever `accumulation`. A step then follows the mean
        of its micro-batches' losses, the last one's too (the HF Trainer 4.45 divides each by the full count)."""
        micro = -(-batch_size // accumulation)
        order = torch.randperm(len(self.forget), generator=self.rng.torch)
        for start in interrupt.checked(range(0, len(self.forget), batch_size)):
            rows = order[start:start + batch_size]
            drawn = torch.randint(len(self.retain), (len(rows),), generator=self.rng.torch)
            draws = torch.randint(2**62, (len(rows),), generator=self.rng.torch)
            yield [self.pair(rows[at:at + micro], drawn[at:at + micro], draws[at:at + micro])
                   for at in range(0, len(rows), micro)]

    def pair(self, rows: Tensor, drawn: Tensor, draws: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """This rank's share of a (micro-)batch: its forget rows with their draws, and its drawn retain rows."""
        forget = self.forget.shard(rows)
        mine = torch.tensor_split(draws, self.fabric.world_size)[self.fabric.global_rank]
        return forget | {"draw": mine.to(forget["row"].device)}, self.retain.shard(drawn)

    def reference(self) -> nn.Module:
        """A frozen copy of M_o (θ_ref), in evaluation mode."""
        model = self.fabric.setup_module(self.original())
        model.eval()
        model.requires_grad_(False)
        return model


class TextMethod(Method):
    task = "text"
    # null takes a default from the job (the recipe's rate), from the method (RMU's layer) or from its variant
    optional: ClassVar[tuple[str, ...]] = ("lr", "layer", "max_steps")
    # A method's published settings by name (`method.variant=NAME`, the first is the default): the values each gives
    # to the options its YAML leaves null (docs/text.md, "Methods").
    variants: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def check_options(cls, options) -> None:
        unset = {*cls.optional, *(k for values in cls.variants.values() for k in values)}
        super().check_options({k: v for k, v in options.items() if not (k in unset and v is None)})

    @classmethod
    def with_variant(cls, variant: str, options: dict[str, Any]) -> dict[str, Any]:
        """`options` with each option the YAML leaves null taken from `variant`'s values."""
        return options | {k: v for k, v in cls.variants[variant].items() if options.get(k) is None}


class ForgetRetainMethod(TextMethod):
    """γ·L_forget + α·L_retain over OpenUnlearning's forget-anchored loop. `lr` null takes the fine-tuning
    recipe's rate (OpenUnlearning fine-tunes and unlearns at the same 1e-5)."""

    ranges: ClassVar[dict[str, Range]] = {"gamma": AT_LEAST_0, "alpha": AT_LEAST_0, "warmup_epochs": AT_LEAST_0,
                                          "retain_loss": Range(choices=RETAIN_LOSSES), "max_steps": AT_LEAST_1,
                                          "accumulation": AT_LEAST_1, "schedule": Range(choices=SCHEDULES)}
    uses_reference: ClassVar[bool] = False  # whether the forget loss needs θ_ref
    forget_unit: ClassVar[str] = "tokens"  # what L_forget averages over (`UNITS`): tokens, rows, positions, cells
    # the loop's options, which the job's `train.unlearn` may set for every method at once
    LOOP: ClassVar[tuple[str, ...]] = ("epochs", "max_steps", "lr", "batch_size", "accumulation", "weight_decay",
                                       "warmup_epochs", "schedule")

    def __init__(self, name: str, epochs: int = 10, lr: float | None = None, batch_size: int = 32,
                 weight_decay: float = 0.01, warmup_epochs: float = 1.0, gamma: float = 1.0, alpha: float = 1.0,
                 retain_loss: str = "nll", max_steps: int | None = None, accumulation: int = 1,
                 schedule: str = "linear") -> None:
        super().__init__(name)
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.weight_decay, self.warmup_epochs = weight_decay, warmup_epochs
        self.gamma, self.alpha, self.retain_loss = gamma, alpha, retain_loss
        self.max_steps, self.accumulation, self.schedule = max_steps, accumulation, schedule

    def needs_reference(self) -> bool:
        return self.uses_reference or (self.alpha > 0 and self.retain_loss == "kl")

    def unlearn(self, model: nn.Module, task: TextTask) -> nn.Module:
        self.take_loop(getattr(task.recipe, "unlearn", None))
        lr = self.lr if self.lr is not None else task.recipe.lr
        steps = task.forget.steps(self.batch_size)
        total = self.epochs * steps if self.max_steps is None or steps == 0 else self.max_steps
        model, optimizer, schedule = adamw(task.fabric, model, lr, self.weight_decay, self.epochs, steps,
                                           self.warmup_epochs, self.parameters(model), self.schedule, total)
        reference = task.reference() if self.needs_reference() else None
        self.prepare(model, reference, task)
        model.train()
        done = 0
        while done < total:  # whole epochs; with max_steps, the last one cut at the step count (the Trainer's)
            for micro in task.steps(self.batch_size, self.accumulation):
                accumulated_step(task.fabric, model, optimizer, schedule,
                                 [self.micro_loss(model, reference, forget, retain, task) for forget, retain in micro])
                done += 1
                if done == total:
                    break
            self.end_epoch(model, reference, task)
            during.epoch_ended()
        model.eval()
        return model

    def micro_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                   retain: dict[str, Tensor], task: TextTask) -> Callable[[], Tensor]:
        """A micro-batch's loss, computed when the accumulating step asks for it (one micro-batch's activations in
        memory at a time)."""
        def loss() -> Tensor:
            with task.fabric.autocast():
                return self.loss(model, reference, forget, retain, task)
        return loss

    def take_loop(self, loop: dict[str, Any] | None) -> None:
        """The job's `train.unlearn`: each loop option it sets replaces this method's own (`max_steps` then rules
        over the epochs, as it does in the Trainer)."""
        for name in self.LOOP:
            value = (loop or {}).get(name)
            if value is not None:
                setattr(self, name, value)

    def loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
             retain: dict[str, Tensor], task: TextTask) -> Tensor:
        """One step's γ·L_forget + α·L_retain (no retain pass where α = 0), each term this rank's share of its mean
        over the global batch (`global_mean`: with one process, the terms themselves)."""
        fabric = task.fabric
        loss = self.gamma * global_mean(fabric, self.forget_loss(model, reference, forget, task),
                                        self.forget_count(forget))
        if self.alpha == 0:
            return loss
        return loss + self.alpha * global_mean(fabric, self.retain_term(model, reference, retain),
                                               UNITS[self.retain_unit](retain))

    def forget_count(self, forget: dict[str, Tensor]) -> Tensor | int:
        """How many units L_forget averages over on this rank's batch (`forget_unit`)."""
        return UNITS[self.forget_unit](forget)

    @property
    def retain_unit(self) -> str:
        """What the retain term averages over: answer tokens (NLL) or every position of the batch (KL)."""
        return "cells" if self.retain_loss == "kl" else "tokens"

    def parameters(self, model: nn.Module):
        """The parameters the optimizer updates (all of them unless a method says otherwise)."""
        return None

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        """Anything a method sets up once before its first step (RMU's hooks and direction)."""

    def end_epoch(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        """Anything a method does at each epoch's end (PDU's dual update)."""

    @abstractmethod
    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        """L_forget on one forget batch."""

    def retain_term(self, model: nn.Module, reference: nn.Module | None, retain: dict[str, Tensor]) -> Tensor:
        """L_retain: the token-mean NLL (`nll`) or the KL from θ_ref's distribution at every position (`kl`)."""
        logits = forward(model, retain)
        if self.retain_loss == "kl":
            with torch.no_grad():
                reference_logits = forward(reference, retain)
            return kl_to_reference(logits, reference_logits)
        return token_mean_nll(logits, retain["labels"])
