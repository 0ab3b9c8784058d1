"""Teacher-forced scores the text task's benchmarks share: `answer_scores` batch by batch, and Min-K%'s k."""

from __future__ import annotations

import torch
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.runtime import interrupt
from unlearnbench.tasks.text.model.causal_lm import answer_scores
from unlearnbench.tasks.text.model.train import Items

MIA_K = 0.4  # Min-K% and Min-K%++'s k (OpenUnlearning's mia_min_k.yaml)


def batch_scores(fabric: Fabric, model: nn.Module, items: Items, batch_size: int) -> list:
    """`answer_scores` of every batch of `items`, in order."""
    with fabric.autocast():
        return [answer_scores(model, items.rows(torch.arange(start, min(start + batch_size, len(items)))))
                for start in interrupt.checked(range(0, len(items), batch_size))]
