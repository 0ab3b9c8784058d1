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
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.core.method import Method
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import Streams
from unlearnbench.tasks.text.losses import kl_to_reference, token_mean_nll
from unlearnbench.tasks.text.model import Encoder
from unlearnbench.tasks.text.scenario import TextSplits
from unlearnbench.tasks.text.train import Items, adamw, answer_tokens, forward, global_mean, step

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
        order = torch.randperm(len(self.forget), generator=self.rng.torch)
        for start in interrupt.checked(range(0, len(self.forget), batch_size)):
            rows = order[start:start + batch_size]
            drawn = torch.randint(len(self.retain), (len(rows),), generator=self.rng.torch)
            draws = torch.randint(2**62, (len(rows),), generator=self.rng.torch)
            forget = self.forget.shard(rows)
            mine = torch.tensor_split(draws, self.fabric.world_size)[self.fabric.global_rank]
            yield forget | {"draw": mine.to(forget["row"].device)}, self.retain.shard(drawn)

    def reference(self) -> nn.Module:
        """A frozen copy of M_o (θ_ref), in evaluation mode."""
        model = self.fabric.setup_module(self.original())
        model.eval()
        model.requires_grad_(False)
        return model


class TextMethod(Method):
    task = "text"
    optional: ClassVar[tuple[str, ...]] = ("lr", "layer")  # null takes a default from the job (the recipe's rate)

    @classmethod
    def check_options(cls, options) -> None:
        super().check_options({k: v for k, v in options.items() if not (k in cls.optional and v is None)})


class ForgetRetainMethod(TextMethod):
    """γ·L_forget + α·L_retain over OpenUnlearning's forget-anchored loop. `lr` null takes the fine-tuning
    recipe's rate (OpenUnlearning fine-tunes and unlearns at the same 1e-5)."""

    ranges: ClassVar[dict[str, Range]] = {"gamma": AT_LEAST_0, "alpha": AT_LEAST_0, "warmup_epochs": AT_LEAST_0,
                                          "retain_loss": Range(choices=RETAIN_LOSSES)}
    uses_reference: ClassVar[bool] = False  # whether the forget loss needs θ_ref
    forget_unit: ClassVar[str] = "tokens"  # what L_forget averages over (`UNITS`): tokens, rows, positions, cells

    def __init__(self, name: str, epochs: int = 10, lr: float | None = None, batch_size: int = 32,
                 weight_decay: float = 0.01, warmup_epochs: float = 1.0, gamma: float = 1.0, alpha: float = 1.0,
                 retain_loss: str = "nll") -> None:
        super().__init__(name)
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.weight_decay, self.warmup_epochs = weight_decay, warmup_epochs
        self.gamma, self.alpha, self.retain_loss = gamma, alpha, retain_loss

    def needs_reference(self) -> bool:
        return self.uses_reference or (self.alpha > 0 and self.retain_loss == "kl")

    def unlearn(self, model: nn.Module, task: TextTask) -> nn.Module:
        lr = self.lr if self.lr is not None else task.recipe.lr
        steps = task.forget.steps(self.batch_size)
        model, optimizer, schedule = adamw(task.fabric, model, lr, self.weight_decay, self.epochs, steps,
                                           self.warmup_epochs, self.parameters(model))
        reference = task.reference() if self.needs_reference() else None
        self.prepare(model, reference, task)
        model.train()
        for _ in range(self.epochs):
            for forget, retain in task.pairs(self.batch_size):
                with task.fabric.autocast():
                    loss = self.loss(model, reference, forget, retain, task)
                step(task.fabric, model, optimizer, schedule, loss)
            self.end_epoch(model, reference, task)
        model.eval()
        return model

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
