"""UNDIAL, unlearning via self-distillation with adjusted logits (Dong et al. 2024).

As OpenUnlearning's `UNDIAL` (src/trainer/unlearn/undial.py, configs/trainer/UNDIAL.yaml): the student is trained
towards the frozen M_o's distribution with the true next token's logit lowered by β, q = softmax(z_ref −
β·onehot(y)): L_forget = the mean over every position of CE(q, p_θ); β = 10, γ = 1, α = 0 (no retain term). One
deviation: where the label is IGNORE (prompt, padding) no logit is lowered; OpenUnlearning's one-hot of −100 lowers
vocabulary row V − 100 there.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from unlearnbench.core.config import POSITIVE, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward


class UNDIAL(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta": POSITIVE}
    forget_unit = "positions"
    uses_reference = True

    def __init__(self, name: str, beta: float = 10.0, **options) -> None:
        options.setdefault("alpha", 0.0)
        super().__init__(name, **options)
        self.beta = beta

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        with torch.no_grad():
            reference_logits = forward(reference, forget)
        return losses.undial(forward(model, forget), reference_logits, forget["labels"], self.beta)
