"""Pairwise Differentiable Gradient Descent (PDGD) for a linear ranker, vectorised over a batch of queries.

One row of every array is one client's current query, so the ten clients of a federated round take their local
steps together. Padded documents have score −inf, relevance −1 and never show, click or pair.
References: Oosterhuis and de Rijke, "Differentiable Unbiased Online Learning to Rank" (CIKM 2018); Wang et al.,
"Effective and Privacy-preserving Federated Online Learning to Rank" (FPDGD, ICTIR 2021).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import UserError

DEPTH = 10  # documents displayed, clicks simulated and NDCG computed at


@dataclass(frozen=True)
class ClickModel:
    """Cascade click model: P(click) and P(stop after a click) for relevance 0, 1, 2."""

    click: tuple[float, float, float]
    stop: tuple[float, float, float]


CLICK_MODELS = {
    "perfect": ClickModel((0.0, 0.5, 1.0), (0.0, 0.0, 0.0)),
    "navigational": ClickModel((0.05, 0.5, 0.95), (0.2, 0.5, 0.9)),
    "informational": ClickModel((0.4, 0.7, 0.9), (0.1, 0.3, 0.5)),
}


def click_model(name: str) -> ClickModel:
    if name not in CLICK_MODELS:
        raise UserError(f"unknown click model '{name}'; valid: {', '.join(CLICK_MODELS)}")
    return CLICK_MODELS[name]


def scores_of(features: np.ndarray, valid: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Linear scores x·w per document (B × D), −inf for padding; `weights` is F or B × F."""
    scores = features @ weights if weights.ndim == 1 else np.einsum("bdf,bf->bd", features, weights)
    return np.where(valid, scores, -np.inf)


def top_k(keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest keys per row, in descending order of key (B × k)."""
    rows = np.arange(len(keys))[:, None]
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k] if k < keys.shape[1] else np.tile(np.arange(k), (len(keys), 1))
    return top[rows, np.argsort(-keys[rows, top], axis=1, kind="stable")]


def display(scores: np.ndarray, gumbel: np.ndarray, depth: int = DEPTH) -> tuple[np.ndarray, np.ndarray]:
    """The displayed lists (B × K document indices, K = min(depth, D)) and which positions hold a document.

    Plackett–Luce sampling without replacement on softmax(scores) is sorting scores + Gumbel noise (the Gumbel-top-k
    trick): the same distribution as drawing rank after rank.
    """
    ranking = top_k(scores + gumbel, min(depth, scores.shape[1]))
    return ranking, np.isfinite(scores[np.arange(len(scores))[:, None], ranking])


def cascade_clicks(relevance: np.ndarray, shown: np.ndarray, uniform: np.ndarray, model: ClickModel) -> np.ndarray:
    """Clicks (B × K) of a cascade user walking each list top-down: click if u1 < P(click | r); after a click, stop
    if u2 < P(stop | r). `uniform` holds (u1, u2) per position: B × K × 2."""
    r = np.minimum(relevance, 2)  # padding (−1) reads the last entry, but is never shown
    clicked = shown & (uniform[..., 0] < np.asarray(model.click)[r])
    stops = clicked & (uniform[..., 1] < np.asarray(model.stop)[r])
    stopped_above = (np.cumsum(stops, axis=1) - stops) > 0
    return clicked & ~stopped_above


@dataclass(frozen=True)
class Pairs:
    """The PDGD pairs of a batch of lists, one entry each: query row, positions of a (clicked) and b (examined,
    not clicked), ρ_ab and the pair's weight λ_ab = ρ_ab · e^{s_a}e^{s_b}/(e^{s_a}+e^{s_b})²."""

    query: np.ndarray
    a: np.ndarray
    b: np.ndarray
    rho: np.ndarray
    weight: np.ndarray


@dataclass(frozen=True)
class Remaining:
    """The Plackett–Luce denominators of a batch of lists, rank by rank, each on its own scale, so that no sum of
    positive terms is ever formed by subtraction (a running total − Σ shown cancels to 0 or below once one document
    outscores the rest by ~37, and ρ turns NaN).

    For list b and rank r, m[b, r] is the largest score among the documents not yet placed above rank r (the shown
    ones at ranks ≥ r and the never-shown ones); before[b, h, r] = Σ exp(z_j − m[b, r]) over shown ranks r ≤ j < h
    (z_j the score shown at rank j, h = 0..K+1: the ranks are padded by one empty place on each side) and
    unshown[b, r] = Σ exp(s − m[b, r]) over the documents never shown. So D_r = e^{m[b, r]} · total[b, r] with
    total = before[b, K + 1, r] + unshown[b, r] ≥ 1. (h before r: a pair's rows are gathered as one block.)
    """

    shown_scores: np.ndarray  # B × K, −inf where no document is shown
    m: np.ndarray  # B × K
    before: np.ndarray  # B × (K + 2) × K
    after: np.ndarray  # B × (K + 2) × K: after[b, h, r] = Σ exp(z_j − m[b, r]) over shown ranks j ≥ max(r, h − 1)
    unshown: np.ndarray  # B × K

    @classmethod
    def of(cls, scores: np.ndarray, ranking: np.ndarray, shown: np.ndarray) -> Remaining:
        rows, k = np.arange(len(ranking))[:, None], ranking.shape[1]
        z = np.where(shown, scores[rows, ranking], -np.inf)
        never_shown = scores.copy()
        never_shown[rows, ranking] = -np.inf
        log_unshown = logsumexp(never_shown)  # B (−inf when every document is shown)
        m = np.maximum(np.maximum.accumulate(z[:, ::-1], axis=1)[:, ::-1], log_unshown[:, None])
        padded = np.full((len(z), k + 2), -np.inf)
        padded[:, 1:-1] = z
        with np.errstate(invalid="ignore"):  # ranks past a short list have m = −inf: NaN there, never read
            e = np.exp(np.where(at_or_below(k), padded[:, :, None] - m[:, None, :], -np.inf))
            unshown = np.exp(log_unshown[:, None] - m)
        return cls(z, m, np.cumsum(e, axis=1), np.cumsum(e[:, ::-1], axis=1)[:, ::-1], unshown)

    def log_ratios(self, query: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """log P(R)/P(R*) per pair, R* the list with ranks low < high swapped: Σ over ranks r in (low, high] of
        log D*_r − log D_r, where D*_r holds the documents of D_r except the one at `high`, plus the one at `low`.

        Every sum is of positive terms: the documents of D_r other than `high` are those at ranks r..high−1, those
        below `high` and the unshown ones, read from the forward and backward cumulative sums around `high`.
        """
        others = self.before[query, high] + self.after[query, high + 2] + self.unshown[query]  # pairs × K
        lowered = self.shown_scores[query, low][:, None] - self.m[query]  # log of the `low` document's term
        positions = np.arange(self.m.shape[1])[None]
        between = (positions > low[:, None]) & (positions <= high[:, None])
        with np.errstate(divide="ignore", invalid="ignore"):  # terms outside (low, high] are masked out below
            swapped = np.logaddexp(np.log(others), lowered)
            original = np.log(self.before[query, -1] + self.unshown[query])
        return np.where(between, swapped - original, 0.0).sum(1)


@functools.cache
def at_or_below(k: int) -> np.ndarray:
    """[h, r]: padded place h (rank h − 1) is at or below rank r, for K = k ranks padded by one place each side."""
    return np.arange(k + 2)[:, None] - 1 >= np.arange(k)[None, :]


def logsumexp(values: np.ndarray) -> np.ndarray:
    """log Σ exp along the last axis, shifted by the row's maximum; −inf for a row of −inf."""
    top = values.max(-1)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(finite, shift + np.log(np.exp(values - shift[..., None]).sum(-1)), -np.inf)


def pdgd_pairs(scores: np.ndarray, ranking: np.ndarray, shown: np.ndarray, clicks: np.ndarray) -> Pairs:
    """Examined: the top of the list down to one place below the last click. ρ_ab = P(R*)/(P(R) + P(R*)), R* the
    list with a and b swapped, P the product of the Plackett–Luce step probabilities over the ranks between them,
    with denominators over all documents of the query (as the reference's `_calculate_unbias_weights`, which also
    rescales each rank's denominator by its own maximum). Numerators cancel, so log P(R)/P(R*) = Σ over ranks r in
    (lo, hi] of log D*_r − log D_r (`Remaining.log_ratios`), and ρ = 1/(1 + P(R)/P(R*)) is taken from its log.
    """
    rows, k = np.arange(len(ranking))[:, None], ranking.shape[1]
    positions = np.arange(k)
    last_click = np.where(clicks.any(1), k - 1 - np.argmax(clicks[:, ::-1], axis=1), -2)
    examined = shown & (positions[None] <= (last_click + 1)[:, None])
    query, a, b = np.nonzero(clicks[:, :, None] & (examined & ~clicks)[:, None, :])  # one entry per pair
    if len(query) == 0:
        return Pairs(query, a, b, np.zeros(0), np.zeros(0))
    log_ratio = Remaining.of(scores, ranking, shown).log_ratios(query, np.minimum(a, b), np.maximum(a, b))
    rho = np.exp(-np.logaddexp(0.0, log_ratio))  # 1 / (1 + e^L), without overflow
    shown_scores = scores[rows, ranking]
    gap = np.exp(-np.abs(shown_scores[query, a] - shown_scores[query, b]))
    return Pairs(query, a, b, rho, rho * gap / (1.0 + gap) ** 2)  # e^a e^b/(e^a + e^b)² = e^−|d|/(1 + e^−|d|)²


def pdgd_gradient(features: np.ndarray, scores: np.ndarray, ranking: np.ndarray, shown: np.ndarray,
                  clicks: np.ndarray) -> np.ndarray:
    """The PDGD gradient per query (B × F): Σ over pairs of λ_ab · (x_a − x_b); zero without clicks or pairs."""
    batch, k = ranking.shape
    pairs = pdgd_pairs(scores, ranking, shown, clicks)
    if len(pairs.query) == 0:
        return np.zeros((batch, features.shape[2]))
    coefficients = (np.bincount(pairs.query * k + pairs.a, pairs.weight, batch * k)
                    - np.bincount(pairs.query * k + pairs.b, pairs.weight, batch * k))
    return np.einsum("bk,bkf->bf", coefficients.reshape(batch, k), features[np.arange(batch)[:, None], ranking])


def dcg_weights(depth: int = DEPTH) -> np.ndarray:
    return 1.0 / np.log2(np.arange(depth) + 2.0)


def gain(labels: np.ndarray) -> np.ndarray:
    """The DCG gain 2^rel − 1 of relevance labels (padding −1 gains 0)."""
    return np.exp2(np.maximum(labels, 0)) - 1.0


def ideal_dcg(labels: np.ndarray, depth: int = DEPTH) -> np.ndarray:
    """IDCG@depth per query from its sorted labels (padding −1 counts as 0)."""
    gains = np.sort(gain(labels), axis=1)[:, ::-1][:, :depth]
    return gains @ dcg_weights(depth)[: gains.shape[1]]


def list_dcg(relevance: np.ndarray, shown: np.ndarray, depth: int = DEPTH) -> np.ndarray:
    """DCG@depth of each displayed list (B) from the labels of its documents in display order (B × K)."""
    gains = np.where(shown, gain(relevance), 0.0)
    return gains @ dcg_weights(depth)[: gains.shape[1]]


class Ndcg:
    """Offline NDCG@10 of linear rankers on a query set: every query at once; queries without a relevant document
    are left out of both numerator and denominator.

    Queries are held in a few buckets of similar length, each padded only to its own longest query, so the work is
    close to the number of real documents rather than queries × the longest query.
    """

    def __init__(self, features: np.ndarray, labels: np.ndarray, depth: int = DEPTH, buckets: int = 4) -> None:
        ideal = ideal_dcg(labels, depth)
        keep = np.flatnonzero(ideal > 0)
        sizes = (labels[keep] >= 0).sum(1)
        order = keep[np.argsort(sizes, kind="stable")]
        self.count = len(keep)
        self.depth = depth
        self.discount = dcg_weights(depth)
        self.buckets = []
        for part in np.array_split(order, min(buckets, max(len(order), 1))):
            if len(part) == 0:
                continue
            width = int((labels[part] >= 0).sum(1).max())
            self.buckets.append((features[part, :width], labels[part, :width], ideal[part]))

    def __call__(self, weights: np.ndarray) -> float:
        return float(self.curve(weights[None])[0])

    def curve(self, weights: np.ndarray, chunk: int = 64) -> np.ndarray:
        """NDCG@10 of each of R weight vectors (R × F) → R values: one matrix product and one top-k per chunk."""
        if self.count == 0:
            return np.full(len(weights), np.nan)
        total = np.zeros(len(weights))
        for features, labels, ideal in self.buckets:
            queries, width, size = features.shape
            k = min(self.depth, width)
            flat, valid = features.reshape(-1, size), labels >= 0
            for start in interrupt.checked(range(0, len(weights), chunk)):
                block = weights[start:start + chunk]
                scores = (flat @ block.T).T.reshape(len(block), queries, width)
                scores = np.where(valid[None], scores, -np.inf).reshape(-1, width)
                ranked = top_k(scores, k).reshape(len(block), queries, k)
                gains = gain(labels[np.arange(queries)[None, :, None], ranked])
                total[start:start + chunk] += (gains @ self.discount[:k] / ideal).sum(1)
        return total / self.count
