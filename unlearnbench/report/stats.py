"""Statistics across seeds, as `spec/metrics.md` defines them (numpy and scipy only; no torch, no pandas).

- `w2`: the exact 2-Wasserstein distance between two 1-D empirical distributions of any sizes;
- `w2_null`: its permutation null (pool, split at random, 95th percentile), seeded and reproducible;
- `nested_variance`: the one-way nested random-effects decomposition var(Z) = σ_T² + σ_U² with the χ² interval for
  σ_U², the Graybill–Wang (modified large-sample) interval for σ_T², the ICC and the warnings.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

FEW_TRAINING_SEEDS = 10  # warn below this many training seeds
NULL_PERMUTATIONS = 1000
NULL_SEED = 20240601  # the permutation null's base seed: the report is reproducible


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    return array[np.isfinite(array)]


def _merged_steps(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integration over the merged breakpoints k/n and l/m of two empirical quantile functions, exactly.

    On the scale t·n·m the breakpoints are the integers k·m and l·n; on the interval ending at b the quantile
    functions take the order statistics ceil(b/m) and ceil(b/n) (1-based). Returns (index into sorted u, index into
    sorted v, interval widths as fractions of 1).
    """
    ends = np.union1d(np.arange(1, n + 1, dtype=np.int64) * m, np.arange(1, m + 1, dtype=np.int64) * n)
    widths = np.diff(ends, prepend=0) / (n * m)
    return (ends + m - 1) // m - 1, (ends + n - 1) // n - 1, widths


def w2(u: Sequence[float] | np.ndarray, v: Sequence[float] | np.ndarray) -> float:
    """W2 = sqrt(∫₀¹ (F_u⁻¹(t) − F_v⁻¹(t))² dt) between the empirical distributions of u and v (NaN dropped).

    Equal sizes: sqrt(mean((sort(u) − sort(v))²)). Unequal sizes: exact integration over the merged breakpoints.
    NaN when either sample is empty.
    """
    a, b = np.sort(_clean(u)), np.sort(_clean(v))
    n, m = len(a), len(b)
    if not n or not m:
        return math.nan
    if n == m:
        return float(np.sqrt(np.mean((a - b) ** 2)))
    iu, iv, widths = _merged_steps(n, m)
    return float(np.sqrt(np.sum(widths * (a[iu] - b[iv]) ** 2)))


@functools.lru_cache(maxsize=64)
def _random_splits(n: int, m: int, permutations: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`permutations` random splits of positions 0..n+m-1 into n and m positions, each half in increasing order
    (so that a split of a sorted pool is two sorted samples: no sorting per split). Fixed by (n, m, seed)."""
    rng = np.random.default_rng([seed, n, m, permutations])
    order = rng.random((permutations, n + m)).argsort(axis=1)
    return np.sort(order[:, :n], axis=1), np.sort(order[:, n:], axis=1)


def w2_null(u: Sequence[float] | np.ndarray, v: Sequence[float] | np.ndarray, permutations: int = NULL_PERMUTATIONS,
            seed: int = NULL_SEED, quantile: float = 0.95) -> float:
    """The `quantile` of W2 under the permutation null: pool u and v, split the pool at random into samples of the
    same sizes `permutations` times, and take W2 of each split. The splits are fixed by (sizes, `seed`): the report is
    reproducible. NaN when either sample is empty."""
    return w2_nulls([u], v, permutations, seed, quantile)[0]


def w2_nulls(samples: Sequence[Sequence[float] | np.ndarray], v: Sequence[float] | np.ndarray,
             permutations: int = NULL_PERMUTATIONS, seed: int = NULL_SEED, quantile: float = 0.95) -> list[float]:
    """`w2_null(u, v)` for every u of `samples` against one v, vectorised (samples of one size share the splits;
    each null is still the permutation null of its own pool)."""
    b = _clean(v)
    cleaned = [_clean(u) for u in samples]
    result = [math.nan] * len(cleaned)
    m = len(b)
    for n in sorted({len(a) for a in cleaned}):
        members = [k for k, a in enumerate(cleaned) if len(a) == n]
        if not n or not m:
            continue
        first_positions, second_positions = _random_splits(n, m, permutations, seed)
        pooled = np.sort(np.stack([np.concatenate([cleaned[k], b]) for k in members]), axis=1)  # (k, n + m)
        first, second = pooled[:, first_positions], pooled[:, second_positions]  # (k, permutations, n or m)
        if n == m:
            distances = np.sqrt(np.mean((first - second) ** 2, axis=-1))
        else:
            iu, iv, widths = _merged_steps(n, m)
            distances = np.sqrt(((first[..., iu] - second[..., iv]) ** 2) @ widths)
        for k, value in zip(members, np.quantile(distances, quantile, axis=-1), strict=True):
            result[k] = float(value)
    return result


@dataclass
class Components:
    """The nested decomposition of one metric's values Z_ij (training seed i, unlearning seed j nested in i).

    `total` = σ̂_T² + σ̂_U² (with J = 1: the sample variance of the I values, an unbiased estimate of var(Z); with
    I = 1: not identifiable). `J` is the common number of unlearning seeds per training seed, or on an unbalanced grid
    the effective n0 of the unbalanced ANOVA estimator; `J_min`/`J_max` give the range.
    """

    I: int  # noqa: E741 (the spec's notation)
    J: float
    J_min: int
    J_max: int
    n: int
    mean: float
    total: float
    sigma_t2: float
    sigma_t2_low: float
    sigma_t2_high: float
    sigma_u2: float
    sigma_u2_low: float
    sigma_u2_high: float
    icc: float
    msb: float
    msw: float
    balanced: bool
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _f_infinite(p: float, df: float) -> float:
    """The p-quantile of F(df, ∞) = χ²(df)/df."""
    return float(stats.chi2.ppf(p, df) / df)


def graybill_wang(msb, msw, df_b: float, df_w: float, j: float, alpha: float = 0.05):
    """Two-sided 1 − α modified large-sample (MLS) interval for σ_T² = (E[MSB] − E[MSW])/J.

    Graybill & Wang's MLS method (JASA 75, 1980, 869–873) for a difference of expected mean squares, in the form of
    Burdick & Graybill, "Confidence Intervals on Variance Components" (Marcel Dekker, 1992), ch. 3 (one-fold nested
    design, σ_A²; from Ting, Burdick, Graybill, Jeyaratnam & Lu, J. Statist. Comput. Simul. 35, 1990, 135–143).
    With F(p; a, b) the p-quantile of the F distribution, n1 = I − 1, n2 = I(J − 1):
        G1 = 1 − 1/F(1−α/2; n1, ∞)        H1 = 1/F(α/2; n1, ∞) − 1
        G2 = 1 − 1/F(1−α/2; n2, ∞)        H2 = 1/F(α/2; n2, ∞) − 1
        F1 = F(1−α/2; n1, n2)             F2 = F(α/2; n1, n2)
        G12 = ((F1 − 1)² − G1² F1² − H2²) / F1
        H12 = ((1 − F2)² − H1² F2² − G2²) / F2
        V_L = G1² MSB² + H2² MSW² + G12 MSB MSW
        V_U = H1² MSB² + G2² MSW² + H12 MSB MSW
        L = ((MSB − MSW) − sqrt(V_L)) / J,  U = ((MSB − MSW) + sqrt(V_U)) / J,  negative bounds set to 0.
    (L = 0 exactly when MSB/MSW = F1 and U = 0 exactly when MSB/MSW = F2: the bounds meet the F test.)
    `msb` and `msw` may be arrays (simulations): the bounds are then arrays.
    """
    g1 = 1 - 1 / _f_infinite(1 - alpha / 2, df_b)
    h1 = 1 / _f_infinite(alpha / 2, df_b) - 1
    g2 = 1 - 1 / _f_infinite(1 - alpha / 2, df_w)
    h2 = 1 / _f_infinite(alpha / 2, df_w) - 1
    f1 = float(stats.f.ppf(1 - alpha / 2, df_b, df_w))
    f2 = float(stats.f.ppf(alpha / 2, df_b, df_w))
    g12 = ((f1 - 1) ** 2 - g1**2 * f1**2 - h2**2) / f1
    h12 = ((1 - f2) ** 2 - h1**2 * f2**2 - g2**2) / f2
    v_low = g1**2 * msb**2 + h2**2 * msw**2 + g12 * msb * msw
    v_high = h1**2 * msb**2 + g2**2 * msw**2 + h12 * msb * msw
    difference = np.asarray(msb, dtype=float) - msw
    low = np.maximum(0.0, (difference - np.sqrt(np.maximum(v_low, 0.0))) / j)
    high = np.maximum(0.0, (difference + np.sqrt(np.maximum(v_high, 0.0))) / j)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def chi2_interval(msw, df: float, alpha: float = 0.05):
    """The exact 1 − α interval for σ_U² from df·MSW/σ_U² ~ χ²(df) (0 to 0 when MSW is exactly 0). `msw` may be an
    array."""
    low = df * np.asarray(msw, dtype=float) / stats.chi2.ppf(1 - alpha / 2, df)
    high = df * np.asarray(msw, dtype=float) / stats.chi2.ppf(alpha / 2, df)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def _group_mean(values: np.ndarray) -> float:
    """The mean, exactly the common value when all values are equal (no rounding noise)."""
    return float(values[0]) if np.all(values == values[0]) else float(np.mean(values))


def nested_variance(groups: Sequence[Sequence[float] | np.ndarray], alpha: float = 0.05) -> Components:
    """The one-way nested random-effects decomposition Z_ij = μ + a_i + e_ij of `groups` (one array of Z_ij over j
    per training seed i; NaN dropped; empty groups ignored).

    Balanced grid (every training seed has J values), as spec/metrics.md:
        MSW = Σ_ij (Z_ij − Z̄_i)² / (I(J − 1)),  MSB = J Σ_i (Z̄_i − Z̄)² / (I − 1),
        σ̂_U² = MSW,  σ̂_T² = max(0, (MSB − MSW)/J),  ICC = σ̂_T² / (σ̂_T² + σ̂_U²);
        σ_U² interval: exact χ² with I(J − 1) degrees of freedom; σ_T² interval: Graybill–Wang (`graybill_wang`).
    Unbalanced grid (n_i values for seed i, N = Σ n_i): the unbalanced one-way ANOVA estimator (Henderson's method
    1), still unbiased: MSW = Σ_ij (Z_ij − Z̄_i)² / (N − I), MSB = Σ_i n_i (Z̄_i − Z̄)² / (I − 1) with Z̄ the mean of
    all N values, and J replaced by the effective n0 = (N − Σ n_i²/N)/(I − 1) (E[MSB] = σ_U² + n0 σ_T²). The χ²
    interval stays exact (N − I degrees of freedom); the Graybill–Wang interval with n0 is an approximation; a
    warning says so.
    J = 1 (one value per training seed): only the total variance is identifiable (the sample variance of the I
    values). I = 1: only σ_U² (= MSW with J − 1 degrees of freedom).
    Values equal within every training seed give σ̂_U² = 0.0 exactly, as a deterministic method should.
    """
    arrays = [a for a in (_clean(g) for g in groups) if len(a)]
    sizes = np.array([len(a) for a in arrays], dtype=int)
    count, n = len(arrays), int(sizes.sum()) if len(arrays) else 0
    nan = math.nan
    if not count:
        return Components(0, 0, 0, 0, 0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, True,
                          ["no values"])
    every = np.concatenate(arrays)
    grand = _group_mean(every)
    means = np.array([_group_mean(a) for a in arrays])
    balanced = bool(np.all(sizes == sizes[0]))
    ss_within = float(sum(0.0 if np.all(a == a[0]) else np.sum((a - m) ** 2) for a, m in zip(arrays, means,
                                                                                               strict=True)))
    df_within, df_between = n - count, count - 1
    ss_between = 0.0 if np.all(means == means[0]) else float(np.sum(sizes * (means - grand) ** 2))
    n0 = float(sizes[0]) if balanced else (n - float(np.sum(sizes**2)) / n) / df_between if df_between else nan
    result = Components(I=count, J=n0, J_min=int(sizes.min()), J_max=int(sizes.max()), n=n, mean=grand, total=nan,
                        sigma_t2=nan, sigma_t2_low=nan, sigma_t2_high=nan, sigma_u2=nan, sigma_u2_low=nan,
                        sigma_u2_high=nan, icc=nan, msb=nan, msw=nan, balanced=balanced)
    if count < FEW_TRAINING_SEEDS:
        result.warnings.append(f"fewer than {FEW_TRAINING_SEEDS} training seeds (I = {count}): σ_T² is barely "
                               "identifiable")
    if not balanced:
        result.warnings.append(f"unbalanced grid ({result.J_min} to {result.J_max} unlearning seeds per training "
                               f"seed): unbalanced ANOVA estimator with effective J = n0 = {n0:.3g}; the σ_T² "
                               "interval is approximate")
    if df_within > 0:
        msw = ss_within / df_within
        result.msw, result.sigma_u2 = msw, msw
        result.sigma_u2_low, result.sigma_u2_high = chi2_interval(msw, df_within, alpha)
    if df_between > 0:
        result.msb = ss_between / df_between
    if df_within > 0 and df_between > 0:
        # J = 1 for some seeds only (n0 > 1 still): the estimators above remain the unbalanced ANOVA ones.
        result.sigma_t2 = max(0.0, (result.msb - result.msw) / n0)
        result.sigma_t2_low, result.sigma_t2_high = graybill_wang(result.msb, result.msw, df_between, df_within, n0,
                                                                  alpha)
        result.total = result.sigma_t2 + result.sigma_u2
        result.icc = result.sigma_t2 / result.total if result.total > 0 else nan
    elif df_between > 0:  # J = 1: one value per training seed
        result.total = 0.0 if np.all(every == every[0]) else float(np.var(every, ddof=1))
        result.warnings.append("one unlearning seed per training seed (J = 1): only the total variance is "
                               "identifiable")
    elif df_within > 0:  # I = 1
        result.warnings.append("one training seed (I = 1): only σ_U² is identifiable")
    else:
        result.warnings.append("a single value: no variance is identifiable")
    return result
