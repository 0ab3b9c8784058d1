"""WGA: weighted gradient ascent (Wang et al., "Rethinking LLM Unlearning Objectives: A Gradient Perspective and Go
Beyond", ICLR 2025, arXiv 2502.19301).

As OpenUnlearning's `WGA` (src/trainer/unlearn/wga.py, `compute_wga_loss` in src/trainer/utils.py,
configs/trainer/WGA.yaml): gradient ascent on each forget answer token weighted by its own probability,
L_forget = −mean over the batch's answer tokens of p_t^β·ℓ_t (ℓ_t the token's NLL, p_t = exp(−ℓ_t) detached), so a
token the model already finds unlikely is pushed little; L = γ·L_forget + α·L_retain with β = γ = α = 1 and an NLL
retain term. Epochs: 10, what the reference runs (its experiment's `num_train_epochs: 10` overrides WGA.yaml's 5).
The reference builds a frozen reference model it never uses; none is built here.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward


class WGA(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta": AT_LEAST_0}

    def __init__(self, name: str, beta: float = 1.0, **options) -> None:
        super().__init__(name, **options)
        self.beta = beta

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.weighted_ascent(forward(model, forget), forget["labels"], lambda p: p ** self.beta)
