"""PDU: primal-dual unlearning (Entesari et al., "Constrained Entropic Unlearning: A Primal-Dual Framework for
LLMs", arXiv 2506.05314).

As OpenUnlearning's `PDU` (src/trainer/unlearn/pdu.py, configs/trainer/PDU.yaml): L = γ·L_forget + λ·(L_retain − ε),
L_forget the logit-margin flattening term (`losses.logit_margin`), L_retain GradDiff's (NLL by default), λ the dual
variable of the constraint L_retain ≤ ε, starting at α. With `primal_dual` on, λ ← max(0, λ + η·(L_retain − ε))
after every step (`dual_update_upon: step`, with that step's retain loss) or at every epoch's end (`epoch`, with the
mean retain loss over a fresh pass of drawn retain batches, drawn from the method's stream as the reference's pass
draws from the global RNG), once `dual_warmup_epochs` epochs are done (5, PDU.yaml's).

α, η and ε come from a published setting, the `variant` (where the YAML leaves them null):
- `openunlearning` (the default): configs/trainer/PDU.yaml's γ = α = 1, η = 1; ε, which PDU.yaml leaves mandatory
  (`???`), from community/methods/PDU/run.sh's TOFU runs: 0.3.
- `authors`: the whole of that run.sh's TOFU setting (Llama-3.2-1B, 3B, 8B, gemma-7b): α ("pref") 100, η 5, ε 0.3.
  Its MUSE runs (Llama-2-7b) take α 50, η 1, 3 dual warm-up epochs and ε 1.5 (News) or 0.1 (Books): set those as
  options.
- `unlearnbench`: this project's former default, α = η = 1 and ε twice M_o's own retain loss (the token-mean NLL over
  the retain set, measured before the first step): the README's advice to choose ε "larger than the retain loss of
  the starting model" made a rule, so that one ε fits a model of any loss scale (the CPU model's, a 7B model's).

Where this differs from the reference: λ is updated from the **global** batch's retain loss, the same on every rank
(the reference updates a Python float per rank from that rank's micro-batch, so that λ drifts apart across GPUs),
once per micro-batch as the reference's `compute_loss` does.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, POSITIVE, Range
from unlearnbench.runtime import interrupt
from unlearnbench.tasks.text.methods.base import UNITS, ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.encoding import IGNORE
from unlearnbench.tasks.text.model.train import forward, global_mean

UPDATES = ("step", "epoch")
TWICE_ORIGINAL = "twice M_o's retain loss"  # the `unlearnbench` variant's ε: measured on M_o when the method starts
VARIANTS: dict[str, dict[str, Any]] = {
    "openunlearning": {"alpha": 1.0, "dual_step_size": 1.0, "retain_loss_eps": 0.3},  # PDU.yaml; ε from run.sh
    "authors": {"alpha": 100.0, "dual_step_size": 5.0, "retain_loss_eps": 0.3},  # community/methods/PDU/run.sh
    "unlearnbench": {"alpha": 1.0, "dual_step_size": 1.0, "retain_loss_eps": TWICE_ORIGINAL},
}


class PDU(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"retain_loss_eps": POSITIVE, "dual_step_size": AT_LEAST_0,
                                          "dual_update_upon": Range(choices=UPDATES),
                                          "dual_warmup_epochs": AT_LEAST_0, "variant": Range(choices=tuple(VARIANTS))}
    variants = VARIANTS

    def __init__(self, name: str, variant: str = "openunlearning", retain_loss_eps: float | None = None,
                 primal_dual: bool = True, dual_step_size: float | None = None, dual_update_upon: str = "step",
                 dual_warmup_epochs: int = 5, alpha: float | None = None, **options) -> None:
        chosen = self.with_variant(variant, {"alpha": alpha, "dual_step_size": dual_step_size,
                                             "retain_loss_eps": retain_loss_eps})
        super().__init__(name, alpha=chosen["alpha"], **options)
        eps = chosen["retain_loss_eps"]
        self.variant, self.retain_loss_eps = variant, None if eps == TWICE_ORIGINAL else eps  # None: measured
        self.primal_dual, self.dual_step_size = primal_dual, chosen["dual_step_size"]
        self.dual_update_upon, self.dual_warmup_epochs = dual_update_upon, dual_warmup_epochs

    def forget_count(self, forget: dict[str, Tensor]) -> Tensor:
        return (forget["labels"] != IGNORE).sum()

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        return losses.logit_margin(forward(model, forget), forget["labels"])

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        self.dual, self.updating, self.epoch = float(self.alpha), self.dual_warmup_epochs == 0, 0
        self.eps = self.retain_loss_eps if self.retain_loss_eps is not None else 2 * self.starting_retain_loss(
            model, task)

    @torch.no_grad()
    def starting_retain_loss(self, model: nn.Module, task: TextTask) -> float:
        """M_o's token-mean NLL over the whole retain set (every rank computes it alike)."""
        total = count = 0.0
        for start in interrupt.checked(range(0, len(task.retain), self.batch_size)):
            batch = task.retain.rows(torch.arange(start, min(start + self.batch_size, len(task.retain))))
            summed, tokens = losses.sequence_nll(forward(model, batch), batch["labels"])
            total, count = total + float(summed.sum()), count + float(tokens.sum())
        return total / max(count, 1.0)

    def loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
             retain: dict[str, Tensor], task: TextTask) -> Tensor:
        """γ·L_forget + λ·(L_retain − ε), each term this rank's share of its global mean; then, past the warm-up,
        the step's dual update from the global retain loss."""
        fabric = task.fabric
        forget_term = global_mean(fabric, self.forget_loss(model, reference, forget, task), self.forget_count(forget))
        retain_share = global_mean(fabric, self.retain_term(model, reference, retain),
                                   UNITS[self.retain_unit](retain))
        loss = self.gamma * forget_term + self.dual * (retain_share - self.eps / fabric.world_size)
        if self.primal_dual and self.updating and self.dual_update_upon == "step":
            self.update(self.global_value(fabric, retain_share))
        return loss

    @staticmethod
    def global_value(fabric, share: Tensor) -> float:
        """The global batch's mean from this rank's share of it (`global_mean`'s shares sum to world size × it)."""
        share = share.detach().float()
        if fabric.world_size > 1:
            share = fabric.all_reduce(share.clone(), reduce_op="sum") / fabric.world_size
        return float(share)

    def update(self, retain_loss: float) -> None:
        self.dual = max(0.0, self.dual + self.dual_step_size * (retain_loss - self.eps))

    def end_epoch(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        """The reference's callback: past `dual_warmup_epochs` epochs, updates are on; in `epoch` mode, λ moves with
        the mean retain loss over a fresh pass of drawn retain batches, in evaluation mode."""
        self.epoch += 1
        if not self.primal_dual or self.epoch < self.dual_warmup_epochs:
            return
        self.updating = True
        if self.dual_update_upon == "epoch":
            model.eval()
            with torch.no_grad():
                shares = [self.global_value(task.fabric, global_mean(task.fabric, self.retain_term(
                    model, reference, retain), UNITS[self.retain_unit](retain)))
                          for _, retain in task.pairs(self.batch_size)]
            model.train()
            self.update(sum(shares) / len(shares))
