"""The method interface: `unlearn(model, task)` turns a copy of M_o into M_u.

A method is one module with one class and one YAML in `conf/method/`; the YAML's keys are the constructor's
arguments. Methods declare the task they serve, whether they are deterministic given M_o (in targeted scenarios),
and which scenarios they serve.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.data.base import ImageData, Subset
from unlearnbench.data.scenarios import Scenario, Splits
from unlearnbench.data.transforms import Normalizer
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import Streams
from unlearnbench.runtime.train import Batches


@dataclass
class UnlearningTask:
    """Everything a method may use. Its random choices draw from `rng` (derived from the unlearning seed)."""

    fabric: Fabric
    data: ImageData
    splits: Splits
    scenario: Scenario
    target: str
    normalizer: Normalizer
    rng: Streams
    original: Callable[[], nn.Module]  # a fresh copy of M_o (e.g. a frozen teacher)
    random_model: Callable[[torch.Generator], nn.Module]  # a freshly initialised model of the same architecture
    retrained: nn.Module  # M_r, for the `retrain` baseline only
    retrained_cost: Cost

    def batches(self, subset: Subset, batch_size: int, shuffle: bool = True) -> Batches:
        """Unaugmented batches of `subset` (unlearning-time data is normalised only), shuffled with `rng`."""
        return Batches(self.fabric, subset, batch_size, self.normalizer, self.rng.torch if shuffle else None)


class Method(ABC):
    task: ClassVar[str] = "image_classification"
    deterministic: ClassVar[bool] = False  # same M_u for every unlearning seed, given M_o, in targeted scenarios

    def __init__(self, name: str) -> None:
        self.name = name

    def serves(self, scenario: Scenario) -> bool:
        return True

    @abstractmethod
    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        """Return M_u, starting from `model` (a copy of M_o that the method may change in place)."""

    def cost(self, measured: Cost, task: UnlearningTask) -> Cost:
        """The cost to report: what the monitor measured around `unlearn`, unless the method knows better."""
        return measured
