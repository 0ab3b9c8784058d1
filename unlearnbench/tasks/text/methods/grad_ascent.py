"""GradAscent: maximise the NLL of the forget answers, with no retain term.

As OpenUnlearning's `GradAscent` (src/trainer/unlearn/grad_ascent.py): L = −(token-mean NLL on the forget batch).
Its config keeps the fine-tuning defaults (configs/trainer/GradAscent.yaml): 10 epochs, batch 32, weight decay 0.01,
one warm-up epoch; the learning rate is the fine-tuning recipe's (`lr: null`; OpenUnlearning's 1e-5 for both).
"""

from __future__ import annotations

from torch import Tensor, nn

from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model.losses import token_mean_nll
from unlearnbench.tasks.text.model.train import forward


class GradAscent(ForgetRetainMethod):
    def __init__(self, name: str, epochs: int = 10, lr: float | None = None, batch_size: int = 32,
                 weight_decay: float = 0.01, warmup_epochs: float = 1.0) -> None:
        super().__init__(name, epochs, lr, batch_size, weight_decay, warmup_epochs, gamma=1.0, alpha=0.0)

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return -token_mean_nll(forward(model, forget), forget["labels"])
