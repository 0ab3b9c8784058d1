"""Statistics across seeds, as docs/seed-study.md defines them (numpy and scipy only; no
torch, no pandas).

- `w2`: the exact 2-Wasserstein distance between two 1-D empirical distributions of any sizes;
- `w2_null`: its permutation null (pool, split at random, 95th percentile), seeded and reproducible;
- `nested_variance`: the one-way nested random-effects decomposition var(Z) = σ_T² + σ_U² with a studentized
  bootstrap interval over training seeds for σ_U² (it holds when var(Z | S = s) differs between training seeds; the
  exact χ² interval is kept beside it where a Brown–Forsythe test does not reject equal variances), the
  Graybill–Wang (modified large-sample) interval for σ_T², the per-training-seed variances with their
  heterogeneity test, the ICC and the warnings;
- `seed_plan`: the cheapest numbers of training and unlearning seeds (I, J) that reach a target standard error.
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
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240602  # the σ_U² bootstrap's seed: the report is reproducible
MIN_BOOTSTRAP_SEEDS = 5  # fewer training seeds with two unlearning seeds: the χ² interval only, with a warning
MAX_PLAN_J = 100_000  # the seed plan's search bound on J
HOMOGENEITY_LEVEL = 0.05  # the Brown–Forsythe test's level below which the χ² interval for σ_U² is withdrawn


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
    """`w2_null(u, v)` for every u of `samples` against one v (see `w2_null_pairs`)."""
    return w2_null_pairs([(u, v) for u in samples], permutations, seed, quantile)


def w2_null_pairs(pairs: Sequence[tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]],
                  permutations: int = NULL_PERMUTATIONS, seed: int = NULL_SEED, quantile: float = 0.95) -> list[float]:
    """`w2_null(u, v)` for every pair (u, v), vectorised: pairs of the same sizes share the splits (each null is
    still the permutation null of its own pool)."""
    cleaned = [(_clean(u), _clean(v)) for u, v in pairs]
    result = [math.nan] * len(cleaned)
    for n, m in sorted({(len(a), len(b)) for a, b in cleaned}):
        members = [k for k, (a, b) in enumerate(cleaned) if (len(a), len(b)) == (n, m)]
        if not n or not m:
            continue
        first_positions, second_positions = _random_splits(n, m, permutations, seed)
        pooled = np.sort(np.stack([np.concatenate(cleaned[k]) for k in members]), axis=1)  # (k, n + m)
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

    `sigma_u2_low`/`sigma_u2_high` is the interval for σ_U² that holds when var(Z | S = s) differs between training
    seeds (`sigma_u2_bootstrap`); `sigma_u2_chi2_*` the exact χ² one, kept only where the Brown–Forsythe test does not
    reject equal per-seed variances at `HOMOGENEITY_LEVEL` (NaN otherwise).
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
    sigma_u2_chi2_low: float = math.nan  # the exact χ² interval, only where equal variances are not rejected
    sigma_u2_chi2_high: float = math.nan
    seeds_with_spread: int = 0  # training seeds with at least two unlearning seeds (the per-seed variances)
    var_by_seed_min: float = math.nan  # the smallest and largest var(Z | S = s_i) over those seeds
    var_by_seed_max: float = math.nan
    deterministic_seeds: int = 0  # those whose unlearning seeds gave one value (var(Z | S = s_i) = 0 exactly)
    homogeneity_w: float = math.nan  # Brown–Forsythe statistic for equal var(Z | S = s_i), and its p-value
    homogeneity_p: float = math.nan
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


def _pooled(variances: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ w s² / Σ w, its standard error over training seeds) along the last axis: the ratio estimator's
    sandwich error sqrt(I/(I − 1) · Σ w² (s² − m)²) / Σ w (with equal weights the usual sd/√I)."""
    count = variances.shape[-1]
    total = weights.sum(axis=-1)
    mean = (weights * variances).sum(axis=-1) / total
    spread = (weights**2 * (variances - mean[..., None]) ** 2).sum(axis=-1)
    return mean, np.sqrt(spread * count / (count - 1)) / total


def sigma_u2_bootstrap(variances, weights=None, alpha: float = 0.05, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED):
    """Two-sided 1 − α studentized bootstrap interval for σ_U² = E[var(Z | S)] from the per-training-seed variances
    s_i² (last axis; `weights` n_i − 1, equal by default, so that the centre is MSW).

    The training seeds are the independent units: resample them with replacement, and calibrate
    t* = (m* − m) / se* (Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 12.5), so no assumption
    that var(Z | S = s) is the same for every s, nor that the errors are normal. A resample with se* = 0 (all its seeds
    alike, e.g. all deterministic) has t* = 0 when m* = m and ±∞ otherwise: when many seeds are deterministic the
    upper bound can be ∞ (too few seeds to bound σ_U²), never a falsely narrow interval. All s_i² equal: [m, m].
    Coverage at 95% (I = J = 11, 4,000 simulated grids): 0.94 with equal normal variances, 0.93 with Gamma(1)
    per-seed variances, 0.93 with Gamma(1/2), 0.92 with t5 errors, ≥ 0.99 with 5 of 11 seeds deterministic (the χ²
    interval: 0.95, 0.54, 0.41, 0.79, 0.86). The resamples are fixed by (I, `resamples`, `seed`): reproducible.
    `variances` may have leading axes (simulations): the bounds then have their shape.
    """
    values = np.asarray(variances, dtype=float)
    weights = np.ones_like(values) if weights is None else np.broadcast_to(np.asarray(weights, dtype=float),
                                                                            values.shape)
    count = values.shape[-1]
    mean, error = _pooled(values, weights)
    picks = np.random.default_rng([seed, count, resamples]).integers(0, count, size=(resamples, count))
    resampled_mean, resampled_error = _pooled(values[..., picks], weights[..., picks])
    shift = resampled_mean - mean[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        pivots = np.where(resampled_error > 0, shift / resampled_error,
                          np.where(shift == 0, 0.0, np.copysign(np.inf, shift)))
    upper_pivot = np.quantile(pivots, 1 - alpha / 2, axis=-1, method="inverted_cdf")
    lower_pivot = np.quantile(pivots, alpha / 2, axis=-1, method="inverted_cdf")
    with np.errstate(invalid="ignore"):
        low = np.where(error > 0, np.maximum(0.0, mean - upper_pivot * error), mean)
        high = np.where(error > 0, mean - lower_pivot * error, mean)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


def seed_variances(groups: Sequence[np.ndarray]) -> np.ndarray:
    """var(Z | S = s_i) (ddof 1) of every group with at least two values; exactly 0.0 where its values are equal."""
    return np.array([0.0 if np.all(g == g[0]) else float(np.var(g, ddof=1)) for g in groups if len(g) >= 2])


def homogeneity(groups: Sequence[np.ndarray]) -> tuple[float, float]:
    """(W, p) of the Brown–Forsythe test (Levene's test on absolute deviations from the group medians; robust to
    non-normal errors) that every training seed has the same var(Z | S = s), over the groups with three or more
    values: with two, both deviations from the median are |a − b|/2, the test's within-group spread is 0 and W is
    meaningless. Every such group constant: (0, 1), nothing differs. NaN with fewer than two such groups."""
    spread = [g for g in groups if len(g) >= 3]
    if len(spread) < 2:
        return math.nan, math.nan
    if all(np.all(g == g[0]) for g in spread):
        return 0.0, 1.0
    statistic, p = stats.levene(*spread, center="median")
    return float(statistic), float(p)


def _group_mean(values: np.ndarray) -> float:
    """The mean, exactly the common value when all values are equal (no rounding noise)."""
    return float(values[0]) if np.all(values == values[0]) else float(np.mean(values))


def _unlearning_seed_spread(result: Components, arrays: list[np.ndarray], df_within: int, alpha: float) -> None:
    """σ_U²'s intervals and the per-training-seed variances with their heterogeneity test, into `result`."""
    spread = [a for a in arrays if len(a) >= 2]
    variances = seed_variances(spread)
    result.seeds_with_spread = len(spread)
    result.var_by_seed_min, result.var_by_seed_max = float(variances.min()), float(variances.max())
    result.deterministic_seeds = int(np.sum(variances == 0))
    result.homogeneity_w, result.homogeneity_p = homogeneity(spread)
    chi2 = chi2_interval(result.msw, df_within, alpha)
    if len(spread) >= MIN_BOOTSTRAP_SEEDS:
        weights = np.array([len(a) - 1 for a in spread], dtype=float)
        result.sigma_u2_low, result.sigma_u2_high = sigma_u2_bootstrap(variances, weights, alpha)
        if not result.homogeneity_p < HOMOGENEITY_LEVEL:
            result.sigma_u2_chi2_low, result.sigma_u2_chi2_high = chi2
    else:
        result.sigma_u2_low, result.sigma_u2_high = result.sigma_u2_chi2_low, result.sigma_u2_chi2_high = chi2
        result.warnings.append(f"fewer than {MIN_BOOTSTRAP_SEEDS} training seeds with two unlearning seeds: σ_U²'s "
                               "interval is the χ² one, exact only if every training seed has the same variance")


def nested_variance(groups: Sequence[Sequence[float] | np.ndarray], alpha: float = 0.05) -> Components:
    """The one-way nested random-effects decomposition Z_ij = μ + a_i + e_ij of `groups` (one array of Z_ij over j
    per training seed i; NaN dropped; empty groups ignored).

    Balanced grid (every training seed has J values), as in docs/seed-study.md:
        MSW = Σ_ij (Z_ij − Z̄_i)² / (I(J − 1)),  MSB = J Σ_i (Z̄_i − Z̄)² / (I − 1),
        σ̂_U² = MSW,  σ̂_T² = max(0, (MSB − MSW)/J),  ICC = σ̂_T² / (σ̂_T² + σ̂_U²);
        σ_U² interval: studentized bootstrap over training seeds (`sigma_u2_bootstrap`), and the χ² one with I(J − 1)
        degrees of freedom where equal per-seed variances are not rejected; σ_T² interval: Graybill–Wang
        (`graybill_wang`).
    Unbalanced grid (n_i values for seed i, N = Σ n_i): the unbalanced one-way ANOVA estimator (Henderson's method
    1), still unbiased: MSW = Σ_ij (Z_ij − Z̄_i)² / (N − I), MSB = Σ_i n_i (Z̄_i − Z̄)² / (I − 1) with Z̄ the mean of
    all N values, and J replaced by the effective n0 = (N − Σ n_i²/N)/(I − 1) (E[MSB] = σ_U² + n0 σ_T²). The χ²
    interval stays exact under equal variances (N − I degrees of freedom), the bootstrap weights seed i by n_i − 1;
    the Graybill–Wang interval with n0 is an approximation; a
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
                          warnings=["no values"])
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
        _unlearning_seed_spread(result, arrays, df_within, alpha)
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


@dataclass
class EvaluationSplit:
    """Z_ijk = μ + a_i + b_ij + e_ijk: training seed i, unlearning seed j nested in i, evaluation seed k nested in
    (i, j) (`evaluation_split`). `K` is the harmonic mean of the evaluation seeds per (i, j) cell."""

    I: int  # noqa: E741 (the study's notation)
    J: float
    K: float
    n: int
    mean: float
    sigma_t2: float
    sigma_u2: float
    sigma_e2: float

    @property
    def total(self) -> float:
        return self.sigma_t2 + self.sigma_u2 + self.sigma_e2

    def as_dict(self) -> dict:
        total = self.total
        shares = {f"{part}_share": getattr(self, f"sigma_{part[0]}2") / total if total > 0 else math.nan
                  for part in ("train", "unlearn", "eval")}
        return {"I": self.I, "J": self.J, "K": self.K, "n": self.n, "mean": self.mean, "total": total,
                "sigma_t2": self.sigma_t2, "sigma_u2": self.sigma_u2, "sigma_e2": self.sigma_e2, **shares}


def evaluation_split(cells: Sequence[Sequence[Sequence[float] | np.ndarray]]) -> EvaluationSplit | None:
    """The two-stage nested decomposition of `nested_variance` with a third stage, the evaluation seed: `cells[i][j]`
    holds the values of unlearning seed j of training seed i over its evaluation seeds (NaN dropped). None where no
    cell has two values (the evaluation seed's share is not identifiable).

    σ̂_E² = the pooled variance within the cells, Σ_ijk (Z_ijk − Z̄_ij)² / Σ_ij (K_ij − 1). The cell means Z̄_ij then
    follow the two-stage model with a within-seed variance of σ_U² + σ_E²/K, so `nested_variance` on them gives σ̂_T²
    unchanged and σ̂_U² = max(0, MSW − σ̂_E²/K), K the harmonic mean of the K_ij. On a balanced grid these are the
    textbook estimators of the balanced three-stage nested ANOVA (Searle, Casella & McCulloch, "Variance Components",
    §4.5): σ̂_E² = MS_E, σ̂_U² = (MS_B(A) − MS_E)/K, σ̂_T² = (MS_A − MS_B(A))/(JK), the differences floored at 0."""
    arrays = [[a for a in (_clean(c) for c in seed) if len(a)] for seed in cells]
    arrays = [seed for seed in arrays if seed]
    flat = [a for seed in arrays for a in seed]
    df_e = sum(len(a) - 1 for a in flat)
    if df_e == 0:
        return None
    ss_e = sum(0.0 if np.all(a == a[0]) else float(np.sum((a - _group_mean(a)) ** 2)) for a in flat)
    sigma_e2 = ss_e / df_e
    sizes = {len(a) for a in flat}
    k = float(sizes.pop()) if len(sizes) == 1 else len(flat) / sum(1 / len(a) for a in flat)
    components = nested_variance([[_group_mean(a) for a in seed] for seed in arrays])
    sigma_u2 = max(0.0, components.msw - sigma_e2 / k) if not math.isnan(components.msw) else math.nan
    every = np.concatenate(flat)
    return EvaluationSplit(I=len(arrays), J=components.J, K=k, n=len(every), mean=_group_mean(every),
                           sigma_t2=components.sigma_t2, sigma_u2=sigma_u2, sigma_e2=sigma_e2)


@dataclass
class SeedPlan:
    """The cheapest design (I training seeds × J unlearning seeds each) whose mean has a standard error at most
    `target_se`: SE² = σ_T²/I + σ_U²/(I·J), cost = I·c_T + I·J·c_U (c_T: training M_o once per training seed; c_U:
    M_r and the method, once per job). `j_star` = √(c_T σ_U² / (c_U σ_T²)) is the continuous optimum of J (Snedecor &
    Cochran, "Statistical Methods", 8th ed., §21.11, two-stage sampling); I and J are the integer optimum found by
    search, ties to the smaller J. `note` says what the numbers mean where they are degenerate."""

    I: int | None  # noqa: E741 (the study's notation)
    J: int | None
    j_star: float
    se: float
    cost_s: float
    note: str = ""


def seed_plan(sigma_t2: float, sigma_u2: float, cost_train: float, cost_unlearn: float,
              target_se: float) -> SeedPlan:
    """The seed plan for one metric (see `SeedPlan`); `cost_*` in seconds, from the sweep's records."""
    nan = math.nan
    if not all(math.isfinite(x) for x in (sigma_t2, sigma_u2)):
        return SeedPlan(None, None, nan, nan, nan, "σ_T² or σ_U² not identifiable from this grid")
    if not (math.isfinite(cost_train) and math.isfinite(cost_unlearn)) or cost_train < 0 or cost_unlearn <= 0:
        return SeedPlan(None, None, nan, nan, nan, "no training or unlearning time recorded")
    target = target_se**2
    if sigma_u2 == 0:
        j_star, note = 0.0, "σ_U² = 0: extra unlearning seeds buy nothing; only training seeds lower the error"
    elif sigma_t2 == 0:
        j_star, note = math.inf, ("σ̂_T² = 0: training seeds add cost and no information here; unlearning seeds on "
                                  "one model")
    else:
        j_star, note = math.sqrt(cost_train * sigma_u2 / (cost_unlearn * sigma_t2)), ""
    if sigma_t2 == 0 and sigma_u2 == 0:
        return SeedPlan(1, 1, j_star, 0.0, cost_train + cost_unlearn, "no seed variance: one job reaches any error")
    if sigma_t2 == 0:  # one training seed is cheapest: I·c_T more for the same I·J
        j = max(1, math.ceil(sigma_u2 / target * (1 - 1e-12)))
        return SeedPlan(1, j, j_star, math.sqrt(sigma_u2 / j), cost_train + j * cost_unlearn, note)
    fewest = math.floor(sigma_t2 / target) + 1  # the fewest training seeds with which some J reaches the target
    last = math.ceil(sigma_u2 / (fewest * target - sigma_t2))  # with it: more unlearning seeds only cost
    best: tuple[float, int, int] | None = None
    for j in range(1, min(max(1, last), MAX_PLAN_J) + 1):
        i = max(1, math.ceil((sigma_t2 + sigma_u2 / j) / target * (1 - 1e-12)))
        cost = i * (cost_train + j * cost_unlearn)
        if best is None or cost < best[0]:
            best = (cost, i, j)
    cost, i, j = best
    return SeedPlan(i, j, j_star, math.sqrt(sigma_t2 / i + sigma_u2 / (i * j)), cost, note)
