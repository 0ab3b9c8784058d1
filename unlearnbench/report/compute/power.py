"""How many seeds a study needs to tell two methods apart on one metric (numpy and scipy only; no torch, no pandas).

Both methods run in the same jobs, so they are compared on the same blocks: D_ij = d_A,ij − d_B,ij, the difference
of their scores in the job of training seed i and unlearning seed j (the caller builds the scores). The model is
the nested two-stage design on the difference, D_ij = δ + a_i + e_ij with var(a_i) = σ_TD², var(e_ij) = σ_UD²: the
components of the difference, not either method's own (what two methods share in a job, its M_o and its forget
set, cancels). It is the multisite design of Raudenbush & Liu, "Statistical power and optimal design for multisite
randomized trials", Psychological Methods 5(2), 2000, 199–213, with the training seeds as the sites and a paired
difference in place of a treatment contrast within each site.

- `paired_test`: the test of δ = 0, the one-sample t-test on the I training-seed means D̄_i with df = I − 1 (exact
  under normality on a balanced grid, where every D̄_i has the variance σ_TD² + σ_UD²/J), its 1 − α interval and
  two-sided p-value, and the nested components of D (`stats.nested_variance`);
- `seed_mean_test`: the same test on arrays of training-seed means (simulated studies);
- `power`: its power for a true δ at (I, J), that of the noncentral t with df = I − 1 and noncentrality
  δ√I / √(σ_TD² + σ_UD²/J) (Raudenbush & Liu's λ = I δ² / (σ_TD² + σ_UD²/J) for the F(1, I − 1) form);
- `power_plan`: the cheapest design (I ≥ 2 training seeds, J ≥ 1 unlearning seeds each) whose test has at least the
  target power, at the cost I·(c_T + J·c_U).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.stats import MIN_PLAN_TRAINING_SEEDS, nested_variance
from unlearnbench.runtime.errors import invalid

ALPHA = 0.05  # the test's level
TARGET_POWER = 0.8
MAX_POWER_JOBS = 1_000_000  # a difference whose designs all need more jobs than this is not planned
J_SEARCH_CAP = 2**50  # no J beyond this: a design that would need more is unreachable at that I


@dataclass
class PairedTest:
    """The paired comparison of two methods over training seeds (`paired_test`).

    `mean` is the mean of the I training-seed means D̄_i (the test's estimand; on an unbalanced grid it differs from
    the mean of all values), `se` its standard error sd(D̄_i)/√I, `low`/`high` its two-sided 1 − α t-interval, `t`
    and `p` the test of δ = 0 (df = I − 1). `J` is the common number of unlearning seeds per training seed, or the
    effective n0 on an unbalanced grid, where the D̄_i have unequal variances and the test is approximate. The
    components σ_TD² (`sigma_t2`) and σ_UD² (`sigma_u2`) with their intervals and truncation flag are those of
    `stats.nested_variance` on the D_ij. `note` says where the test degenerates.
    """

    I: int  # noqa: E741 (the study's notation)
    J: float
    n: int
    mean: float
    se: float
    low: float
    high: float
    t: float
    p: float
    sigma_t2: float
    sigma_t2_low: float
    sigma_t2_high: float
    sigma_t2_truncated: bool
    sigma_u2: float
    sigma_u2_low: float
    sigma_u2_high: float
    balanced: bool
    note: tuple[Note, ...] = ()


@dataclass
class PowerPlan:
    """The cheapest design (I training seeds × J unlearning seeds each) whose paired t-test has at least the target
    power against the difference δ (`power_plan`), its power and its cost I·(c_T + J·c_U) in seconds. I and J are
    None where no plan can be made, and `note` says why."""

    I: int | None  # noqa: E741 (the study's notation)
    J: int | None
    power: float
    cost_s: float
    note: tuple[Note, ...] = ()


def _check_probability(name: str, value: float, owner: str) -> None:
    if not (isinstance(value, int | float) and 0 < value < 1):
        raise invalid(name, owner, "a number in (0, 1)", repr(value))


def _exact_mean(values: np.ndarray) -> np.ndarray:
    """The mean along the last axis, exactly the common value where all values are equal."""
    low, high = values.min(axis=-1), values.max(axis=-1)
    return np.where(low == high, low, values.mean(axis=-1))


def seed_mean_test(means, alpha: float = ALPHA) -> tuple:
    """(mean, se, low, high, t, p) of the one-sample t-test of δ = 0 on training-seed means (last axis, I ≥ 2;
    leading axes: simulated studies). Means that all agree have se = 0: the interval is that point, and p is 1 where
    they are 0 and 0 otherwise (t = ±∞)."""
    _check_probability("alpha", alpha, "seed_mean_test")
    values = np.asarray(means, dtype=float)
    count = values.shape[-1]
    mean = _exact_mean(values)
    spread = values.min(axis=-1) < values.max(axis=-1)
    se = np.where(spread, values.std(axis=-1, ddof=1) if count > 1 else np.nan, 0.0) / math.sqrt(count)
    half = stats.t.ppf(1 - alpha / 2, count - 1) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(spread, mean / se, np.where(mean == 0, 0.0, np.copysign(np.inf, mean)))
    p = 2 * stats.t.sf(np.abs(t), count - 1)
    result = (mean, se, mean - half, mean + half, t, p)
    return tuple(float(x) for x in result) if np.ndim(mean) == 0 else result


def paired_test(groups: Sequence[Sequence[float] | np.ndarray], alpha: float = ALPHA) -> PairedTest:
    """The paired comparison of two methods from `groups`: per training seed, the differences D_ij over its unlearning
    seeds (NaN dropped, empty groups ignored). See `PairedTest`; fewer than two training seeds: no test (NaN) and a
    note."""
    _check_probability("alpha", alpha, "paired_test")
    arrays = [a for a in (np.asarray(g, dtype=float).ravel() for g in groups) if np.isfinite(a).any()]
    arrays = [a[np.isfinite(a)] for a in arrays]
    components = nested_variance(arrays, alpha)
    nan = math.nan
    means = np.array([_exact_mean(a) for a in arrays])
    test = (float(means[0]) if len(means) else nan, nan, nan, nan, nan, nan)
    note: tuple[Note, ...] = ()
    if len(means) >= 2:
        test = seed_mean_test(means, alpha)
        if test[1] == 0:
            note = (Note("same_mean_difference"),)
    else:
        note = (Note("no_test"),)
    if not components.balanced:
        note = (*note, Note("unbalanced_test"))
    return PairedTest(I=components.I, J=components.J, n=components.n, mean=test[0], se=test[1], low=test[2],
                      high=test[3], t=test[4], p=test[5], sigma_t2=components.sigma_t2,
                      sigma_t2_low=components.sigma_t2_low, sigma_t2_high=components.sigma_t2_high,
                      sigma_t2_truncated=components.sigma_t2_truncated, sigma_u2=components.sigma_u2,
                      sigma_u2_low=components.sigma_u2_low, sigma_u2_high=components.sigma_u2_high,
                      balanced=components.balanced, note=note)


def _power(delta, variance, count, alpha: float):
    """The two-sided test's power at δ, the variance of a training-seed mean, and I (arrays broadcast): P(T > q) +
    P(T < −q) with T ~ t'(I − 1, |δ|√I/√variance), q = t(1 − α/2; I − 1); the lower tail as P(t'(−nc) > q), which
    scipy evaluates where its cdf far out in the tail does not. 1 where the variance is 0 and δ is not."""
    delta, variance, count = (np.asarray(x, dtype=float) for x in (delta, variance, count))
    df = count - 1
    quantile = stats.t.ppf(1 - alpha / 2, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        noncentrality = np.where(variance > 0, np.abs(delta) * np.sqrt(count / variance), 0.0)
    result = stats.nct.sf(quantile, df, noncentrality) + stats.nct.sf(quantile, df, -noncentrality)
    return np.where(variance > 0, result, np.where(delta != 0, 1.0, math.nan))


def power(delta, sigma_t2, sigma_u2, I, J, alpha: float = ALPHA):  # noqa: E741 (the study's notation)
    """The power of the paired t-test at level `alpha` (two-sided) against a true difference `delta`, with I
    training seeds and J unlearning seeds each: the noncentral t with df = I − 1 and noncentrality
    δ√I / √(σ_TD² + σ_UD²/J). Every argument but `alpha` may be an array (they broadcast); NaN where I < 2, J < 1 or
    an argument is NaN; α at δ = 0 (the test's size); 1 where both components are 0 and δ is not."""
    _check_probability("alpha", alpha, "power")
    delta, sigma_t2, sigma_u2, count, per = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                                                  (delta, sigma_t2, sigma_u2, I, J)))
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = sigma_t2 + sigma_u2 / per
    valid = (count >= 2) & (per >= 1) & np.isfinite(variance) & np.isfinite(delta)
    result = np.where(valid, _power(np.where(valid, delta, 1.0), np.where(valid, variance, 1.0),
                                    np.where(valid, count, 2.0), alpha), math.nan)
    return float(result) if result.ndim == 0 else result


def _limit_noncentrality(target_power: float, alpha: float) -> float:
    """z(1 − α/2) + z(power): the noncentrality the test needs as I grows (the normal test's), a lower bound of every
    finite I's."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(target_power))


def _unplannable(delta: float, sigma_t2: float, sigma_u2: float, cost_train: float,
                 cost_unlearn: float) -> Note | None:
    """Why no plan can be made from these inputs (None where one can)."""
    if not math.isfinite(delta):
        return Note("no_difference")
    if delta == 0:
        return Note("zero_difference")
    if math.isnan(sigma_t2) or math.isnan(sigma_u2):
        return Note("difference_components_unknown")
    if math.isinf(sigma_t2) or math.isinf(sigma_u2):
        return Note("difference_unbounded")
    if sigma_t2 < 0 or sigma_u2 < 0:
        raise invalid("sigma_t2" if sigma_t2 < 0 else "sigma_u2", "power_plan", "a variance ≥ 0",
                      repr(sigma_t2 if sigma_t2 < 0 else sigma_u2))
    if not (math.isfinite(cost_train) and math.isfinite(cost_unlearn)) or cost_train < 0 or cost_unlearn <= 0:
        return Note("no_time")
    return None


class _Search:
    """Integer searches over the monotone feasibility of (I, J): power grows with I (noncentrality and df) and with J
    (the variance of a training-seed mean falls)."""

    def __init__(self, delta: float, sigma_t2: float, sigma_u2: float, target_power: float, alpha: float):
        self.delta, self.sigma_t2, self.sigma_u2 = delta, sigma_t2, sigma_u2
        self.target_power, self.alpha = target_power, alpha

    def reaches(self, count: np.ndarray, per: np.ndarray) -> np.ndarray:
        variance = self.sigma_t2 + np.where(per > 0, self.sigma_u2 / np.maximum(per, 1), np.inf)
        power_now = _power(self.delta, np.where(np.isfinite(variance), variance, 1.0), np.maximum(count, 2),
                           self.alpha)
        return (power_now >= self.target_power) & np.isfinite(variance) & (count >= 2)

    def smallest(self, fixed: np.ndarray, vary_i: bool, low: int, cap: float) -> np.ndarray:
        """Per value of `fixed` (J where `vary_i`, else I): the smallest I (or J) above `low` that reaches the target
        power, by doubling then bisection; inf where none up to `cap` does."""
        def test(values):
            return self.reaches(values, fixed) if vary_i else self.reaches(fixed, values)

        lo = np.full(fixed.shape, float(low))
        hi = np.full(fixed.shape, float(low + 1))
        while True:
            done = test(hi) | (hi >= cap)
            if done.all():
                break
            lo, hi = np.where(done, lo, hi), np.where(done, hi, hi * 2)
        reached = test(hi)
        while np.any(hi - lo > 1):
            middle = np.floor((lo + hi) / 2)
            ok = test(middle)
            hi, lo = np.where(ok, middle, hi), np.where(ok, lo, middle)
        return np.where(reached, hi, np.inf)


def power_plan(delta: float, sigma_t2: float, sigma_u2: float, cost_train: float, cost_unlearn: float,
               target_power: float = TARGET_POWER, alpha: float = ALPHA) -> PowerPlan:
    """The cheapest (I ≥ 2, J ≥ 1) whose paired t-test at level `alpha` has power ≥ `target_power` against a true
    difference `delta`, from the components σ_TD², σ_UD² of the difference and the costs c_T (training M_o) and c_U
    (one job beyond M_o, both methods included); ties to the smaller J.

    Exact search: the optimum has I = I_min(J) and J = J_min(I), so it is a pair (I_min(J), J) with J ≤ S or a pair
    (I, J_min(I)) with I_inf ≤ I ≤ I_min(S), where I_inf is the smallest I that reaches the power as J → ∞ and S =
    ⌈λ σ_UD / |δ|⌉ with λ = z(1 − α/2) + z(power) balances the two sides (each about S values, each found by
    bisection). A difference of 0, NaN or unbounded components, or one so small that every design needs more than
    `MAX_POWER_JOBS` jobs: no plan, and the note says why.
    """
    _check_probability("target_power", target_power, "power_plan")
    _check_probability("alpha", alpha, "power_plan")
    reason = _unplannable(delta, sigma_t2, sigma_u2, cost_train, cost_unlearn)
    if reason:
        return PowerPlan(None, None, math.nan, math.nan, (reason,))
    least = MIN_PLAN_TRAINING_SEEDS
    if sigma_t2 + sigma_u2 == 0:
        return PowerPlan(least, 1, 1.0, least * (cost_train + cost_unlearn),
                         (Note("no_spread", {"least": least}),))
    noncentrality = _limit_noncentrality(target_power, alpha)
    if noncentrality**2 * (sigma_t2 + sigma_u2) / delta**2 > MAX_POWER_JOBS:
        return PowerPlan(None, None, math.nan, math.nan,
                         (Note("too_small", {"delta": delta, "max_jobs": MAX_POWER_JOBS}),))
    search = _Search(delta, sigma_t2, sigma_u2, target_power, alpha)
    span = max(1, math.ceil(noncentrality * math.sqrt(sigma_u2) / abs(delta)))
    per_seed = np.arange(1, span + 1, dtype=float)
    seeds_for_j = search.smallest(per_seed, True, least - 1, math.inf)
    infinite_j = least if sigma_t2 == 0 else int(search.smallest(np.array([np.inf]), True, least - 1, math.inf)[0])
    seeds = np.arange(infinite_j, int(seeds_for_j[-1]) + 1, dtype=float)
    per_for_i = search.smallest(seeds, False, 0, J_SEARCH_CAP)
    designs_i, designs_j = np.r_[seeds_for_j, seeds], np.r_[per_seed, per_for_i]
    costs = designs_i * (cost_train + designs_j * cost_unlearn)
    cheapest = np.flatnonzero(costs <= costs.min() * (1 + 1e-12))
    best = min(cheapest, key=lambda c: (designs_j[c], designs_i[c]))
    count, per = int(designs_i[best]), int(designs_j[best])
    return PowerPlan(count, per, power(delta, sigma_t2, sigma_u2, count, per, alpha), float(costs[best]))
