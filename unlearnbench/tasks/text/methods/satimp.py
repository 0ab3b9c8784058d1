"""SatImp: ascent weighted by saturation and importance (Yang et al., "Exploring Criteria of Loss Reweighting to
Enhance LLM Unlearning", ICML 2025, arXiv 2505.11953).

As OpenUnlearning's `SatImp` (src/trainer/unlearn/satimp.py, `compute_satimp_loss` in src/trainer/utils.py):
L_forget = −mean over the batch's answer tokens of p_t^β₁·(1 − p_t)^β₂·ℓ_t (p_t = exp(−ℓ_t) detached), β₁ = 5,
β₂ = 1; L = γ·L_forget + α·L_retain with an NLL retain term. The reference has two contradictory defaults for the
weights: configs/trainer/SatImp.yaml sets γ = 0.1, α = 1, while the class and the authors' README
(community/methods/SatImp/README.md: "we set gamma=1.0 and alpha=0.1", a forget:retain loss ratio of 10) set
γ = 1, α = 0.1. This follows the authors (γ = 1, α = 0.1): the YAML's values invert the ratio their paper reports.
Epochs: 10, what the reference runs (its experiment overrides SatImp.yaml's 5). The reference builds a frozen
reference model it never uses; none is built here.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.tasks.text import losses
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.train import forward


class SatImp(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta1": AT_LEAST_0, "beta2": AT_LEAST_0}

    def __init__(self, name: str, beta1: float = 5.0, beta2: float = 1.0, **options) -> None:
        super().__init__(name, **options)
        self.beta1, self.beta2 = beta1, beta2

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.weighted_ascent(forward(model, forget), forget["labels"],
                                      lambda p: p ** self.beta1 * (1 - p) ** self.beta2)
