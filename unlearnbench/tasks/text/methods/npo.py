"""NPO, negative preference optimisation (Zhang et al. 2024, "Negative preference optimization").

As OpenUnlearning's `NPO` (src/trainer/unlearn/npo.py, configs/trainer/NPO.yaml): L_forget = −(2/β)·mean log σ(−β·r)
with r = log p_θ(y|x) − log p_ref(y|x) from per-sequence summed NLLs, θ_ref the frozen M_o; β = 0.1, γ = α = 1 and an
NLL retain term.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from unlearnbench.core.config import POSITIVE, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward


def nll_pair(model: nn.Module, reference: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Per-sequence summed NLL under the model and under θ_ref (no gradient through θ_ref)."""
    nll, _ = losses.sequence_nll(forward(model, batch), batch["labels"])
    with torch.no_grad():
        reference_nll, _ = losses.sequence_nll(forward(reference, batch), batch["labels"])
    return nll, reference_nll


class NPO(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta": POSITIVE}
    forget_unit = "rows"
    uses_reference = True

    def __init__(self, name: str, beta: float = 0.1, **options) -> None:
        super().__init__(name, **options)
        self.beta = beta

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.npo(*nll_pair(model, reference, forget), self.beta)
