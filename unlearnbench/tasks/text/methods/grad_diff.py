"""GradDiff: gradient ascent on the forget set, descent on the retain set.

As OpenUnlearning's `GradDiff` (src/trainer/unlearn/grad_diff.py, configs/trainer/GradDiff.yaml): L = γ·(−token-mean
NLL on forget) + α·L_retain with γ = α = 1, L_retain the token-mean NLL on the drawn retain batch (`retain_loss:
nll`) or the KL divergence from the frozen M_o's next-token distribution at every position of it, prompt and padding
included, as the reference's `compute_kl_divergence` (`retain_loss: kl`).
"""

from __future__ import annotations

from torch import Tensor, nn

from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model.losses import token_mean_nll
from unlearnbench.tasks.text.model.train import forward


class GradDiff(ForgetRetainMethod):
    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return -token_mean_nll(forward(model, forget), forget["labels"])
