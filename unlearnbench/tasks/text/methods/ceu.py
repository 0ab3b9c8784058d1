"""CE-U: cross-entropy unlearning (Yang et al., arXiv 2503.01224; OpenUnlearning's PR #127).

As OpenUnlearning's `CEU` (src/trainer/unlearn/ceu.py, configs/trainer/CEU.yaml): each sequence's first
`ignore_first` answer tokens are left out (the paper's footnote), then at every other answer position the model's
distribution is pulled towards its own with the true token removed and the rest renormalised: the cross-entropy
from q = softmax(z̃), z̃ the detached logits with z̃_y = −∞, to softmax(z), averaged over the batch's scored
positions (a batch without one contributes 0, where the reference's mean of nothing is NaN); its gradient on the
logits is p − q, which drives p_y to 0. No retain term (γ = 1, α = 0: the reference
draws retain batches and never reads them), no reference model; epochs 10, the reference's unlearning experiment.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import answer_tokens, forward


class CEU(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"ignore_first": AT_LEAST_0}

    def __init__(self, name: str, epochs: int = 10, lr: float | None = None, batch_size: int = 32,
                 weight_decay: float = 0.01, warmup_epochs: float = 1.0, ignore_first: int = 1) -> None:
        super().__init__(name, epochs, lr, batch_size, weight_decay, warmup_epochs, gamma=1.0, alpha=0.0)
        self.ignore_first = ignore_first

    def scored(self, forget: dict[str, Tensor]) -> dict[str, Tensor]:
        return {**forget, "labels": losses.without_first_answer_tokens(forget["labels"], self.ignore_first)}

    def forget_count(self, forget: dict[str, Tensor]) -> Tensor:
        return answer_tokens(self.scored(forget))

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.cross_entropy_unlearning(forward(model, forget), self.scored(forget)["labels"])
