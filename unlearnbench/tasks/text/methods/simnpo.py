"""SimNPO (Fan et al. 2024, "Simplicity prevails: rethinking negative preference optimization for LLM
unlearning").

As OpenUnlearning's `SimNPO` (src/trainer/unlearn/simnpo.py, configs/trainer/SimNPO.yaml): no reference model;
L_forget = −(2/β)·mean log σ(β(L̄_θ − δ)) with L̄ the length-normalised NLL of each forget answer; β = 4.5, δ = 0,
γ = 0.125, α = 1 and an NLL retain term.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import POSITIVE, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward


class SimNPO(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta": POSITIVE}
    forget_unit = "rows"

    def __init__(self, name: str, beta: float = 4.5, delta: float = 0.0, **options) -> None:
        super().__init__(name, **options)
        self.beta, self.delta = beta, delta

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        nll, tokens = losses.sequence_nll(forward(model, forget), forget["labels"])
        return losses.simnpo(nll, tokens, self.beta, self.delta)
