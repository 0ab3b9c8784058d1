"""Margin: how far, on average, a model's logit for the true class stands above its largest other logit.

A model that still knows the forget set keeps large margins there; one that never saw it (the retrained model) has
small or negative ones. So the best value is the retrained model's, as for accuracy.
"""

from __future__ import annotations

import torch

from unlearnbench.core.catalogue import RETRAINED, Metric
from unlearnbench.tasks.image.metrics.added import SplitMetric


class Margin(SplitMetric):
    # Declared once, here: the name its records carry, the report's label, its best value, and its headline column.
    declaration = Metric("margin", "margin", ideal=RETRAINED, headline=("forget_train",))

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> float:
        if not len(labels):
            return float("nan")  # an empty split: no value
        true = logits.gather(1, labels[:, None]).squeeze(1)
        others = logits.scatter(1, labels[:, None], float("-inf")).amax(1)
        return float((true - others).mean())
