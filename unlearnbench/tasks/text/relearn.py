"""Relearn time for the text task (unlearnbench/core/relearn.py holds the definition and the loop): copies of
M_o, M_r and every M_u fine-tuned on the forget records (or `examples` of them, drawn with the evaluation seed)
with the fine-tuning recipe's AdamW (its weight decay, gradients clipped at 1.0) at a constant rate, every copy on
the same batches. The loss is the fine-tuning loss, the token-mean NLL of the answers of R; the accuracy is the
next-token accuracy on those answer tokens (teacher-forced argmax), the text analogue of the image task's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import torch
from lightning_fabric import Fabric
from lightning_fabric.wrappers import is_wrapped
from torch import nn

from unlearnbench.core.relearn import Measurement, Relearning, RelearnSettings
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import global_seed
from unlearnbench.tasks.text.benchmarks.tofu import FORGET
from unlearnbench.tasks.text.model.losses import sequence_nll, shifted, token_mean_nll
from unlearnbench.tasks.text.model.train import Items, answer_tokens, forward, global_mean, set_up_adamw
from unlearnbench.tasks.text.model.train import step as update


def relearn_records(records: list[dict], examples: int | None, generator: torch.Generator) -> list[dict]:
    """R: every forget record, or `examples` of them (all where there are not more) drawn with `generator`, in their
    order."""
    if len(records) < 2:
        raise UserError(f"relearn time needs at least 2 forget records to fine-tune on, the forget set has "
                        f"{len(records)}; set evaluation.relearn.enabled=false")
    if examples is None or examples >= len(records):
        return list(records)
    chosen = sorted(torch.randperm(len(records), generator=generator)[:examples].tolist())
    return [records[i] for i in chosen]


class TextLearner:
    """A copy of a causal LM fine-tuned on R's answers, in training mode, with the fixed optimiser."""

    def __init__(self, fabric: Fabric, model: nn.Module, items: Items, settings: RelearnSettings,
                 weight_decay: float, generator: torch.Generator, eval_batch: int) -> None:
        self.fabric, self.items, self.eval_batch = fabric, items, eval_batch
        self.batch_size, self.generator = min(settings.batch_size, len(items)), generator
        self.model, self.optimizer = set_up_adamw(fabric, model, settings.lr, weight_decay)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)  # constant
        self.batches = self.endless()

    def endless(self) -> Iterator[dict[str, torch.Tensor]]:
        """Batch after batch, a new permutation from the same stream whenever an epoch ends."""
        while True:
            yield from self.items.batches(self.batch_size, self.generator)

    def step(self) -> None:
        self.model.train()
        batch = next(self.batches)
        loss = token_mean_nll(forward(self.model, batch), batch["labels"])
        update(self.fabric, self.model, self.optimizer, self.schedule,
               global_mean(self.fabric, loss, answer_tokens(batch)))

    @torch.no_grad()
    def measure(self) -> Measurement:
        """Token-mean NLL and next-token accuracy over every answer token of R (every rank scores all of R)."""
        self.model.eval()
        nll = tokens = correct = 0.0
        with self.fabric.autocast():
            for start in interrupt.checked(range(0, len(self.items), self.eval_batch)):
                batch = self.items.rows(torch.arange(start, min(start + self.eval_batch, len(self.items))))
                logits = forward(self.model, batch)
                total, count = sequence_nll(logits, batch["labels"])
                logits, labels, labelled = shifted(logits, batch["labels"])
                nll += float(total.double().sum())
                tokens += float(count.sum())
                correct += float(((logits.argmax(-1) == labels) & labelled).sum())
        return Measurement(nll / max(tokens, 1.0), correct / max(tokens, 1.0))


class TextRelearning(Relearning):
    """Relearn time for one target of a text job; R is the forget records or a draw of them (`relearn_records`).
    `fresh(model)` returns a plain, trainable copy of a model (adapters merged, fresh ones added where LoRA is on)."""

    split = FORGET

    def __init__(self, fabric: Fabric, items: Callable[[list[dict]], Items], forget: list[dict],
                 settings: RelearnSettings, weight_decay: float, seed_eval: int, target: str, eval_batch: int,
                 fresh: Callable[[nn.Module], nn.Module]) -> None:
        super().__init__(settings, seed_eval, target)
        self.fabric, self.weight_decay, self.eval_batch, self.fresh = fabric, weight_decay, eval_batch, fresh
        self.items = items(relearn_records(forget, settings.examples, self.stream("relearn_set").torch))

    def seeded(self) -> AbstractContextManager:
        """Dropout (in a model that has it) and fresh adapters draw from the global RNG: seeded per run."""
        return global_seed(self.stream("relearn_order").seed)

    def learner(self, model: nn.Module) -> TextLearner:
        return TextLearner(self.fabric, self.fresh(model), self.items, self.settings, self.weight_decay,
                           self.stream("relearn_order").torch, self.eval_batch)


def bare_copy(model: nn.Module) -> nn.Module:
    """A deep copy of the module a Fabric wrapper holds (or of `model` itself)."""
    return copy.deepcopy(model.module if is_wrapped(model) else model)
