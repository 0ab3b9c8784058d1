"""Forgetting scenarios: what D_f, D_r, D'_f and D'_r are for one target (docs/metrics.md)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from unlearnbench.runtime.errors import UserError, invalid
from unlearnbench.tasks.image.data.base import ImageData, Subset, full_pool


@dataclass(frozen=True)
class Splits:
    forget_train: Subset  # D_f
    retain_train: Subset  # D_r
    forget_test: Subset  # D'_f
    retain_test: Subset  # D'_r

    def items(self) -> list[tuple[str, Subset]]:
        return [("forget_train", self.forget_train), ("retain_train", self.retain_train),
                ("forget_test", self.forget_test), ("retain_test", self.retain_test)]


def normalise_name(name: object) -> str:
    """Class names match case-insensitively, with spaces, hyphens and underscores treated alike."""
    return str(name).strip().lower().replace(" ", "_").replace("-", "_")


def find_name(target: object, names: Sequence[str], what: str, dataset: str) -> int:
    index = {normalise_name(n): i for i, n in enumerate(names)}
    key = normalise_name(target)
    if key not in index:
        raise UserError(f"unknown {what} '{target}' for dataset {dataset}; valid: {', '.join(names)}")
    return index[key]


class Scenario(ABC):
    """One scenario component: resolves its targets against a dataset and splits the data for each target."""

    targeted = True  # D_f is a class or a sub-class; deterministic methods are constant across unlearning seeds

    def __init__(self, name: str, targets: Sequence | None = None, batch_size: int = 64) -> None:
        self.name = name
        self.requested = None if targets is None else list(targets)
        self.batch_size = batch_size

    def targets(self, data: ImageData) -> list[str]:
        """The targets as strings (as they appear in results), checked against the dataset."""
        if self.requested is not None and not self.requested:
            raise UserError(f"scenario {self.name}: scenario.targets is empty; name at least one target, or set it "
                            f"to null for the dataset's standard targets")
        targets = self.requested if self.requested is not None else data.standard_targets.get(self.name)
        if not targets:
            raise UserError(f"dataset {data.name} has no standard targets for scenario {self.name}; "
                            f"name them with scenario.targets=[...]")
        return [self.check(t, data) for t in targets]

    @abstractmethod
    def check(self, target: object, data: ImageData) -> str:
        """The canonical string of a valid target, or a `UserError` that lists the valid ones."""

    def split(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        """The four splits for `target`; `generator` (from the unlearning seed) draws any random choice.

        None may be empty: an empty split would leave a method nothing to forget or train on, or a metric nothing
        to score, and the job would record a row of missing values instead of saying why.
        """
        splits = self.divide(data, target, generator)
        for split, subset in splits.items():
            if len(subset) == 0:
                raise UserError(f"scenario {self.name}, target {target}: {EMPTY[split]}; choose another target")
        return splits

    @abstractmethod
    def divide(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        """The four splits for `target`, unchecked."""


EMPTY = {
    "forget_train": "D_f (forget_train) is empty: the target has no training sample, so there is nothing to forget",
    "retain_train": "D_r (retain_train) is empty: every training sample is forgotten, so there is nothing to retrain "
                    "on",
    "forget_test": "D'_f (forget_test) is empty: the target has no test sample, so its test accuracy cannot be "
                   "measured",
    "retain_test": "D'_r (retain_test) is empty: no test sample lies outside the target, so the retained test "
                   "accuracy cannot be measured",
}


def where(mask: Tensor) -> Tensor:
    return torch.nonzero(mask, as_tuple=False).flatten()


def by_mask(data: ImageData, train_forget: Tensor, test_forget: Tensor) -> Splits:
    return Splits(
        Subset(data, "train", where(train_forget)), Subset(data, "train", where(~train_forget)),
        Subset(data, "test", where(test_forget)), Subset(data, "test", where(~test_forget)),
    )


class FullClass(Scenario):
    """Forget every sample of one class."""

    def check(self, target: object, data: ImageData) -> str:
        return data.classes[find_name(target, data.classes, "class", data.name)]

    def divide(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        c = data.classes.index(target)
        return by_mask(data, data.train_labels == c, data.test_labels == c)


class SubClass(Scenario):
    """Forget one fine class (e.g. 'rocket') while the model keeps predicting its super-class ('vehicles_2')."""

    def check(self, target: object, data: ImageData) -> str:
        if data.group_names is None:
            raise UserError(f"scenario {self.name} needs a dataset with sub-classes (cifar20); "
                            f"dataset {data.name} has none")
        return data.group_names[find_name(target, data.group_names, "sub-class", data.name)]

    def divide(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        g = data.group_names.index(target)
        return by_mask(data, data.train_groups == g, data.test_groups == g)


class RandomSample(Scenario):
    """Forget ceil(c·|D|) training samples drawn with the unlearning seed; D'_f = D_f and D'_r = the test set.

    The draw is a prefix of one permutation, so the forget set of a smaller fraction lies inside a larger one's.
    """

    targeted = False

    def check(self, target: object, data: ImageData) -> str:
        try:
            fraction = float(target)
        except (TypeError, ValueError):
            raise UserError(f"scenario {self.name}: target '{target}' is not a fraction; "
                            f"give fractions in (0, 1), e.g. scenario.targets=[0.1]") from None
        if not 0 < fraction <= 1:  # (1 itself is told below: it leaves no retained sample)
            raise invalid("targets", f"scenario {self.name}", "fractions in (0, 1)", target)
        n = data.train_labels.numel()
        if forget_count(str(fraction), n) >= n:
            raise UserError(f"scenario {self.name}: random-sample fraction {fraction} leaves no retained sample "
                            f"(it forgets all {n} training samples); valid: (0, 1)")
        return str(fraction)

    def divide(self, data: ImageData, target: str, generator: torch.Generator) -> Splits:
        n = data.train_labels.numel()
        order = torch.randperm(n, generator=generator).to(data.device)
        forget = torch.zeros(n, dtype=torch.bool, device=data.device)
        forget[order[: forget_count(target, n)]] = True
        forget_train = Subset(data, "train", where(forget))
        return Splits(forget_train, Subset(data, "train", where(~forget)), forget_train, full_pool(data, "test"))


def forget_count(fraction: str, n: int) -> int:
    """ceil(c·n), exact: 0.07 · 100 is 7, where the floating-point product (7.000000000000001) would give 8."""
    return math.ceil(Fraction(fraction) * n)
