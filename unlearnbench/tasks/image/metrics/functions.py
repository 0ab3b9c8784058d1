"""The metrics of docs/metrics.md, one function each, over logits computed once per (model, pool).

Everything is computed in float64 on the CPU from gathered logits, so a metric does not depend on the device count
or the precision the model ran in (beyond the logits themselves). A metric that cannot be computed (an empty split,
or non-finite logits from a diverged model) is NaN, never an exception: the scorer turns it into None.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Metric

LN2 = math.log(2)
# the splits the metrics are scored on (`scoring.Scorer`), as records and roles name them
FORGET_TRAIN, RETAIN_TRAIN, FORGET_TEST, RETAIN_TEST = "forget_train", "retain_train", "forget_test", "retain_test"


def probabilities(logits: Tensor) -> Tensor:
    return torch.softmax(logits.double(), dim=1)


def log_probabilities(logits: Tensor) -> Tensor:
    """log softmax in float64: finite where the softmax itself underflows to 0 (logit gaps beyond ~745)."""
    return torch.log_softmax(logits.double(), dim=1)


def all_finite(*tensors: Tensor) -> bool:
    return all(bool(torch.isfinite(x).all()) for x in tensors)


ACC = Metric("acc", "acc", RETRAINED, headline=(FORGET_TEST, RETAIN_TEST), figure=(FORGET_TEST, RETAIN_TEST))


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Per-sample accuracy: the fraction of samples whose argmax is the label; NaN for non-finite logits, whose
    argmax is arbitrary (torch picks a NaN)."""
    if not len(labels) or not all_finite(logits):
        return math.nan
    return float((logits.argmax(1) == labels).double().mean())


def per_sample_loss(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.double(), labels, reduction="none")


LOSS = Metric("loss", "loss", RETRAINED)


def mean_loss(logits: Tensor, labels: Tensor) -> float:
    return float(per_sample_loss(logits, labels).mean()) if len(labels) else math.nan


ACTIVATION_DISTANCE = Metric("activation_distance", "act.dist", 0.0, headline=(FORGET_TRAIN,), figure=(FORGET_TRAIN,))


def activation_distance(probs_r: Tensor, probs_u: Tensor) -> float:
    """sqrt(mean_x ‖M_r(x) − M_u(x)‖²) over softmax outputs; 0 is best, √2 the maximum."""
    if len(probs_r) == 0:
        return math.nan
    return math.sqrt(float(((probs_r - probs_u) ** 2).sum(1).mean()))


def kl_to_mixture(log_p: Tensor, log_q: Tensor) -> Tensor:
    """p · ln(p / m) with m = (p + q) / 2, from log-probabilities, with 0 · log 0 = 0.

    ln(p / m) = ln 2 − ln(1 + q / p) = ln 2 − logaddexp(0, ln q − ln p) lies in (−∞, ln 2] and is never formed
    from an underflowed m: with p = 5e-324 and q = 0, (p + q) / 2 rounds to 0 and p · log(p / m) would be +inf.
    For p = q it is exactly 0 (logaddexp(0, 0) is ln 2 rounded the same way), so identical outputs give exactly 0.
    """
    p = log_p.exp()
    ratio = LN2 - torch.logaddexp(torch.zeros_like(log_p), log_q - log_p)
    return torch.where(p > 0, p * ratio, torch.zeros_like(p))


JS_DIVERGENCE = Metric("js_divergence", "JS", 0.0, headline=(FORGET_TRAIN,))


def js_divergence(log_r: Tensor, log_u: Tensor) -> float:
    """Mean Jensen–Shannon divergence in bits, in [0, 1], from log-probabilities (`log_probabilities`):
    0 for identical outputs, 1 for disjoint one-hot ones. Each sample is clamped to [0, 1] against rounding."""
    if len(log_r) == 0:
        return math.nan
    log_r, log_u = log_r.double(), log_u.double()
    per_sample = (kl_to_mixture(log_r, log_u).sum(1) + kl_to_mixture(log_u, log_r).sum(1)) / (2 * LN2)
    return float(per_sample.clamp(0.0, 1.0).mean())  # clamp keeps a NaN (non-finite logits) as NaN


COMPLETENESS = Metric("completeness", "completeness", 1.0)


def completeness(logits_r: Tensor, logits_u: Tensor) -> float:
    """Fraction of samples on which M_u predicts what M_r predicts; 1 is best. NaN for non-finite logits."""
    if not len(logits_r) or not all_finite(logits_r, logits_u):
        return math.nan
    return float((logits_r.argmax(1) == logits_u.argmax(1)).double().mean())


LAYER_DISTANCE = Metric("layer_distance", "layer dist", 0.0, headline=(NO_SPLIT,), figure=(NO_SPLIT,))


def layer_distance(params_u: dict[str, Tensor], params_r: dict[str, Tensor]) -> float:
    """sqrt(Σ over learnable parameters (w_u − w_r)²), in float64."""
    total = sum(float(((params_u[name].double() - params_r[name].double()) ** 2).sum()) for name in params_r)
    return math.sqrt(total)


def entropy(probs: Tensor) -> Tensor:
    """Per-sample entropy −Σ p log p (natural log) in float64, with 0 · log 0 = 0 and NaN kept as NaN (a NaN
    output must not look like a confident one to the attacker)."""
    probs = probs.double()
    return -torch.xlogy(probs, probs).sum(1)


def attacker_features(*values: Tensor) -> np.ndarray:
    """One float64 feature column: float32 would round away the differences between tightly bunched values."""
    return np.concatenate([x.detach().cpu().double().numpy() for x in values]).astype(np.float64)[:, None]


def attacker():
    """Logistic regression on the standardised feature: the entropies or losses of a well-trained model are tiny
    (~1e-4) and tightly bunched, and on the raw scale the L2 penalty keeps the coefficient too small to separate
    them."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced"))


MIA = Metric("mia", "MIA", RETRAINED, headline=(FORGET_TRAIN,))


def entropy_mia(member_entropy: Tensor, nonmember_entropy: Tensor, forget_entropy: Tensor, max_members: int,
                rng: np.random.Generator) -> float:
    """Fraction of D_f that a logistic-regression attacker on output entropy calls "member".

    The attacker learns members = D_r (at most `max_members`, drawn with `rng`) against non-members = the test set,
    with balanced class weights. NaN when a side is empty or an entropy is not finite (a diverged model).
    """
    if len(forget_entropy) == 0 or len(member_entropy) == 0 or len(nonmember_entropy) == 0:
        return math.nan
    if not all_finite(member_entropy, nonmember_entropy, forget_entropy):
        return math.nan
    members = member_entropy
    if len(members) > max_members:
        members = members[torch.from_numpy(np.sort(rng.choice(len(members), max_members, replace=False)))]
    features = attacker_features(members, nonmember_entropy)
    targets = np.concatenate([np.ones(len(members)), np.zeros(len(nonmember_entropy))])
    fitted = attacker().fit(features, targets)
    return float(fitted.predict(attacker_features(forget_entropy)).mean())


MIA_LOSS = Metric("mia_loss", "mia_loss", 0.5)  # an attacker at chance (docs/metrics.md)


def loss_mia(forget_loss: Tensor, nonmember_loss: Tensor, folds: int, rng: np.random.Generator) -> float:
    """Cross-validated accuracy of a logistic-regression attacker telling D_f from unseen samples by their loss.

    The caller picks the non-members (see `Scorer.loss_nonmembers`). The larger side is subsampled (with `rng`) to
    the size of the smaller; 0.5 means the attacker cannot tell. NaN with fewer samples than folds or a loss that
    is not finite (a diverged model).
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    size = min(len(forget_loss), len(nonmember_loss))
    if size < folds or not all_finite(forget_loss, nonmember_loss):
        return math.nan
    forget = forget_loss[torch.from_numpy(np.sort(rng.choice(len(forget_loss), size, replace=False)))]
    unseen = nonmember_loss[torch.from_numpy(np.sort(rng.choice(len(nonmember_loss), size, replace=False)))]
    features = attacker_features(forget, unseen)
    targets = np.concatenate([np.ones(size), np.zeros(size)])
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(rng.integers(2**31)))
    return float(cross_val_score(attacker(), features, targets, cv=splitter).mean())


TOW = Metric("tow", "tow", 1.0, headline=(NO_SPLIT,))


def tug_of_war(delta_acc_retain_train: float, delta_acc_forget_train: float, delta_acc_retain_test: float) -> float:
    """(1 − |Δacc D_r|)(1 − |Δacc D_f|)(1 − |Δacc D'_r|): 1 when M_u matches M_r on all three; NaN, never ±inf,
    for a non-finite delta."""
    value = (1 - abs(delta_acc_retain_train)) * (1 - abs(delta_acc_forget_train)) * (1 - abs(delta_acc_retain_test))
    return value if math.isfinite(value) else math.nan
