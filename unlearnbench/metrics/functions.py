"""The metrics of spec/metrics.md, one function each, over logits computed once per (model, pool).

Everything is computed in float64 on the CPU from gathered logits, so a metric does not depend on the device count
or the precision the model ran in (beyond the logits themselves).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def probabilities(logits: Tensor) -> Tensor:
    return torch.softmax(logits.double(), dim=1)


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Per-sample accuracy: the fraction of samples whose argmax is the label."""
    return float((logits.argmax(1) == labels).double().mean()) if len(labels) else math.nan


def per_sample_loss(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.double(), labels, reduction="none")


def mean_loss(logits: Tensor, labels: Tensor) -> float:
    return float(per_sample_loss(logits, labels).mean()) if len(labels) else math.nan


def activation_distance(probs_r: Tensor, probs_u: Tensor) -> float:
    """sqrt(mean_x ‖M_r(x) − M_u(x)‖²) over softmax outputs; 0 is best, √2 the maximum."""
    if len(probs_r) == 0:
        return math.nan
    return math.sqrt(float(((probs_r - probs_u) ** 2).sum(1).mean()))


def xlog2(p: Tensor, q: Tensor) -> Tensor:
    """p · log2(p/q) with 0 · log 0 = 0."""
    safe = torch.where(p > 0, p / q, torch.ones_like(p))
    return torch.where(p > 0, p * torch.log2(safe), torch.zeros_like(p))


def js_divergence(probs_r: Tensor, probs_u: Tensor) -> float:
    """Mean Jensen–Shannon divergence in bits, in [0, 1]: 0 for identical outputs, 1 for disjoint one-hot ones."""
    if len(probs_r) == 0:
        return math.nan
    mean = (probs_r + probs_u) / 2
    per_sample = (xlog2(probs_r, mean).sum(1) + xlog2(probs_u, mean).sum(1)) / 2
    return float(per_sample.mean())


def completeness(logits_r: Tensor, logits_u: Tensor) -> float:
    """Fraction of samples on which M_u predicts what M_r predicts; 1 is best."""
    return float((logits_r.argmax(1) == logits_u.argmax(1)).double().mean()) if len(logits_r) else math.nan


def layer_distance(params_u: dict[str, Tensor], params_r: dict[str, Tensor]) -> float:
    """sqrt(Σ over learnable parameters (w_u − w_r)²), in float64."""
    total = sum(float(((params_u[name].double() - params_r[name].double()) ** 2).sum()) for name in params_r)
    return math.sqrt(total)


def entropy(probs: Tensor) -> Tensor:
    """Per-sample entropy −Σ p log p (natural log), with 0 · log 0 = 0."""
    return -torch.where(probs > 0, probs * torch.log(probs.clamp_min(1e-300)), torch.zeros_like(probs)).sum(1)


def entropy_mia(member_entropy: Tensor, nonmember_entropy: Tensor, forget_entropy: Tensor, max_members: int,
                rng: np.random.Generator) -> float:
    """Fraction of D_f that a logistic-regression attacker on output entropy calls "member".

    The attacker learns members = D_r (at most `max_members`, drawn with `rng`) against non-members = the test set,
    with balanced class weights.
    """
    from sklearn.linear_model import LogisticRegression

    if len(forget_entropy) == 0 or len(member_entropy) == 0 or len(nonmember_entropy) == 0:
        return math.nan
    members = member_entropy.numpy()
    if len(members) > max_members:
        members = members[np.sort(rng.choice(len(members), max_members, replace=False))]
    features = np.concatenate([members, nonmember_entropy.numpy()])[:, None]
    targets = np.concatenate([np.ones(len(members)), np.zeros(len(nonmember_entropy))])
    attacker = LogisticRegression(class_weight="balanced").fit(features, targets)
    return float(attacker.predict(forget_entropy.numpy()[:, None]).mean())


def loss_mia(forget_loss: Tensor, test_loss: Tensor, folds: int, rng: np.random.Generator) -> float:
    """Cross-validated accuracy of a logistic-regression attacker telling D_f from test samples by their loss.

    The larger side is subsampled (with `rng`) to the size of the smaller; 0.5 means the attacker cannot tell.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    size = min(len(forget_loss), len(test_loss))
    if size < folds:
        return math.nan
    forget = forget_loss.numpy()[np.sort(rng.choice(len(forget_loss), size, replace=False))]
    test = test_loss.numpy()[np.sort(rng.choice(len(test_loss), size, replace=False))]
    features = np.concatenate([forget, test])[:, None]
    targets = np.concatenate([np.ones(size), np.zeros(size)])
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(rng.integers(2**31)))
    return float(cross_val_score(LogisticRegression(), features, targets, cv=splitter).mean())


def tug_of_war(delta_acc_retain_train: float, delta_acc_forget_train: float, delta_acc_retain_test: float) -> float:
    """(1 − |Δacc D_r|)(1 − |Δacc D_f|)(1 − |Δacc D'_r|): 1 when M_u matches M_r on all three."""
    return (1 - abs(delta_acc_retain_train)) * (1 - abs(delta_acc_forget_train)) * (1 - abs(delta_acc_retain_test))
