"""The losses of the text task's unlearning methods, on logits and labels, one function per formula.

The methods (GradAscent, GradDiff, NPO, SimNPO, IdkDPO, RMU, UNDIAL, WGA, SatImp, CE-U, PDU, AltPO) combine these as
OpenUnlearning's trainers do (locuslab/open-unlearning `src/trainer/unlearn/`, `src/trainer/utils.py`):
L = γ·L_forget + α·L_retain. Logits are (B, T, V) for ids (B, T); position t predicts token t + 1, so labels are
shifted by one, and IGNORE labels (the prompt, the padding) carry no loss unless a formula says otherwise.

One decision differs from the reference: in UNDIAL, a position whose label is IGNORE gets no logit shift (its
target is the teacher's own distribution), where OpenUnlearning's one-hot of −100 shifts vocabulary row V − 100.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.tasks.text.model.encoding import IGNORE


def shifted(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Logits (in float32) at the positions that predict a next token, that token's label, and whether it counts."""
    logits, labels = logits[:, :-1].float(), labels[:, 1:]
    return logits, labels, labels != IGNORE


def sequence_nll(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per sequence, the summed NLL of its labelled tokens and their count."""
    logits, labels, labelled = shifted(logits, labels)
    nll = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    return (nll * labelled).sum(1), labelled.sum(1)


def token_mean_nll(logits: Tensor, labels: Tensor) -> Tensor:
    """The NLL averaged over every labelled token of the batch: Hugging Face's causal-LM loss, the fine-tuning loss,
    minus GradAscent's and GradDiff's forget term, and their NLL retain term."""
    total, count = sequence_nll(logits, labels)
    return total.sum() / count.sum().clamp(min=1)


def kl_to_reference(logits: Tensor, reference_logits: Tensor) -> Tensor:
    """GradDiff's KL retain term: KL(p_ref ‖ p_θ) averaged over every position of the batch, prompt and padding
    included, as OpenUnlearning's `compute_kl_divergence` does."""
    logp = torch.log_softmax(logits.float(), -1).flatten(0, 1)
    logp_ref = torch.log_softmax(reference_logits.float(), -1).flatten(0, 1)
    return F.kl_div(logp, logp_ref, reduction="batchmean", log_target=True)


def npo(nll: Tensor, reference_nll: Tensor, beta: float) -> Tensor:
    """NPO's forget term (Zhang et al. 2024): −(2/β)·mean log σ(−β·r), r = log p_θ − log p_ref = NLL_ref − NLL_θ,
    from per-sequence summed NLLs."""
    return -(2 / beta) * F.logsigmoid(-beta * (reference_nll - nll)).mean()


def dpo(nll_preferred: Tensor, reference_nll_preferred: Tensor, nll_rejected: Tensor,
        reference_nll_rejected: Tensor, beta: float) -> Tensor:
    """IdkDPO's forget term (Rafailov et al. 2023, as OpenUnlearning): −(2/β)·mean log σ(β(r_w − r_l)), with r the
    log-ratio to the reference on the preferred ("I don't know") and the rejected (true) answers."""
    preferred = reference_nll_preferred - nll_preferred
    rejected = reference_nll_rejected - nll_rejected
    return -(2 / beta) * F.logsigmoid(beta * (preferred - rejected)).mean()


def simnpo(nll: Tensor, tokens: Tensor, beta: float, delta: float) -> Tensor:
    """SimNPO's forget term (Fan et al. 2024): −(2/β)·mean log σ(β(L̄_θ − δ)), L̄ the length-normalised NLL; no
    reference model."""
    return -(2 / beta) * F.logsigmoid(beta * (nll / tokens.clamp(min=1) - delta)).mean()


def activation_distance(hidden: Tensor, target: Tensor, labels: Tensor) -> Tensor:
    """RMU's term (Li et al. 2024, as OpenUnlearning): per sequence, the mean over answer tokens of mean_d
    (h − target)², then the mean over the batch. `hidden` (B, T, d) is the layer's output at the input positions;
    answer tokens are those whose (unshifted) label is not IGNORE."""
    answer = (labels != IGNORE).float()
    per_token = (hidden.float() - target.float()).square().mean(-1)
    return ((per_token * answer).sum(1) / answer.sum(1).clamp(min=1)).mean()


def undial(logits: Tensor, reference_logits: Tensor, labels: Tensor, beta: float) -> Tensor:
    """UNDIAL's forget term (Dong et al. 2024): cross-entropy from q = softmax(z_ref − β·onehot(next token)) to the
    model's distribution, averaged over every position (module docstring for the IGNORE positions)."""
    logits, labels, labelled = shifted(logits, labels)
    shift = F.one_hot(labels.clamp(min=0), logits.shape[-1]).float() * labelled.unsqueeze(-1)
    target = torch.softmax(reference_logits[:, :-1].float() - beta * shift, -1)
    return -(target * torch.log_softmax(logits, -1)).sum(-1).mean()


def token_nll(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per next-token position, ℓ_t = −log p_θ(y_t | ·) (0 where unlabelled), and whether it is labelled."""
    logits, labels, labelled = shifted(logits, labels)
    nll = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    return nll * labelled, labelled


def weighted_ascent(logits: Tensor, labels: Tensor, weight) -> Tensor:
    """−mean over the batch's labelled tokens of w_t·ℓ_t, w_t = weight(p_t) with p_t = exp(−ℓ_t) detached: the
    forget term of WGA and SatImp (OpenUnlearning's `compute_wga_loss`, `compute_satimp_loss`)."""
    nll, labelled = token_nll(logits, labels)
    probability = torch.exp(-nll.detach())
    return -(weight(probability) * nll * labelled).sum() / labelled.sum().clamp(min=1)


def without_first_answer_tokens(labels: Tensor, count: int) -> Tensor:
    """The labels with each sequence's first `count` labelled tokens set to IGNORE (CE-U's footnote trick)."""
    labelled = labels != IGNORE
    return labels.masked_fill(labelled & (labelled.cumsum(1) <= count), IGNORE)


def cross_entropy_unlearning(logits: Tensor, labels: Tensor) -> Tensor:
    """CE-U's loss (arXiv 2503.01224, OpenUnlearning's `cross_entropy_unlearning_loss`): at each labelled position,
    the cross-entropy from q = softmax of the detached logits with the true token's set to −∞ to the model's
    distribution, −Σ_v q_v log p_v, averaged over the labelled positions of the batch."""
    logits, labels, labelled = shifted(logits, labels)
    target_logits = logits.detach().scatter(-1, labels.clamp(min=0).unsqueeze(-1), float("-inf"))
    per_position = -(torch.softmax(target_logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    return (per_position * labelled).sum() / labelled.sum().clamp(min=1)


def logit_margin(logits: Tensor, labels: Tensor) -> Tensor:
    """PDU's forget term (logit-margin flattening, OpenUnlearning's `PDU.compute_loss`): at every position whose own
    token is an answer token (the labels and logits unshifted, as the reference masks them since its #147),
    (max_v z_v − mean_v z_v)², averaged over those positions of the batch."""
    logits, answer = logits.float(), labels != IGNORE
    margin = (logits.max(-1).values - logits.mean(-1)).square()
    return (margin * answer).sum() / answer.sum().clamp(min=1)
