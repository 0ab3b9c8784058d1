"""Relearn time on the image task (`unlearnbench/core/relearn.py` holds the definition and the loop): R is D_f, or
`examples` of it drawn with the evaluation seed; a copy of each image classifier is fine-tuned on it with the
recipe's optimiser at a constant rate, in training mode, unaugmented, and scored on R (cross-entropy, accuracy).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.core.relearn import Measurement, Relearning, RelearnSettings
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.state import full_state_dict
from unlearnbench.runtime.train import descend, float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.evaluate import predict
from unlearnbench.tasks.image.models.store import ModelStore
from unlearnbench.tasks.image.train import Batches, recipe_optimizer


def relearn_subset(forget: Subset, examples: int | None, generator: torch.Generator) -> Subset:
    """R: all of D_f, or `examples` of it (all where D_f is not larger) drawn with `generator`, in D_f's order."""
    if len(forget) < 2:
        raise UserError(f"relearn time needs at least 2 forget examples to fine-tune on, D_f has {len(forget)}; "
                        f"set evaluation.relearn.enabled=false or forget more")
    if examples is None or examples >= len(forget):
        return forget
    chosen = torch.sort(torch.randperm(len(forget), generator=generator)[:examples]).values
    return forget.with_indices(forget.indices[chosen.to(forget.indices.device)])


def endless(batches: Batches) -> Iterator:
    """Batch after batch, a new epoch (a new permutation from the same stream) whenever one ends."""
    if len(batches) == 0:
        raise UserError(f"relearn time: {len(batches.subset)} relearn examples make no training batch on "
                        f"{batches.fabric.world_size} devices; raise evaluation.relearn.examples")
    while True:
        yield from batches


class ImageLearner:
    """A copy of an image classifier fine-tuned on R with the recipe's optimiser (SGD with momentum or AdamW, its
    weight decay) at a constant rate, in training mode, unaugmented."""

    def __init__(self, fabric: Fabric, model: nn.Module, subset: Subset, normalizer: Normalizer, recipe,
                 settings: RelearnSettings, generator: torch.Generator, eval_batch: int) -> None:
        self.fabric, self.subset, self.normalizer, self.eval_batch = fabric, subset, normalizer, eval_batch
        optimizer = recipe_optimizer(model, _with_lr(recipe, settings.lr))
        self.model, self.optimizer = fabric.setup(model, optimizer)
        self.batches = endless(Batches(fabric, subset, min(settings.batch_size, len(subset)), normalizer,
                                       generator))

    def step(self) -> None:
        self.model.train()
        inputs, labels = next(self.batches)
        loss = F.cross_entropy(float_logits(self.model(inputs)), labels)
        descend(self.fabric, self.optimizer, loss, model=self.model)

    def measure(self) -> Measurement:
        logits = predict(self.fabric, self.model, self.subset, self.eval_batch, self.normalizer).double()
        labels = self.subset.labels[self.subset.indices].cpu()
        return Measurement(float(F.cross_entropy(logits, labels)),
                           float((logits.argmax(1) == labels).double().mean()))


def _with_lr(recipe, lr: float):
    """The recipe's optimiser settings with the relearning rate."""
    return SimpleNamespace(optimizer=recipe.optimizer, lr=lr, momentum=recipe.momentum,
                           weight_decay=recipe.weight_decay)


class ImageRelearning(Relearning):
    """Relearn time for one target of an image job; R is D_f or a draw of it (`relearn_subset`)."""

    split = "forget_train"

    def __init__(self, fabric: Fabric, store: ModelStore, forget: Subset, normalizer: Normalizer, recipe,
                 settings: RelearnSettings, seed_eval: int, target: str, eval_batch: int) -> None:
        super().__init__(settings, seed_eval, target)
        self.fabric, self.store, self.normalizer, self.recipe, self.eval_batch = (fabric, store, normalizer, recipe,
                                                                                  eval_batch)
        self.subset = relearn_subset(forget, settings.examples, self.stream("relearn_set").torch)

    def learner(self, model: nn.Module) -> ImageLearner:
        copy = self.store.load(full_state_dict(self.fabric, model))
        return ImageLearner(self.fabric, copy, self.subset, self.normalizer, self.recipe, self.settings,
                            self.stream("relearn_order").torch, self.eval_batch)
