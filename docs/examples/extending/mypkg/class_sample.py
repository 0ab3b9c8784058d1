"""Forget a random part of one class: the rest of the class stays in the retain set.

The forget set D_f is a random `fraction` of the target class's training samples, drawn with the forget-set seed
(`seeds.forget`, by default the unlearning seed); D_r is every other training sample. D'_f is the class's test
samples, D'_r the other classes' test samples.
"""

from __future__ import annotations

import math

import torch

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.data.base import ImageData
from unlearnbench.tasks.image.data.scenarios import Scenario, Splits, by_mask, find_name, where


class ClassSample(Scenario):
    targeted = False  # D_f depends on the seed, so no method gives one model for every unlearning seed

    def __init__(self, name: str, targets: list | None = None, batch_size: int = 64, fraction: float = 0.5) -> None:
        super().__init__(name, targets, batch_size)
        if not 0 < fraction < 1:
            raise UserError(f"scenario {name}: scenario.fraction={fraction} is not valid; valid: in (0, 1)")
        self.fraction = fraction

    def check(self, target: object, data: ImageData) -> str:
        """The class's name as the dataset spells it, or one line listing the valid names."""
        return data.classes[find_name(target, data.classes, "class", data.name)]

    def divide(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        label = data.classes.index(target)
        members = where(data.train_labels == label)
        drawn = torch.randperm(len(members), generator=generator)[: math.ceil(self.fraction * len(members))]
        forget = torch.zeros_like(data.train_labels, dtype=torch.bool)
        forget[members[drawn.to(members.device)]] = True
        return by_mask(data, forget, data.test_labels == label)
