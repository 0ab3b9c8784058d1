"""Statistics across seeds, as docs/seed-study.md defines them (numpy and scipy only; no
torch, no pandas).

- `w2`: the exact 2-Wasserstein distance between two 1-D empirical distributions of any sizes;
- `w2_null`: its permutation null (pool, split at random, 95th percentile), seeded and reproducible;
- `nested_variance`: the one-way nested random-effects decomposition var(Z) = σ_T² + σ_U² with a studentized
  bootstrap interval over training seeds for σ_U² (it holds when var(Z | S = s) differs between training seeds; the
  exact χ² interval is kept beside it where a Brown–Forsythe test does not reject equal variances), the
  Graybill–Wang (modified large-sample) interval for σ_T², the per-training-seed variances with their
  heterogeneity test, the ICC and the warnings;
- `evaluation_split`: the three-stage nested decomposition with the evaluation seed, var(Z) = σ_T² + σ_U² + σ_E²
  (Henderson's method 1 for the two-fold nested classification: `nested_design`, `nested_mean_squares`,
  `nested_components`, which take arrays of simulated grids too), with intervals and a flag on every truncated
  component;
- `seed_plan`: the cheapest numbers of training, unlearning and evaluation seeds (I, J, K) that reach a target
  standard error, never fewer than two training seeds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from unlearnbench.report.compute.notes import Note
from unlearnbench.runtime.errors import invalid

FEW_TRAINING_SEEDS = 10  # warn below this many training seeds
NULL_PERMUTATIONS = 1000
NULL_SEED = 20240601  # the permutation null's base seed: the report is reproducible
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240602  # the σ_U² bootstrap's seed: the report is reproducible
MIN_BOOTSTRAP_SEEDS = 5  # fewer training seeds with two unlearning seeds: the χ² interval only, with a warning
MIN_PLAN_TRAINING_SEEDS = 2  # σ_T² cannot be estimated from one training seed: no plan prescribes fewer
MAX_PLAN_K = 1000  # the seed plan's search bound on K (evaluation seeds per unlearning seed)
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
    the effective n0 of the unbalanced ANOVA estimator; `J_min`/`J_max` give the range. `sigma_t2_truncated`: MSB <
    MSW, so that σ̂_T² is a negative estimate floored at 0: with few training seeds this happens by chance even where
    σ_T² is large, and it is no evidence that the training seed does not matter.
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
    sigma_t2_truncated: bool = False
    warnings: list[Note] = field(default_factory=list)

    def as_dict(self) -> dict:
        """Flat columns: every field, the warnings a tuple of notes."""
        return {**asdict(self), "warnings": tuple(self.warnings)}


def _f_infinite(p: float, df):
    """The p-quantile of F(df, ∞) = χ²(df)/df (`df` may be an array)."""
    return stats.chi2.ppf(p, df) / df


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
    `msb`, `msw` and the degrees of freedom may be arrays (simulations; a Satterthwaite `df_w` differs between
    draws): the bounds are then arrays.
    """
    g1 = 1 - 1 / _f_infinite(1 - alpha / 2, df_b)
    h1 = 1 / _f_infinite(alpha / 2, df_b) - 1
    g2 = 1 - 1 / _f_infinite(1 - alpha / 2, df_w)
    h2 = 1 / _f_infinite(alpha / 2, df_w) - 1
    f1 = stats.f.ppf(1 - alpha / 2, df_b, df_w)
    f2 = stats.f.ppf(alpha / 2, df_b, df_w)
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
        result.warnings.append(Note("chi2_sigma_u2", {"below": MIN_BOOTSTRAP_SEEDS}))


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
                          warnings=[Note("no_values")])
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
        result.warnings.append(Note("few_training_seeds_row", {"below": FEW_TRAINING_SEEDS, "I": count}))
    if not balanced:
        result.warnings.append(Note("unbalanced_row", {"J_min": result.J_min, "J_max": result.J_max, "n0": n0}))
    if df_within > 0:
        msw = ss_within / df_within
        result.msw, result.sigma_u2 = msw, msw
        _unlearning_seed_spread(result, arrays, df_within, alpha)
    if df_between > 0:
        result.msb = ss_between / df_between
    if df_within > 0 and df_between > 0:
        # J = 1 for some seeds only (n0 > 1 still): the estimators above remain the unbalanced ANOVA ones.
        result.sigma_t2 = max(0.0, (result.msb - result.msw) / n0)
        result.sigma_t2_truncated = bool(result.msb < result.msw)
        result.sigma_t2_low, result.sigma_t2_high = graybill_wang(result.msb, result.msw, df_between, df_within, n0,
                                                                  alpha)
        result.total = result.sigma_t2 + result.sigma_u2
        result.icc = result.sigma_t2 / result.total if result.total > 0 else nan
    elif df_between > 0:  # J = 1: one value per training seed
        result.total = 0.0 if np.all(every == every[0]) else float(np.var(every, ddof=1))
        result.warnings.append(Note("total_only"))
    elif df_within > 0:  # I = 1
        result.warnings.append(Note("sigma_u2_only"))
    else:
        result.warnings.append(Note("single_value"))
    return result


@dataclass(frozen=True)
class NestedDesign:
    """The shape of a two-fold nested grid Z_ijk (training seed i, unlearning seed j nested in i, evaluation seed k
    nested in (i, j)) and the coefficients of its expected mean squares (`nested_design`).

    `cell_sizes` lists n_ij cell by cell, the cells of training seed 0 first; `cells_per_seed` lists J_i. With
    a = I training seeds, b = Σ J_i cells and N = Σ n_ij values: df_A = a − 1, df_B = b − a, df_E = N − b, and
        E[MS_E] = σ_E²,  E[MS_B(A)] = σ_E² + k1 σ_U²,  E[MS_A] = σ_E² + k2 σ_U² + k3 σ_T².
    """

    cell_sizes: tuple[int, ...]
    cells_per_seed: tuple[int, ...]
    df_a: int
    df_b: int
    df_e: int
    k1: float
    k2: float
    k3: float
    balanced: bool

    @property
    def seed_sizes(self) -> np.ndarray:
        """n_i. = Σ_j n_ij, the values of each training seed."""
        return np.add.reduceat(np.array(self.cell_sizes), np.r_[0, np.cumsum(self.cells_per_seed)[:-1]])


def nested_design(cell_sizes: Sequence[int], cells_per_seed: Sequence[int]) -> NestedDesign:
    """The coefficients of the two-fold nested classification's expected mean squares (Searle, Casella & McCulloch,
    "Variance Components", Wiley 1992, ch. 5; any n_ij ≥ 1, J_i ≥ 1), with n_i. = Σ_j n_ij:
        k1 = (N − Σ_i Σ_j n_ij²/n_i.) / (b − a)
        k2 = (Σ_i Σ_j n_ij²/n_i. − Σ_ij n_ij²/N) / (a − 1)
        k3 = (N − Σ_i n_i.²/N) / (a − 1)
    (NaN where their degrees of freedom are 0). On a balanced grid (every J_i = J, every n_ij = K) they are exactly
    K, K and JK."""
    sizes, per_seed = tuple(int(n) for n in cell_sizes), tuple(int(j) for j in cells_per_seed)
    n_ij = np.array(sizes, dtype=float)
    seeds, cells, total = len(per_seed), len(sizes), float(n_ij.sum())
    n_i = np.add.reduceat(n_ij, np.r_[0, np.cumsum(per_seed)[:-1]])
    within_seeds = float(np.sum(np.add.reduceat(n_ij**2, np.r_[0, np.cumsum(per_seed)[:-1]]) / n_i))
    balanced = len(set(sizes)) == 1 and len(set(per_seed)) == 1
    df_a, df_b, df_e = seeds - 1, cells - seeds, int(total) - cells
    if balanced:
        k1 = k2 = float(sizes[0])
        k3 = float(sizes[0] * per_seed[0])
    else:
        k1 = (total - within_seeds) / df_b if df_b else math.nan
        k2 = (within_seeds - float(np.sum(n_ij**2)) / total) / df_a if df_a else math.nan
        k3 = (total - float(np.sum(n_i**2)) / total) / df_a if df_a else math.nan
    return NestedDesign(sizes, per_seed, df_a, df_b, df_e, k1, k2, k3, balanced)


def _segment_means(values: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """The means of consecutive segments of the last axis; exactly the common value of a segment whose values are all
    equal (no rounding noise, so that a deterministic stage has a variance of exactly 0)."""
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(int)
    means = np.add.reduceat(values, starts, axis=-1) / np.asarray(sizes, dtype=float)
    low, high = np.minimum.reduceat(values, starts, axis=-1), np.maximum.reduceat(values, starts, axis=-1)
    return np.where(low == high, low, means)


def nested_mean_squares(values, design: NestedDesign) -> tuple:
    """(MS_A, MS_B(A), MS_E) of the values laid out as `design` says (last axis: the N values cell by cell, seed by
    seed; leading axes: simulated grids of the same design), with the weighted sums of squares
        SS_A = Σ_i n_i. (Z̄_i.. − Z̄...)²,  SS_B = Σ_ij n_ij (Z̄_ij. − Z̄_i..)²,  SS_E = Σ_ijk (Z_ijk − Z̄_ij.)²;
    NaN where a mean square has no degrees of freedom."""
    values = np.asarray(values, dtype=float)
    sizes, per_seed = np.array(design.cell_sizes), np.array(design.cells_per_seed)
    seed_sizes = design.seed_sizes
    cell_means = _segment_means(values, sizes)
    seed_means = _segment_means(values, seed_sizes)
    grand = _segment_means(values, [values.shape[-1]])
    ss_e = np.sum((values - np.repeat(cell_means, sizes, axis=-1)) ** 2, axis=-1)
    ss_b = np.sum(sizes * (cell_means - np.repeat(seed_means, per_seed, axis=-1)) ** 2, axis=-1)
    ss_a = np.sum(seed_sizes * (seed_means - grand) ** 2, axis=-1)
    return tuple(ss / df if df else np.full_like(ss, math.nan) for ss, df in
                 ((ss_a, design.df_a), (ss_b, design.df_b), (ss_e, design.df_e)))


def nested_components(ms_a, ms_b, ms_e, design: NestedDesign, alpha: float = 0.05) -> dict:
    """Henderson's method 1 for the two-fold nested classification (Searle, Casella & McCulloch 1992, ch. 5): the
    unbiased estimates, *not* floored at 0, and their two-sided 1 − α intervals. The mean squares may be arrays.

        σ̂_E² = MS_E,  σ̂_U² = (MS_B(A) − MS_E)/k1,  σ̂_T² = (MS_A − MS_S)/k3,
        MS_S = (k2/k1) MS_B(A) + (1 − k2/k1) MS_E  (E[MS_S] = σ_E² + k2 σ_U²).
    Balanced grid (k1 = k2 = K, k3 = JK): MS_S = MS_B(A), and these are the balanced ANOVA estimators (Searle et al.
    §4.5). Intervals: σ_E² the exact χ²(df_E) one (`chi2_interval`); σ_U² Graybill–Wang (`graybill_wang`) on
    (MS_B(A), MS_E) with divisor k1; σ_T² Graybill–Wang on (MS_A, MS_S) with divisor k3 (Burdick & Graybill 1992,
    ch. 5, balanced two-fold nested design). On an unbalanced grid MS_B(A) and MS_A are not scaled χ² variables and
    MS_S is synthesised: it enters with Satterthwaite's degrees of freedom (Satterthwaite, Biometrics Bulletin 2,
    1946, 110–114) df_S = MS_S² / ((k2/k1 · MS_B(A))²/df_B + ((1 − k2/k1) MS_E)²/df_E), kept within [1, df_B + df_E],
    and a negative MS_S (possible where k2 > k1) as 0: those two intervals are approximate there (on a grid of 10
    training seeds with 1 to 4 unlearning seeds of 1 to 4 evaluation seeds, 20,000 simulated grids per case, the 95%
    intervals covered σ_T² in 0.945–0.963 of the grids where σ_T² > 0 and 0.98 where σ_T² = 0, σ_U² in 0.944–0.950
    where σ_U² > 0 and 0.975 where σ_U² = 0, σ_E² in 0.951).
    """
    nan = math.nan
    chi_low, chi_high = chi2_interval(ms_e, design.df_e, alpha)
    parts = {"sigma_e2": ms_e, "sigma_e2_low": chi_low, "sigma_e2_high": chi_high}
    empty = np.full_like(np.asarray(ms_e, dtype=float), nan)
    for name in ("sigma_u2", "sigma_u2_low", "sigma_u2_high", "sigma_t2", "sigma_t2_low", "sigma_t2_high"):
        parts[name] = empty
    if not design.df_b:  # one unlearning seed per training seed: σ_U² and σ_T² are confounded
        return parts
    parts["sigma_u2"] = (np.asarray(ms_b, dtype=float) - ms_e) / design.k1
    parts["sigma_u2_low"], parts["sigma_u2_high"] = graybill_wang(ms_b, ms_e, design.df_b, design.df_e, design.k1,
                                                                  alpha)
    if not design.df_a:  # one training seed
        return parts
    synthesised, df_synthesised = _synthesised_mean_square(ms_b, ms_e, design)
    parts["sigma_t2"] = (np.asarray(ms_a, dtype=float) - synthesised) / design.k3
    parts["sigma_t2_low"], parts["sigma_t2_high"] = graybill_wang(ms_a, np.maximum(synthesised, 0.0), design.df_a,
                                                                  df_synthesised, design.k3, alpha)
    return parts


def _synthesised_mean_square(ms_b, ms_e, design: NestedDesign) -> tuple:
    """(MS_S, its Satterthwaite degrees of freedom) of `nested_components`; exactly (MS_B(A), df_B) when balanced.
    With a negative weight (k2 > k1) MS_S can come near 0 and Satterthwaite's formula near 0 degrees of freedom,
    where the F quantiles are useless: the degrees of freedom are kept within [1, df_B + df_E]."""
    ms_b, ms_e = np.asarray(ms_b, dtype=float), np.asarray(ms_e, dtype=float)
    if design.balanced:
        return ms_b, float(design.df_b)
    weight = design.k2 / design.k1
    synthesised = weight * ms_b + (1 - weight) * ms_e
    spread = (weight * ms_b) ** 2 / design.df_b + ((1 - weight) * ms_e) ** 2 / design.df_e
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(spread > 0, synthesised**2 / spread, float(design.df_b))
    return synthesised, np.clip(df, 1.0, design.df_b + design.df_e)


@dataclass
class EvaluationSplit:
    """Z_ijk = μ + a_i + b_ij + e_ijk with var(a) = σ_T², var(b) = σ_U², var(e) = σ_E²: training seed i, unlearning
    seed j nested in i, evaluation seed k nested in (i, j) (`evaluation_split`).

    The components are floored at 0, and `sigma_t2_truncated` / `sigma_u2_truncated` say where a negative estimate
    was floored (MS_A below the mean square it is compared with; MS_B(A) < MS_E): a truncated 0 is no evidence that
    the stage does not matter. The shares of `as_dict` divide the floored components by their sum. `_low`/`_high`:
    the two-sided 1 − α intervals of `nested_components`, exact for σ_E², approximate (Graybill–Wang) otherwise.
    `balanced`: every training seed has the same J unlearning seeds and every (i, j) cell the same K ≥ 2 evaluation
    seeds; then J and K are those numbers and `estimator` is "balanced_anova". Otherwise `estimator` is
    "henderson_1", J is the effective number of unlearning seeds per training seed n0 = (b − Σ J_i²/b)/(I − 1) (b
    cells; b itself where I = 1) and K is k1, the effective number of evaluation seeds per cell (E[MS_B(A)] = σ_E² +
    k1 σ_U²; the mean cell size where no training seed has two cells); `J_min`..`J_max` and `K_min`..`K_max` give
    the ranges.
    """

    I: int  # noqa: E741 (the study's notation)
    J: float
    K: float
    n: int
    mean: float
    sigma_t2: float
    sigma_t2_low: float
    sigma_t2_high: float
    sigma_t2_truncated: bool
    sigma_u2: float
    sigma_u2_low: float
    sigma_u2_high: float
    sigma_u2_truncated: bool
    sigma_e2: float
    sigma_e2_low: float
    sigma_e2_high: float
    balanced: bool
    estimator: str
    J_min: int
    J_max: int
    K_min: int
    K_max: int
    ms_a: float
    ms_b: float
    ms_e: float
    warnings: list[Note] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.sigma_t2 + self.sigma_u2 + self.sigma_e2

    def as_dict(self) -> dict:
        """Flat columns: every field (the warnings a tuple of notes), the total and the three shares."""
        total = self.total
        shares = {f"{part}_share": getattr(self, f"sigma_{part[0]}2") / total if total > 0 else math.nan
                  for part in ("train", "unlearn", "eval")}
        return {**asdict(self), "warnings": tuple(self.warnings), "total": total, **shares}


def _floored(estimate: float) -> tuple[float, bool]:
    """(the estimate floored at 0, whether it was negative); NaN stays NaN, not truncated."""
    return (max(0.0, estimate), estimate < 0) if math.isfinite(estimate) else (math.nan, False)


def _split_warnings(design: NestedDesign, j_range: tuple[int, int], k_range: tuple[int, int]) -> list[Note]:
    warnings = []
    if not design.balanced:
        warnings.append(Note("unbalanced_three_stage", {"J_min": j_range[0], "J_max": j_range[1],
                                                        "K_min": k_range[0], "K_max": k_range[1]}))
    if not design.df_b:
        warnings.append(Note("not_apart"))
    elif not design.df_a:
        warnings.append(Note("no_sigma_t2"))
    return warnings


def evaluation_split(cells: Sequence[Sequence[Sequence[float] | np.ndarray]],
                     alpha: float = 0.05) -> EvaluationSplit | None:
    """The three-stage nested decomposition of `cells[i][j]`, the values of unlearning seed j of training seed i over
    its evaluation seeds (NaN dropped, empty cells and seeds ignored), by Henderson's method 1 (`nested_components`;
    the balanced ANOVA on a balanced grid). Cells with one value are allowed: they add to the unlearning and
    training stages, not to σ_E². None where no cell has two values (σ_E² is not identifiable).

    On a balanced grid σ̂_T² and its interval equal those of `nested_variance` on the cell means Z̄_ij. (whose MSB and
    MSW are MS_A/K and MS_B(A)/K), whereas `nested_variance` on the J·K values of a training seed taken as J·K
    unlearning seeds would be biased: E[σ̂_T²] = σ_T² + σ_U²(K − 1)/(JK − 1), and its σ̂_U² would hold σ_E².
    """
    arrays = [[a for a in (_clean(c) for c in seed) if len(a)] for seed in cells]
    arrays = [seed for seed in arrays if seed]
    flat = [a for seed in arrays for a in seed]
    if not any(len(a) >= 2 for a in flat):
        return None
    design = nested_design([len(a) for a in flat], [len(seed) for seed in arrays])
    values = np.concatenate(flat)
    ms_a, ms_b, ms_e = (float(ms) for ms in nested_mean_squares(values, design))
    parts = {name: float(value) for name, value in nested_components(ms_a, ms_b, ms_e, design, alpha).items()}
    (sigma_t2, t_truncated), (sigma_u2, u_truncated) = _floored(parts["sigma_t2"]), _floored(parts["sigma_u2"])
    j_range = (min(design.cells_per_seed), max(design.cells_per_seed))
    k_range = (min(design.cell_sizes), max(design.cell_sizes))
    count, cell_count = len(arrays), len(flat)
    if design.balanced:
        j, k = float(j_range[0]), float(k_range[0])
    else:
        j = (cell_count - sum(n**2 for n in design.cells_per_seed) / cell_count) / design.df_a if design.df_a \
            else float(cell_count)
        k = design.k1 if design.df_b else len(values) / cell_count
    return EvaluationSplit(
        I=count, J=j, K=k, n=len(values), mean=float(_segment_means(values, [len(values)])[0]),
        sigma_t2=sigma_t2, sigma_t2_low=parts["sigma_t2_low"], sigma_t2_high=parts["sigma_t2_high"],
        sigma_t2_truncated=t_truncated, sigma_u2=sigma_u2, sigma_u2_low=parts["sigma_u2_low"],
        sigma_u2_high=parts["sigma_u2_high"], sigma_u2_truncated=u_truncated, sigma_e2=parts["sigma_e2"],
        sigma_e2_low=parts["sigma_e2_low"], sigma_e2_high=parts["sigma_e2_high"], balanced=design.balanced,
        estimator="balanced_anova" if design.balanced else "henderson_1", J_min=j_range[0], J_max=j_range[1],
        K_min=k_range[0], K_max=k_range[1], ms_a=ms_a, ms_b=ms_b, ms_e=ms_e,
        warnings=_split_warnings(design, j_range, k_range))


@dataclass
class SeedPlan:
    """The cheapest design (I training seeds × J unlearning seeds each × K evaluation seeds per unlearning seed) whose
    mean has a standard error at most `target_se` (`seed_plan`):
        SE² = σ_T²/I + σ_U²/(I·J) + σ_E²/(I·J·K),   cost = I·(c_T + J·(c_U + (K − 1)·c_E)),
    c_T: training M_o (once per training seed); c_U: one job beyond M_o (M_r's training and the method, with one
    evaluation seed); c_E: one more evaluation seed of the same (training, unlearning) pair. I ≥
    `MIN_PLAN_TRAINING_SEEDS` always. `j_star` = √(c_T σ_W² / (c_U σ_T²)), σ_W² = σ_U² + σ_E² (the variance within a
    training seed of jobs with one evaluation seed each) is the continuous optimum of J at K = 1 (Snedecor & Cochran,
    "Statistical Methods", 8th ed., 1989, §21.11, two-stage sampling); I, J and K are the integer optimum found by
    search, ties to the smaller J, then K. None where the inputs do not allow a plan, and `note` says why; `note`
    also says what the numbers mean where they are degenerate. A plan from a pilot's estimates is a first estimate:
    the components' upper confidence limits give the conservative plan."""

    I: int | None  # noqa: E741 (the study's notation)
    J: int | None
    K: int | None
    j_star: float
    se: float
    cost_s: float
    note: tuple[Note, ...] = ()


def _unplannable(sigma_t2: float, sigma_u2: float, sigma_e2: float, cost_train: float,
                 cost_unlearn: float) -> Note | None:
    """Why no plan can be made from these inputs (None where one can)."""
    components = {"σ_T²": sigma_t2, "σ_U²": sigma_u2, "σ_E²": sigma_e2}
    if any(math.isnan(value) for value in components.values()):
        return Note("sigma_t2_or_u2_unknown") if math.isnan(sigma_t2) or math.isnan(sigma_u2) \
            else Note("sigma_e2_unknown")
    unbounded = [name for name, value in components.items() if math.isinf(value)]
    if unbounded:
        return Note("unbounded", {"components": unbounded})
    if not (math.isfinite(cost_train) and math.isfinite(cost_unlearn)) or cost_train < 0 or cost_unlearn <= 0:
        return Note("no_time")
    return None


def _check_plan_inputs(target_se: float, **components: float) -> None:
    if not (isinstance(target_se, int | float) and math.isfinite(target_se) and target_se > 0):
        raise invalid("target_se", "seed_plan", "a positive number", repr(target_se))
    for name, value in components.items():
        if value < 0:
            raise invalid(name, "seed_plan", "a variance ≥ 0 (or NaN, inf)", repr(value))


def _cheapest(sigma_t2: float, counts: np.ndarray, within: np.ndarray, cost_train: float, cost_job: np.ndarray,
              target: float) -> tuple[float, int, int, int]:
    """(cost, I, J, K) of the cheapest design with I ≥ MIN_PLAN_TRAINING_SEEDS and K among `counts`, where K =
    counts[k] has the within-training-seed variance `within[k]` per job and the cost `cost_job[k]` per job.

    Exact: the optimum has I = I_min(J) and J = J_min(I) (fewer of either misses the target, more only costs), so it
    is either a pair (I_min(J), J) with J ≤ S or a pair (I, J_min(I)) with I ≤ I_min(S) ≤ fewest + S + 1, where
    fewest = ⌊σ_T²/target²⌋ + 1 and S = ⌈√(σ_W²/target²)⌉: about 2S candidates per K, however small the target."""
    tolerance = 1 - 1e-12  # a design exactly on the target reaches it, whatever the last bit of the division
    first = max(MIN_PLAN_TRAINING_SEEDS, math.ceil(sigma_t2 / target * tolerance))
    fewest = max(MIN_PLAN_TRAINING_SEEDS, math.floor(sigma_t2 / target) + 1)
    span = max(1, math.ceil(math.sqrt(float(within.max()) / target)))
    within, cost_job = within[:, None], cost_job[:, None]
    j_side = np.broadcast_to(np.arange(1, span + 1, dtype=float), (len(within), span))
    i_for_j = np.maximum(MIN_PLAN_TRAINING_SEEDS, np.ceil((sigma_t2 + within / j_side) / target * tolerance))
    i_side = np.broadcast_to(np.arange(first, fewest + span + 2, dtype=float), (len(within), fewest + span + 2 - first))
    gap = i_side * target - sigma_t2  # > 0 from `fewest` on
    with np.errstate(divide="ignore", invalid="ignore"):
        j_for_i = np.where(within == 0, 1.0, np.where(gap > 0, np.maximum(1.0, np.ceil(within / gap * tolerance)),
                                                      math.inf))
    designs_i, designs_j = np.hstack([i_for_j, i_side]), np.hstack([j_side, j_for_i])
    designs_k = np.broadcast_to(np.asarray(counts, dtype=float)[:, None], designs_i.shape)
    costs = designs_i * (cost_train + designs_j * cost_job)
    cheapest = np.flatnonzero(costs.ravel() <= costs.min() * (1 + 1e-12))
    best = min(cheapest, key=lambda c: (designs_j.flat[c], designs_k.flat[c], designs_i.flat[c]))
    return (float(costs.flat[best]), int(designs_i.flat[best]), int(designs_j.flat[best]),
            int(designs_k.flat[best]))


def _evaluation_seeds(sigma_e2: float, cost_eval: float) -> bool:
    """Whether the plan searches K: σ_E² > 0 and a recorded time for one more evaluation seed."""
    return sigma_e2 > 0 and math.isfinite(cost_eval) and cost_eval >= 0


def _relaxed_cost(sigma_t2: float, within: np.ndarray, cost_train: float, cost_job: np.ndarray,
                  target: float) -> np.ndarray:
    """The cheapest cost with real I and J ≥ 1, a lower bound of every integer design's: (√(σ_T² c_T) + √(σ_W² c))²
    /target² at J* = √(c_T σ_W² / (c σ_T²)) (Snedecor & Cochran §21.11), or its value at J = 1 where J* < 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        j_star = np.sqrt(cost_train * within / (cost_job * sigma_t2))
    at_optimum = (math.sqrt(sigma_t2 * cost_train) + np.sqrt(within * cost_job)) ** 2 / target
    return np.where(j_star >= 1, at_optimum, (sigma_t2 + within) * (cost_train + cost_job) / target)


def _cheapest_with_k(sigma_t2: float, sigma_u2: float, sigma_e2: float, cost_train: float, cost_unlearn: float,
                     cost_eval: float, target: float) -> tuple[float, int, int, int]:
    """`_cheapest` over K = 1..MAX_PLAN_K: only the K whose relaxed cost (`_relaxed_cost`) does not exceed the best
    integer design at K = 1 or at the relaxed optimum's K can hold the optimum; those are searched."""
    counts = np.arange(1, MAX_PLAN_K + 1, dtype=float)
    within, cost_job = sigma_u2 + sigma_e2 / counts, cost_unlearn + (counts - 1) * cost_eval
    relaxed = _relaxed_cost(sigma_t2, within, cost_train, cost_job, target)
    candidates = sorted({0, int(np.argmin(relaxed))})
    bound = _cheapest(sigma_t2, counts[candidates], within[candidates], cost_train, cost_job[candidates], target)[0]
    kept = relaxed <= bound * (1 + 1e-9)
    return _cheapest(sigma_t2, counts[kept], within[kept], cost_train, cost_job[kept], target)


def _plan_notes(sigma_t2: float, sigma_u2: float, sigma_e2: float, searched_k: bool, one_seed_cost: float,
                cost: float, k: int) -> list[Note]:
    """What a plan's numbers mean where they are degenerate or where the floor of two training seeds decided them."""
    notes = []
    if sigma_e2 > 0 and not searched_k:
        notes.append(Note("no_evaluation_time"))
    if sigma_u2 == 0 and sigma_e2 == 0 and sigma_t2 > 0:
        notes.append(Note("sigma_u2_zero"))
    if sigma_t2 == 0:
        notes.append(Note("sigma_t2_zero", {"least": MIN_PLAN_TRAINING_SEEDS}))
    elif one_seed_cost < cost:
        notes.append(Note("training_seed_floor", {"least": MIN_PLAN_TRAINING_SEEDS}))
    if k == MAX_PLAN_K:
        notes.append(Note("k_bound", {"K": MAX_PLAN_K}))
    return notes


def _one_seed_cost(sigma_t2: float, within: np.ndarray, cost_train: float, cost_job: np.ndarray,
                   target: float) -> float:
    """The cheapest design with a single training seed (inf where none reaches the target): what the floor of two
    training seeds displaces."""
    if sigma_t2 >= target:
        return math.inf
    jobs = np.maximum(1.0, np.ceil(within / (target - sigma_t2) * (1 - 1e-12)))
    return float(np.min(cost_train + jobs * cost_job))


def seed_plan(sigma_t2: float, sigma_u2: float, cost_train: float, cost_unlearn: float, target_se: float,
              sigma_e2: float = 0.0, cost_eval: float = math.nan) -> SeedPlan:
    """The seed plan for one metric (see `SeedPlan`); `cost_*` in seconds, from the sweep's records.

    `sigma_e2` = 0 where the sweep does not separate the evaluation seed (σ_E² is then inside σ_U²): K = 1 and the
    two-stage plan. With σ_E² > 0 and `cost_eval` (c_E) recorded, K is searched up to `MAX_PLAN_K`; without
    `cost_eval`, K = 1 and σ_E² adds to σ_U². Components may be the upper limits of their intervals: an infinite one
    gives no plan. NaN: not identifiable, no plan. σ_T² = 0 (often a truncated negative estimate): still I ≥ 2,
    the cheapest such design. All components 0: I = 2, J = K = 1.
    """
    _check_plan_inputs(target_se, sigma_t2=sigma_t2, sigma_u2=sigma_u2, sigma_e2=sigma_e2)
    nan = math.nan
    reason = _unplannable(sigma_t2, sigma_u2, sigma_e2, cost_train, cost_unlearn)
    if reason:
        return SeedPlan(None, None, None, nan, nan, nan, (reason,))
    within_one = sigma_u2 + sigma_e2  # the two-stage within-seed variance of jobs with one evaluation seed
    j_star = 0.0 if within_one == 0 else math.inf if sigma_t2 == 0 else math.sqrt(
        cost_train * within_one / (cost_unlearn * sigma_t2))
    if sigma_t2 == within_one == 0:
        return SeedPlan(MIN_PLAN_TRAINING_SEEDS, 1, 1, j_star, 0.0,
                        float(MIN_PLAN_TRAINING_SEEDS * (cost_train + cost_unlearn)),
                        (Note("no_seed_variance", {"least": MIN_PLAN_TRAINING_SEEDS}),))
    target = target_se**2
    searched_k = _evaluation_seeds(sigma_e2, cost_eval)
    if searched_k:
        cost, i, j, k = _cheapest_with_k(sigma_t2, sigma_u2, sigma_e2, cost_train, cost_unlearn, cost_eval, target)
        within, cost_job = np.array([sigma_u2 + sigma_e2 / k]), np.array([cost_unlearn + (k - 1) * cost_eval])
    else:
        within, cost_job = np.array([within_one]), np.array([cost_unlearn])
        cost, i, j, k = _cheapest(sigma_t2, np.ones(1), within, cost_train, cost_job, target)
    notes = _plan_notes(sigma_t2, sigma_u2, sigma_e2, searched_k,
                        _one_seed_cost(sigma_t2, within, cost_train, cost_job, target), cost, k)
    se = math.sqrt(sigma_t2 / i + sigma_u2 / (i * j) + sigma_e2 / (i * j * k))
    return SeedPlan(i, j, k, j_star, se, cost, tuple(notes))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The t-interval of the mean of `values` (NaN with fewer than two): the tuning tables' and dynamics.csv's."""
    if len(values) < 2:
        return math.nan, math.nan
    mean, sem = float(np.mean(values)), float(stats.sem(values))
    half = float(stats.t.ppf((1 + level) / 2, len(values) - 1)) * sem
    return mean - half, mean + half
