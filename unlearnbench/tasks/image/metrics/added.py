"""A metric added to the image task from outside its catalogue: the user's own, named in `evaluation.metrics`
(`+metric=NAME`, docs/extending.md). It declares itself (`declaration`: name, label, ideal, roles) beside its
function, as the task's own metrics do in `catalogue.py`, and the job scores it for every model on every split."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor

from unlearnbench.core.catalogue import Catalogue, Metric


class SplitMetric(ABC):
    """One number per model and split, from the model's logits on the split's samples and their labels."""

    task: ClassVar[str] = "image"
    declaration: ClassVar[Metric]

    @abstractmethod
    def __call__(self, logits: Tensor, labels: Tensor) -> float:
        """The value on one split (float32 logits, N × classes, CPU); NaN where it cannot be computed."""


def added_catalogue(metrics: list[SplitMetric]) -> Catalogue:
    """The declarations of the added metrics, for the job's catalogue."""
    return Catalogue(tuple(metric.declaration for metric in metrics))
