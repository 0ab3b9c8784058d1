"""SatImp: ascent weighted by saturation and importance (Yang et al., "Exploring Criteria of Loss Reweighting to
Enhance LLM Unlearning", ICML 2025, arXiv 2505.11953).

As OpenUnlearning's `SatImp` (src/trainer/unlearn/satimp.py, `compute_satimp_loss` in src/trainer/utils.py):
L_forget = −mean over the batch's answer tokens of p_t^β₁·(1 − p_t)^β₂·ℓ_t (p_t = exp(−ℓ_t) detached), β₁ = 5,
β₂ = 1; L = γ·L_forget + α·L_retain with an NLL retain term. The reference publishes two settings of the weights,
the two `variant`s here (γ and α null in the YAML take the variant's):
- `openunlearning` (the default): configs/trainer/SatImp.yaml's γ = 0.1, α = 1, what OpenUnlearning runs with
  `trainer=SatImp`;
- `authors`: the method's authors' γ = 1, α = 0.1 (community/methods/SatImp/README.md: "we set gamma=1.0 and
  alpha=0.1", a forget-to-retain loss ratio of 10, the ratio their paper reports; also the class's own defaults),
  this project's default before it followed the YAML.
Epochs: 10, what the reference runs (its TOFU experiment overrides SatImp.yaml's 5). The reference builds a frozen
reference model it never uses; none is built here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward

VARIANTS: dict[str, dict[str, Any]] = {
    "openunlearning": {"gamma": 0.1, "alpha": 1.0},  # configs/trainer/SatImp.yaml
    "authors": {"gamma": 1.0, "alpha": 0.1},  # community/methods/SatImp/README.md
}


class SatImp(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta1": AT_LEAST_0, "beta2": AT_LEAST_0,
                                          "variant": Range(choices=tuple(VARIANTS))}
    variants = VARIANTS

    def __init__(self, name: str, beta1: float = 5.0, beta2: float = 1.0, variant: str = "openunlearning",
                 gamma: float | None = None, alpha: float | None = None, **options) -> None:
        super().__init__(name, **self.with_variant(variant, {"gamma": gamma, "alpha": alpha} | options))
        self.beta1, self.beta2, self.variant = beta1, beta2, variant

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.weighted_ascent(forward(model, forget), forget["labels"],
                                      lambda p: p ** self.beta1 * (1 - p) ** self.beta2)
