"""Per-example forgetting statistics from pools of models (numpy and scipy only; no torch, no pandas).

The inputs are logit-scaled confidences, one row per model and one column per forget example (KLOM takes D_r's and
D'_r's examples too): `unlearned` [N, E] from N unlearned models and `retrained` [N, E] from N models retrained
without the forget set.

- `epsilons`: the NeurIPS 2023 machine-unlearning competition's per-example ε, as `_get_epsilons` and
  `compute_forget_score_from_confs` in google-deepmind/unlearning_evaluation's `metric.py` compute it. Per example the
  positive pool is the one with the larger median (ties: the unlearned one). An example whose pools' ranges differ by
  more than 100× scores ε = 50 outright (the reference's 1% rule; two ranges of 0 are not capped, as 0/0 is not below
  0.01 there either). Otherwise ε is the largest privacy ε that one of the reference's decision thresholds attests:
  the single-threshold family (predict positive at or above t, t on an even grid from the smallest to the largest
  confidence, 100 per unit) and the double-threshold family (predict the pool with the smaller range inside
  [left, right]: 400 left thresholds on an even grid over ±2 around each right threshold minus that range, the right
  thresholds 100 per unit over the pool's span ±2). Each threshold gives ε = max(ln(1 − δ − FPR) − ln FNR,
  ln(1 − δ − FNR) − ln FPR) clipped at 0 (δ = 1e-5; ∞ at a perfect split; discarded where FPR or FNR alone is 0, or
  where both logarithms are undefined); ε of the example is the largest kept, clipped to [0, 50].
  It is exact, not a sampled approximation: ε depends on a threshold only through the pair (a, b) of positive- and
  negative-pool models it predicts positive, so a table of ε over the (N + 1)² pairs is built once per N, and each
  family's reached pairs are found from the sorted pooled confidences with the threshold grids' float64 values
  (np.linspace's, bit for bit) instead of evaluating its 160,000 thresholds one by one.
- `points`, `forget_quality`: the competition's forgetting quality F, the mean over examples of 1, 1/2, 1/4, … for
  ε in [0, 0.5), [0.5, 1), … up to the cap ceil(ln(N − 1)) (`epsilon_cap`; ε beyond it scores 0); `score` combines F
  with the accuracy ratios as the competition's final score does;
- `null_qualities`: F under the permutation null (pool the 2N models, split them at random into two pools of N),
  seeded and reproducible;
- `lira`: offline LiRA (Carlini et al., "Membership Inference Attacks From First Principles", S&P 2022) against the
  unlearned models, with the retrained pool as the attacker's out-models: AUC and TPR at 1% and 0.1% FPR;
- `klom`, `klom_summary`, `null_kloms`: KLOM (Georgiev et al. 2024, "Attribute-to-delete: machine unlearning via
  datamodel matching"; reference code: easydub/EasyDUB-code, `easydub/eval.py`), per example the KL divergence from
  the histogram of the unlearned pool's margins to the retrained pool's, on 20 bins spanning both pools' margins
  clipped to [−100, 100], the retrained pool's bins floored at 1e-5; summarised by the 95th percentile over examples,
  with a permutation null drawn as F's is. One deviation: the reference bins with `np.digitize` on the edges, which
  drops every margin equal to the largest of the pooled ones (it falls past the last edge); here the last bin is
  closed, as `np.histogram`'s is, so that every model counts (the reference scores an unlearned pool of one margin
  above every retrained one 0, the best score, instead of ln(1/1e-5)).

Deviations from the reference, each where it cannot run or where its arithmetic is coarser:
- its rates are float32 means (`.type(torch.float32)`); here they are exact, counts / N in float64 (ε differs by
  float32 rounding, below 1e-5);
- its single-threshold grid is `torch.linspace` of float64 end points, whose default dtype makes float32 thresholds;
  here the grid is float64 (np.linspace's values, as its double-threshold grids already are). The two differ only for
  a confidence within float32 rounding (about 1e-7 relative) of a threshold;
- `assert thr_eps` raises on every array of more than one kept threshold; it is read as the intended "some threshold
  was kept";
- where no threshold is kept (only a pair with FPR or FNR alone 0 is reached: the pools are constant and equal),
  the reference fails; here ε = 0, as nothing separates the pools.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats

from unlearnbench.runtime.errors import UserError

DELTA = 1e-5
EPSILON_CAP = 50.0  # ε of a peaky example and the largest ε
CAP_RATIO = 0.01  # an example whose smaller range is below 1% of the larger scores EPSILON_CAP outright
THRESHOLDS_PER_UNIT = 100
BUFFER = 2.0  # the double-threshold family's margin around the peakier pool
LEFT_THRESHOLDS = math.ceil(2 * BUFFER * THRESHOLDS_PER_UNIT)  # per right threshold
BUCKET = 0.5  # the width of an ε bucket; its points halve from one bucket to the next
NULL_PERMUTATIONS = 100
NULL_SEED = 20240603  # the permutation null's base seed: the report is reproducible
MAX_CONFIDENCE = 1e9  # |conf| beyond this breaks the threshold grids' float64 resolution (real ones stay below 104)
BATCH_EXAMPLES = 2048  # examples at a time: bounds the memory of the per-right-threshold arrays
CHUNK_CELLS = 1 << 18  # examples per chunk of the left grids: about this many (example, right threshold, model) cells
LIRA_PER_EXAMPLE_MODELS = 64  # fewer out-models per fit: one variance shared by all examples
_EPS = np.finfo(np.float64).eps
_EPS32 = float(np.finfo(np.float32).eps)


def epsilon_cap(n: int) -> float:
    """ceil(ln(N − 1)): the largest ε that N models per pool can attest, the end of the last scoring bucket
    (N = 32: 4; N = 2: 0, no bucket). −∞ for a single model."""
    return float(math.ceil(math.log(n - 1))) if n > 1 else -math.inf


def points(eps: np.ndarray, n: int) -> np.ndarray:
    """The competition's points for each ε with N models per pool: 1 for [0, 0.5), 1/2 for [0.5, 1), … halving every
    0.5, for the buckets that end at or below `epsilon_cap(n)`; 0 beyond the last one (and for NaN)."""
    cap = epsilon_cap(n)
    buckets = int(cap / BUCKET) if cap > 0 else 0
    with np.errstate(invalid="ignore"):
        bucket = np.floor(np.asarray(eps, dtype=float) / BUCKET)
        return np.where(bucket < buckets, 0.5**bucket, 0.0)


def forget_quality(unlearned: np.ndarray, retrained: np.ndarray) -> float:
    """The forgetting quality F: the mean of `points` over the forget examples (`compute_forget_score_from_confs`)."""
    eps = epsilons(unlearned, retrained)
    return float(points(eps, np.shape(unlearned)[0]).mean())


def score(f: float, acc_u_retain: float, acc_r_retain: float, acc_u_test: float, acc_r_test: float) -> float:
    """The competition's final score F · (retain accuracy ratio) · (test accuracy ratio), unlearned over retrained;
    NaN where a ratio is undefined (a retrained accuracy of 0 or NaN)."""
    if not acc_r_retain or not acc_r_test or math.isnan(acc_r_retain) or math.isnan(acc_r_test):
        return math.nan
    return float(f * (acc_u_retain / acc_r_retain) * (acc_u_test / acc_r_test))


# ------------------------------------------------------------------------------------------------------------ ε


def _pools(unlearned: np.ndarray, retrained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    if u.ndim != 2 or u.shape != r.shape or not u.size:
        raise UserError(f"expected two non-empty [models, examples] arrays of one shape, got {u.shape}, {r.shape}")
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(r))):
        raise UserError("confidences must be finite")
    if max(np.abs(u).max(), np.abs(r).max()) > MAX_CONFIDENCE:
        raise UserError(f"confidences beyond ±{MAX_CONFIDENCE:g} are not logit-scaled confidences")
    return u, r


@functools.lru_cache(maxsize=16)
def _epsilon_table(n: int) -> np.ndarray:
    """ε[a, b] of a threshold that predicts a of the N positive-pool models and b of the N negative-pool ones
    positive, with the rates exact in float64 and the final clip to [0, EPSILON_CAP] applied; −∞ where the
    reference discards the threshold (FPR or FNR alone 0, or both logarithms NaN: FPR = FNR = 1)."""
    a, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    fpr, fnr = b / n, (n - a) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.fmax(np.log(1 - DELTA - fpr) - np.log(fnr), np.log(1 - DELTA - fnr) - np.log(fpr))
    eps = np.clip(eps, 0, None)
    perfect = (fpr == 0) & (fnr == 0)
    eps[~perfect & (fpr * fnr == 0)] = np.nan
    eps[perfect] = np.inf
    eps = np.minimum(eps, EPSILON_CAP)
    eps[np.isnan(eps)] = -np.inf
    eps.setflags(write=False)
    return eps


def _grid_values(start, stop, step, num, k):
    """np.linspace(start, stop, num)[k], bit for bit: k·step + start (two roundings), the last one `stop`."""
    return np.where((k == num - 1) & (num > 1), stop, k * step + start)


def _grid_counts(start, stop, num, x, strict: bool = False) -> np.ndarray:
    """#{k : t_k ≤ x} (`strict`: #{k : t_k < x}) for the grid t = np.linspace(start, stop, num), exactly; the
    arguments broadcast (one grid per row of start/stop/num). Requires stop > start where num > 0.

    (x − start)/step locates x between two grid points; only where that lands within rounding of a grid point is the
    count settled against the grid's exact values (ties and values on the grid count as np.linspace's would).
    """
    step = (stop - start) / np.maximum(num - 1, 1)
    step = np.where(step > 0, step, 1.0)  # an empty grid (num = 0: no range) counts 0 whatever the step
    # Rounding of the grid values and of (x − start)/step, in steps, with a wide margin.
    tolerance = 1e-6 + 16 * _EPS * ((np.abs(start) + np.abs(stop)) / step + num)
    position = np.subtract(x, start)
    position /= step
    below = np.floor(position)
    position -= below
    position -= 0.5
    near = np.nonzero(np.abs(position, out=position) > 0.5 - tolerance)
    counts = np.clip(below + 1, 0, num, out=below)
    if len(near[0]):
        shape = counts.shape

        def pick(array):
            return np.broadcast_to(array, shape)[near]

        counts[near] = _settle(counts[near], pick(x), pick(start), pick(stop), pick(step), pick(num), strict)
    return counts


def _settle(counts, x, start, stop, step, num, strict: bool = False, rounds: int = 8) -> np.ndarray:
    """Moves each estimated count to the exact one by comparing x with the grid's values next to it."""
    for _ in range(rounds):
        last_in = _grid_values(start, stop, step, num, np.maximum(counts - 1, 0))
        first_out = _grid_values(start, stop, step, num, np.minimum(counts, np.maximum(num - 1, 0)))
        over = (counts > 0) & ((last_in >= x) if strict else (last_in > x))
        short = (counts < num) & ((first_out < x) if strict else (first_out <= x))
        if not (over.any() or short.any()):
            return counts
        counts = counts - over + short
    raise AssertionError("threshold counts did not settle")  # a non-monotone grid: not one np.linspace makes


def _gap_hits(counts: np.ndarray, total) -> np.ndarray:
    """hit[..., p]: some grid point lies in (x_(p), x_(p+1)] of the sorted confidences (x_(0) = −∞, x_(2N+1) = +∞),
    i.e. some threshold has exactly p confidences below it; `counts` are #{t ≤ x_(i)}, `total` the grid's size."""
    shape = (*counts.shape[:-1], counts.shape[-1] + 1)
    hits = np.empty(shape, dtype=bool)
    np.greater(counts[..., :1], 0, out=hits[..., :1])
    np.greater(counts[..., 1:], counts[..., :-1], out=hits[..., 1:-1])
    np.greater(total, counts[..., -1:], out=hits[..., -1:])
    return hits


def _near_pairs(x: np.ndarray, s: np.ndarray, tolerance: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(b, j, i) where x[b, i] − s[b, j] is within `tolerance[b]` of an integer: x and s's fractional parts match
    on the circle, found by sorting s's fractional parts of every b (copies shifted by ±1 for the wrap-around)."""
    b = s.shape[0]
    fraction = s - np.floor(s)
    order = np.argsort(fraction, axis=1)
    ordered = np.take_along_axis(fraction, order, axis=1)
    order = np.tile(order, 3)
    shift = 4.0 * np.arange(b)[:, None]  # every b in its own stretch of one sorted line
    line = (np.concatenate([ordered - 1, ordered, ordered + 1], axis=1) + shift).ravel()
    query = x - np.floor(x) + shift
    first = np.searchsorted(line, (query - tolerance[:, None]).ravel(), side="left")
    lengths = np.searchsorted(line, (query + tolerance[:, None]).ravel(), side="right") - first
    owner = np.repeat(np.arange(len(first)), lengths)
    found = np.repeat(first, lengths) + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return owner // x.shape[1], order.ravel()[found], owner % x.shape[1]


def _left_hits(sorted_x: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """[B, rows, 2N + 1] `_gap_hits` of the left grids np.linspace(start[b, j], stop[b, j], LEFT_THRESHOLDS).

    All grids of one example have one step up to rounding, so (x − start)/step ≈ X_i − S_j with X, S scaled by the
    first row's step: one float32 subtraction per cell, its floor the count. Only cells within `tolerance` (the
    bound on that estimate's error, in steps) of a grid point can be miscounted; they are found by matching X's and
    S's fractional parts and settled against the exact grid values (few, but for ties and values on the grid).
    """
    num = LEFT_THRESHOLDS
    step = (stop - start) / (num - 1)
    unit, centre = step[:, :1], sorted_x[:, :1]
    x, s = (sorted_x - centre) / unit, (start - centre) / unit - 1  # x − s ≈ (x − start)/step + 1
    spread = np.abs(step / unit - 1).max(axis=1)
    magnitude = np.maximum(np.abs(x).max(axis=1), np.abs(s).max(axis=1)) + num
    scale = (np.abs(start).max(axis=1) + np.abs(stop).max(axis=1)) / unit[:, 0]
    # float64 rounding of the grids and of x, s; the rows' unequal steps; float32 rounding of x, s and x − s.
    tolerance = 1e-6 + 32 * _EPS * (magnitude + scale) + 4 * spread * (num + 1) + 4 * _EPS32 * magnitude
    position = np.subtract(x.astype(np.float32)[:, None, :], s.astype(np.float32)[:, :, None])
    np.clip(position, 0.5, num + 0.5, out=position)
    counts = position.astype(np.int16)  # #{t ≤ x} wherever x is clear of every grid point (truncation = floor)
    b, j, i = _near_pairs(x, s, tolerance)
    if len(b):
        counts[b, j, i] = _settle(counts[b, j, i].astype(np.int64), sorted_x[b, i], start[b, j], stop[b, j],
                                  step[b, j], num)
    return _gap_hits(counts, num)


def _prefix_counts(flags: np.ndarray) -> np.ndarray:
    """[B, 2N + 1]: how many of the first p sorted confidences are flagged, p = 0 … 2N."""
    counts = np.zeros((flags.shape[0], flags.shape[1] + 1), dtype=np.int64)
    np.cumsum(flags, axis=1, out=counts[:, 1:])
    return counts


def _single_epsilons(sorted_x: np.ndarray, from_pos: np.ndarray, n: int, table: np.ndarray) -> np.ndarray:
    """The single-threshold family's ε per example (−∞ where it keeps no threshold): a threshold with p confidences
    below it predicts the models above, (N − #positive below, N − #negative below)."""
    low, high = sorted_x[:, :1], sorted_x[:, -1:]
    num = np.ceil((high - low) * THRESHOLDS_PER_UNIT)
    hits = _gap_hits(_grid_counts(low, high, num, sorted_x), num)
    pos_below = _prefix_counts(from_pos)
    neg_below = np.arange(2 * n + 1) - pos_below
    return np.where(hits, table[n - pos_below, n - neg_below], -np.inf).max(axis=1)


def _right_prefixes(right_below: np.ndarray, rows: int) -> np.ndarray:
    """[B, rows]: q_j = #{x ≤ r_j} from #{j : r_j < x} of every confidence."""
    b = right_below.shape[0]
    cells = (np.arange(b)[:, None] * (rows + 1) + right_below.astype(np.int64)).ravel()
    histogram = np.bincount(cells, minlength=b * (rows + 1)).reshape(b, rows + 1)
    return np.cumsum(histogram, axis=1)[:, :rows]


def _double_epsilons(sorted_x: np.ndarray, from_pos: np.ndarray, pos: np.ndarray, neg: np.ndarray,
                     n: int, table: np.ndarray) -> np.ndarray:
    """The double-threshold family's ε per example (−∞ where it keeps no threshold).

    The rule [left, right] predicts positive the sorted confidences x_(p+1) … x_(q) with q = #{x ≤ right} and
    p = #{x < left} (none when p ≥ q: the pair (0, 0)); so the reached pairs are the windows (p, q] such that some
    right threshold r_j has q_j = q and one of its left thresholds lies in (x_(p), x_(p+1)].
    """
    pos_range, neg_range = np.ptp(pos, axis=1), np.ptp(neg, axis=1)
    peaky_is_pos = pos_range < neg_range  # the reference swaps the pools when pos_diff >= neg_diff
    peaky = np.where(peaky_is_pos[:, None], pos, neg)
    width = np.minimum(pos_range, neg_range)[:, None]
    low = (peaky.min(axis=1, keepdims=True) + width) - BUFFER
    high = peaky.max(axis=1, keepdims=True) + BUFFER
    rows = np.ceil((high - low) * THRESHOLDS_PER_UNIT)
    most = int(rows.max())
    j = np.arange(most, dtype=np.float64)
    centre = _grid_values(low, high, (high - low) / (rows - 1), rows, j) - width  # right thresholds − width
    q = _right_prefixes(_grid_counts(low, high, rows, sorted_x, strict=True), most)
    in_peaky = _prefix_counts(from_pos == peaky_is_pos[:, None]).astype(np.int32)
    result = np.empty(len(sorted_x))
    chunk = max(1, CHUNK_CELLS // (most * sorted_x.shape[1]))
    for begin in range(0, len(sorted_x), chunk):
        part = slice(begin, begin + chunk)
        hits = _left_hits(sorted_x[part], centre[part] - BUFFER, centre[part] + BUFFER)  # [B, rows, 2N + 1]
        hits[j >= rows[part]] = False  # rows past this example's own grid
        result[part] = _window_maxima(hits, q[part], in_peaky[part], n, table)
    return result


def _window_maxima(hits: np.ndarray, q: np.ndarray, in_peaky: np.ndarray, n: int, table: np.ndarray) -> np.ndarray:
    """The largest ε over the windows (p, q] that some right threshold reaches, per example: right thresholds with one
    q are consecutive, so their hits are OR-ed in one pass."""
    b, _, size = hits.shape
    groups = (np.arange(b)[:, None] * size + q).ravel()
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    packed = np.packbits(hits, axis=2).reshape(-1, (size + 7) // 8)  # OR-ing bytes is cheaper than booleans
    reached = np.unpackbits(np.bitwise_or.reduceat(packed, starts, axis=0), axis=1, count=size).view(bool)
    owner, last = np.divmod(groups[starts], size)  # each group's example and q
    inside = in_peaky[owner, last][:, None] - in_peaky[owner]  # peakier-pool confidences in (p, q]
    other = (last[:, None] - np.arange(size, dtype=np.int32)) - inside
    cells = np.maximum(inside, 0) * (n + 1) + np.maximum(other, 0)  # p ≥ q: (0, 0), discarded
    cells[~reached] = 0  # the pair (0, 0): −∞
    best = np.full(b, -np.inf)
    np.maximum.at(best, owner, table.ravel()[cells].max(axis=1))
    return best


def _free_epsilons(pos: np.ndarray, neg: np.ndarray, table: np.ndarray) -> np.ndarray:
    """ε of uncapped examples; `pos`, `neg`: [B, N], one example per row."""
    n = pos.shape[1]
    merged = np.concatenate([pos, neg], axis=1)
    order = np.argsort(merged, axis=1, kind="stable")
    sorted_x = np.take_along_axis(merged, order, axis=1)
    from_pos = order < n
    single = _single_epsilons(sorted_x, from_pos, n, table)
    double = _double_epsilons(sorted_x, from_pos, pos, neg, n, table)
    return np.maximum(np.maximum(single, double), 0.0)  # no threshold kept: ε = 0


def epsilons(unlearned: np.ndarray, retrained: np.ndarray) -> np.ndarray:
    """The competition's ε of every forget example (see the module docstring), float64 [E], in [0, 50]. The pools
    must have one shape [N, E] and finite confidences within ±MAX_CONFIDENCE (ValueError otherwise)."""
    u, r = _pools(unlearned, retrained)
    n, e = u.shape
    retrained_positive = np.median(r, axis=0) > np.median(u, axis=0)
    pos = np.where(retrained_positive, r, u).T
    neg = np.where(retrained_positive, u, r).T
    pos_range, neg_range = np.ptp(pos, axis=1), np.ptp(neg, axis=1)
    largest, smallest = np.maximum(pos_range, neg_range), np.minimum(pos_range, neg_range)
    ratio = np.divide(smallest, largest, out=np.full(e, np.nan), where=largest > 0)  # 0/0 stays NaN: not capped
    result = np.full(e, EPSILON_CAP)
    free = np.flatnonzero(~(ratio < CAP_RATIO))
    table = _epsilon_table(n)
    for begin in range(0, len(free), BATCH_EXAMPLES):
        picked = free[begin:begin + BATCH_EXAMPLES]
        result[picked] = _free_epsilons(pos[picked], neg[picked], table)
    return result


def null_orders(n: int, e: int, permutations: int, seed: int = NULL_SEED) -> np.ndarray:
    """[permutations, 2N] random orders of the 2N pooled models (the first N of each row are the null's unlearned
    pool), fixed by (`seed`, N, E, `permutations`): every permutation null of this module draws its splits here, so
    that the same input gives the same numbers."""
    rng = np.random.default_rng([seed, n, e, permutations])
    return rng.random((permutations, 2 * n)).argsort(axis=1)


def null_qualities(unlearned: np.ndarray, retrained: np.ndarray, permutations: int = NULL_PERMUTATIONS,
                   seed: int = NULL_SEED) -> np.ndarray:
    """F under the permutation null: pool the 2N models (rows) of both pools, split them at random into two pools of
    N, `permutations` times, and take F of each split (the first half as the unlearned pool). The splits are fixed by
    (N, E, `permutations`, `seed`): the report is reproducible. Where F lies in this null, the unlearned models are
    as exchangeable with retrained ones as retrained ones are among themselves. With N ≤ 2 models per pool every ε
    scores 0 (`epsilon_cap`), so every split's F is 0 and no split is scored."""
    u, r = _pools(unlearned, retrained)
    n, e = u.shape
    if epsilon_cap(n) <= 0:
        return np.zeros(permutations)
    order = null_orders(n, e, permutations, seed)
    pooled = np.concatenate([u, r])
    first = pooled[order[:, :n]].transpose(1, 0, 2).reshape(n, permutations * e)
    second = pooled[order[:, n:]].transpose(1, 0, 2).reshape(n, permutations * e)
    return points(epsilons(first, second), n).reshape(permutations, e).mean(axis=1)


# ---------------------------------------------------------------------------------------------------------- LiRA


def _gaussian_fit(pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-example mean and variance (ddof 1) of a pool [M, E]; a constant column gets its value and 0 exactly."""
    lowest, highest = pool.min(axis=0), pool.max(axis=0)
    constant = lowest == highest
    mean = np.where(constant, lowest, pool.mean(axis=0))
    return mean, np.where(constant, 0.0, pool.var(axis=0, ddof=1))


def _leave_one_out_fit(pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[M, E] mean and variance (ddof 1) of each column without row k, for every k; exactly (value, 0) where the
    other M − 1 are equal."""
    m = pool.shape[0]
    mean = pool.mean(axis=0)
    squares = ((pool - mean) ** 2).sum(axis=0)
    out_mean = (pool.sum(axis=0) - pool) / (m - 1)
    out_var = np.maximum(squares - (pool - mean) ** 2 * m / (m - 1), 0.0) / (m - 2)
    ordered = np.sort(pool, axis=0)
    out_low = np.where(pool == ordered[0], ordered[1], ordered[0])
    out_high = np.where(pool == ordered[-1], ordered[-2], ordered[-1])
    constant = out_low == out_high
    return np.where(constant, out_low, out_mean), np.where(constant, 0.0, out_var)


def _z(conf: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """(conf − μ)/σ; with σ = 0 (a point out-pool) the limit of a vanishing σ: ±∞ by the sign of conf − μ, 0 at μ."""
    diff = conf - mean
    sd = np.sqrt(np.broadcast_to(var, diff.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, diff / sd, np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0)))


def _roc_summary(positives: np.ndarray, negatives: np.ndarray) -> dict[str, float]:
    """AUC (ties count half) and the largest TPR on the ROC curve at FPR ≤ 1% and ≤ 0.1% (±∞ scores allowed)."""
    ranks = stats.rankdata(np.concatenate([positives, negatives]))
    n_pos, n_neg = len(positives), len(negatives)
    auc = (ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    descending = np.sort(negatives)[::-1]
    ascending = np.sort(positives)
    result = {"auc": float(auc)}
    for key, fpr in (("tpr_at_1pct", 0.01), ("tpr_at_0_1pct", 0.001)):
        false_positives = np.arange(n_neg + 1)
        allowed = int(false_positives[false_positives / n_neg <= fpr].max())
        if allowed >= n_neg:
            result[key] = 1.0
        else:  # thresholds above the (allowed + 1)-th largest negative score
            above = n_pos - np.searchsorted(ascending, descending[allowed], side="right")
            result[key] = float(above / n_pos)
    return result


def lira(unlearned: np.ndarray, retrained: np.ndarray) -> dict[str, float]:
    """Offline LiRA: how well a Gaussian fitted to the retrained pool per example tells the unlearned models from
    retrained ones, over all (model, example) pairs (unlearned pairs positive).

    Each example e gets N(μ_e, σ_e²) of the confidence under the retrained models; a model's score on e is
    z = (conf − μ_e)/σ_e, one-sided: more confident than the retrained models reads as remembered, and AUC < 0.5 means
    less confident than retraining (over-forgetting). A retrained model is scored against the fit of the other
    N_r − 1, so that it is as unseen by its fit as an unlearned model. The variance is per example where every fit has
    at least LIRA_PER_EXAMPLE_MODELS models, else one shared by all examples (the mean of the per-example variances),
    as the LiRA authors advise for few shadow models; one rule for both pools, so that positives and negatives are
    scored alike. A point out-pool (σ = 0) scores ±∞ by the side of μ, 0 at μ. `unlearned` [N_u, E], `retrained`
    [N_r, E]; NaN for fewer than 3 retrained models (a left-out fit needs two).
    """
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    nan = {"auc": math.nan, "tpr_at_1pct": math.nan, "tpr_at_0_1pct": math.nan}
    if u.ndim != 2 or r.ndim != 2 or u.shape[1] != r.shape[1]:
        raise UserError(f"expected [models, examples] arrays over the same examples, got {u.shape}, {r.shape}")
    if r.shape[0] < 3 or not u.size:
        return nan
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(r))):
        raise UserError("confidences must be finite")
    mean, var = _gaussian_fit(r)
    out_mean, out_var = _leave_one_out_fit(r)
    if r.shape[0] - 1 < LIRA_PER_EXAMPLE_MODELS:
        var = var.mean()
        out_var = out_var.mean(axis=1, keepdims=True)
    return _roc_summary(_z(u, mean, var).ravel(), _z(r, out_mean, out_var).ravel())


# ---------------------------------------------------------------------------------------------------------- KLOM

KLOM_BINS = 20  # bins of each example's histograms (EasyDUB-code eval.py, `bin_count`)
KLOM_FLOOR = 1e-5  # the retrained pool's bin probabilities are floored here where the unlearned pool has mass (`eps`)
KLOM_CLIP = 100.0  # margins are clipped to [−KLOM_CLIP, KLOM_CLIP] before binning (`min_val`, `max_val`)
KLOM_QUANTILE = 95.0  # the summary over a split's examples: its 95th percentile ("P95 KLOM")
KLOM_NULL_CELLS = 1 << 22  # (permutation, example, bin) counts at a time: bounds the null's memory


def _margin_pools(unlearned: np.ndarray, retrained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pools as float64 [N, E] of one shape (ValueError otherwise); ±∞ is allowed (clipped), NaN is not."""
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    if u.ndim != 2 or u.shape != r.shape or not u.size:
        raise UserError(f"expected two non-empty [models, examples] arrays of one shape, got {u.shape}, {r.shape}")
    if np.isnan(u).any() or np.isnan(r).any():
        raise UserError("margins must not be NaN")
    return u, r


def _one_hot(pooled: np.ndarray) -> np.ndarray:
    """[M, E, KLOM_BINS]: the bin of every model's margin on every example. The bins of an example span its M
    clipped margins (one unit from the smallest where they are all equal), their edges np.linspace's values
    (k·step + start), each bin [e_k, e_k+1) and the last one closed; they depend on the pooled margins alone, so a
    permutation of the models moves no margin to another bin."""
    x = np.clip(pooled, -KLOM_CLIP, KLOM_CLIP)
    low, high = x.min(axis=0), x.max(axis=0)
    high = np.where(low < high, high, low + 1.0)
    step = (high - low) / KLOM_BINS
    inner = np.arange(1, KLOM_BINS, dtype=np.float64)[:, None] * step + low  # [KLOM_BINS − 1, E]
    bins = (x[:, None, :] >= inner).sum(axis=1)  # [M, E]: the inner edges at or below each margin
    return bins[..., None] == np.arange(KLOM_BINS)


@functools.lru_cache(maxsize=16)
def _kl_terms(n: int) -> np.ndarray:
    """[N + 1, N + 1]: one bin's term p ln(p / max(q, KLOM_FLOOR)) of KL(p ‖ q) for p = a/N, q = b/N, 0 where a = 0
    (the sum runs over the bins where p has mass). Counts of N models take N + 1 values, so every bin of every
    example and split of the null reads its term here instead of taking a logarithm."""
    a, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    p, q = a / n, np.maximum(b / n, KLOM_FLOOR)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a > 0, p * np.log(p / q), 0.0)
    terms.setflags(write=False)
    return terms


def _kl_of_counts(p_counts: np.ndarray, q_counts: np.ndarray, n: int) -> np.ndarray:
    """KL(p ‖ q) per example over the last axis, from integer bin counts of N models each (`_kl_terms`)."""
    return _kl_terms(n)[p_counts, q_counts].sum(axis=-1)


def klom(unlearned: np.ndarray, retrained: np.ndarray) -> np.ndarray:
    """KLOM of every example, float64 [E], in [0, ln(1/KLOM_FLOOR)]: the KL divergence from the unlearned pool's
    histogram of margins to the retrained pool's (module docstring). 0 where the pools' margins fall into the same
    bins in the same numbers; ln(1/KLOM_FLOOR) ≈ 11.51 where no retrained margin shares a bin with an unlearned one.
    `unlearned`, `retrained`: [N, E] margins (`conf`) of one shape (ValueError otherwise)."""
    u, r = _margin_pools(unlearned, retrained)
    n = len(u)
    onehot = _one_hot(np.concatenate([u, r]))
    return _kl_of_counts(onehot[:n].sum(axis=0), onehot[n:].sum(axis=0), n)


def klom_summary(values: np.ndarray) -> float:
    """The reference's summary of a split's per-example KLOM: its 95th percentile (linear interpolation); NaN for
    no examples."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, KLOM_QUANTILE)) if values.size else math.nan


def null_kloms(unlearned: np.ndarray, retrained: np.ndarray, permutations: int = NULL_PERMUTATIONS,
               seed: int = NULL_SEED) -> np.ndarray:
    """`klom_summary` under the permutation null, [permutations]: the 2N models pooled and split into two pools of N
    by `null_orders` (the first half as the unlearned pool), as `null_qualities` splits them for F. A KLOM above
    the null's 95th percentile tells the unlearned models from retrained ones at this N; the null's median is what
    two exchangeable pools of N score, the floor that few models and 20 bins leave."""
    u, r = _margin_pools(unlearned, retrained)
    n, e = u.shape
    onehot = _one_hot(np.concatenate([u, r])).reshape(2 * n, e * KLOM_BINS).astype(np.float64)
    total = onehot.sum(axis=0).astype(np.intp)
    order = null_orders(n, e, permutations, seed)
    chosen = np.zeros((permutations, 2 * n))
    chosen[np.arange(permutations)[:, None], order[:, :n]] = 1.0
    result = np.empty(permutations)
    chunk = max(1, KLOM_NULL_CELLS // (e * KLOM_BINS))
    for begin in range(0, permutations, chunk):
        part = slice(begin, begin + chunk)
        first = np.rint(chosen[part] @ onehot).astype(np.intp)  # exact: sums of at most 2N ones
        kl = _kl_of_counts(first.reshape(-1, e, KLOM_BINS), (total - first).reshape(-1, e, KLOM_BINS), n)
        result[part] = np.percentile(kl, KLOM_QUANTILE, axis=1)
    return result
