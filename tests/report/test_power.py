"""Power to tell two methods apart (unlearnbench.report.compute.power) against simulated studies of the nested design
D_ij = δ + a_i + e_ij and against exhaustive searches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from unlearnbench.report.compute.power import (
    MAX_POWER_JOBS,
    paired_test,
    power,
    power_plan,
    seed_mean_test,
)
from unlearnbench.report.compute.stats import nested_variance
from unlearnbench.report.render.words import joined
from unlearnbench.runtime.errors import UserError

STUDIES = 10_000  # simulated studies per case: a Monte-Carlo standard error of 0.5 points at a rate of 0.5


def studies(delta: float, sigma_t2: float, sigma_u2: float, count: int, per: int, seed: int) -> np.ndarray:
    """`STUDIES` simulated grids of differences D_ij = δ + a_i + e_ij, shape (studies, I, J)."""
    rng = np.random.default_rng([seed, count, per])
    return (delta + rng.normal(0, math.sqrt(sigma_t2), (STUDIES, count, 1))
            + rng.normal(0, math.sqrt(sigma_u2), (STUDIES, count, per)))


def rejection_rate(d: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """(the share of studies whose paired t-test rejects δ = 0, its Monte-Carlo standard error)."""
    p = seed_mean_test(d.mean(-1), alpha)[-1]
    rate = float(np.mean(p < alpha))
    return rate, math.sqrt(max(rate * (1 - rate), 1e-4) / len(p))


def test_the_paired_t_test_has_its_size_and_its_interval_its_coverage():
    """At δ = 0 the test rejects in 5% of the studies, and at δ = 0.3 its 95% interval covers δ in 95% of them,
    each within three Monte-Carlo standard errors (I = 6, J = 3); a few studies through `paired_test` agree with
    the vectorised test and with scipy's one-sample t-test on the training-seed means."""
    null = studies(0.0, 0.5, 1.0, 6, 3, seed=1)
    rate, error = rejection_rate(null)
    assert rate == pytest.approx(0.05, abs=3 * error)
    shifted = studies(0.3, 0.5, 1.0, 6, 3, seed=2)
    _, _, low, high, _, _ = seed_mean_test(shifted.mean(-1))
    covered = np.mean((low <= 0.3) & (high >= 0.3))
    assert covered == pytest.approx(0.95, abs=3 * math.sqrt(0.95 * 0.05 / STUDIES))
    for k in range(3):
        test = paired_test(list(shifted[k]))
        scipy_test = scipy_stats.ttest_1samp(shifted[k].mean(-1), 0.0)
        assert (test.mean, test.low, test.high) == pytest.approx((shifted[k].mean(), low[k], high[k]), rel=1e-12)
        assert (test.t, test.p) == pytest.approx((scipy_test.statistic, scipy_test.pvalue), rel=1e-10)
        components = nested_variance(list(shifted[k]))
        assert (test.sigma_t2, test.sigma_u2, test.sigma_t2_high) == (components.sigma_t2, components.sigma_u2,
                                                                      components.sigma_t2_high)
        assert (test.I, test.J, test.n, test.balanced, joined(test.note)) == (6, 3, 18, True, "")


@pytest.mark.parametrize(("delta", "count", "per"), [(1.2, 4, 2), (0.8, 8, 3), (0.6, 12, 1), (0.5, 20, 4)])
def test_power_matches_the_simulated_rejection_rate(delta, count, per):
    sigma_t2, sigma_u2 = 0.3, 1.2
    rate, error = rejection_rate(studies(delta, sigma_t2, sigma_u2, count, per, seed=3))
    expected = power(delta, sigma_t2, sigma_u2, count, per)
    assert 0.1 < expected < 0.95  # a rate the simulation can tell from its neighbours
    assert rate == pytest.approx(expected, abs=3 * error)


def test_the_planned_design_reaches_its_power_in_simulation():
    """δ = 0.35 with σ_TD² = 0.2, σ_UD² = 1, c_T = 30 s, c_U = 5 s: the plan's I is large enough that one training
    seed less or more moves the power by a point or so; its power is ≥ 0.8 by construction, and the simulated
    studies of that design reject δ = 0 in 75–85% of the cases."""
    plan = power_plan(0.35, 0.2, 1.0, 30.0, 5.0)
    assert plan.I >= 15 and 0.8 <= plan.power <= 0.85
    assert plan.power == power(0.35, 0.2, 1.0, plan.I, plan.J)
    assert power(0.35, 0.2, 1.0, plan.I - 1, plan.J) < 0.8 and power(0.35, 0.2, 1.0, plan.I, plan.J - 1) < 0.8
    rate, _ = rejection_rate(studies(0.35, 0.2, 1.0, plan.I, plan.J, seed=4))
    assert 0.75 <= rate <= 0.85


def brute_force(delta, sigma_t2, sigma_u2, cost_train, cost_unlearn, largest=100):
    """(cost, J, I) of the cheapest design with power ≥ 0.8 among I, J ≤ `largest`; ties to the smaller J."""
    count, per = np.arange(2, largest + 1)[:, None], np.arange(1, largest + 1)[None, :]
    reached = power(delta, sigma_t2, sigma_u2, count, per) >= 0.8
    costs = np.where(reached, count * (cost_train + per * cost_unlearn), np.inf)
    best = np.argwhere(costs <= costs.min() * (1 + 1e-12))
    return min((costs.min(), per.flat[b], count.flat[a]) for a, b in best)


@pytest.mark.parametrize(("delta", "sigma_t2", "sigma_u2", "cost_train", "cost_unlearn"), [
    (0.5, 0.1, 1.0, 30.0, 5.0), (0.5, 0.4, 0.1, 10.0, 10.0), (0.3, 0.0, 0.5, 60.0, 2.0), (1.0, 0.2, 4.0, 5.0, 1.0),
    (-0.4, 0.05, 0.05, 1.0, 50.0)])
def test_power_plan_is_the_cheapest_design_with_two_training_seeds_at_least(delta, sigma_t2, sigma_u2, cost_train,
                                                                            cost_unlearn):
    plan = power_plan(delta, sigma_t2, sigma_u2, cost_train, cost_unlearn)
    assert (plan.cost_s, plan.J, plan.I) == pytest.approx(brute_force(delta, sigma_t2, sigma_u2, cost_train,
                                                                      cost_unlearn))
    assert 2 <= plan.I < 50 and plan.J < 50 and plan.power >= 0.8 and joined(plan.note) == ""  # well inside the grid


def test_cheap_unlearning_seeds_buy_the_unlearning_variance_down():
    """Where σ_UD² dominates and a job costs little beside M_o, the plan takes many unlearning seeds per training
    seed; where jobs cost as much as M_o, fewer."""
    cheap = power_plan(0.3, 0.02, 1.0, 100.0, 1.0)
    dear = power_plan(0.3, 0.02, 1.0, 100.0, 100.0)
    assert cheap.J > 5 * dear.J and cheap.I < dear.I
    assert power_plan(0.3, 0.5, 0.0, 100.0, 1.0).J == 1  # nothing to average out within a training seed


def test_power_edge_cases():
    assert power(0.0, 0.5, 1.0, 10, 3) == pytest.approx(0.05)  # at δ = 0 the power is the size
    assert power(0.2, 0.0, 0.0, 5, 2) == 1.0
    assert math.isnan(power(0.2, 0.5, 1.0, 1, 3)) and math.isnan(power(0.2, math.nan, 1.0, 5, 3))
    grid = power(0.5, 0.3, 1.0, np.array([[3], [6], [12]]), np.array([1, 2, 4]))
    assert grid.shape == (3, 3) and np.all(np.diff(grid, axis=0) > 0) and np.all(np.diff(grid, axis=1) > 0)
    assert grid[1, 2] == power(0.5, 0.3, 1.0, 6, 4) == power(-0.5, 0.3, 1.0, 6, 4)


def test_power_plan_says_what_it_cannot_plan():
    assert joined(power_plan(0.0, 0.1, 0.1, 30.0, 5.0).note) == "a difference of 0: no design detects it (power = α)"
    assert power_plan(math.nan, 0.1, 0.1, 30.0, 5.0).I is None
    assert joined(power_plan(0.1, math.nan, 0.1, 30.0, 5.0).note) == "σ_TD² or σ_UD² not identifiable from this grid"
    assert "upper limit unbounded" in joined(power_plan(0.1, 0.1, math.inf, 30.0, 5.0).note)
    assert joined(power_plan(0.1, 0.1, 0.1, math.nan, 5.0).note) == "no training or unlearning time recorded"
    tiny = power_plan(1e-4, 0.1, 0.1, 30.0, 5.0)
    assert tiny.I is None and f"more than {MAX_POWER_JOBS:,} jobs" in joined(tiny.note)
    exact = power_plan(0.1, 0.0, 0.0, 30.0, 5.0)
    assert (exact.I, exact.J, exact.power, exact.cost_s) == (2, 1, 1.0, 70.0)
    with pytest.raises(UserError, match=r"^the 'target_power' option of power_plan must be a number in \(0, 1\)"):
        power_plan(0.1, 0.1, 0.1, 30.0, 5.0, target_power=1.0)
    with pytest.raises(UserError, match=r"^the 'alpha' option of power must be a number in \(0, 1\); got 0"):
        power(0.1, 0.1, 0.1, 5, 2, alpha=0)


def test_paired_test_degenerate_grids():
    one = paired_test([[0.1, 0.3, 0.2]])
    assert one.I == 1 and one.mean == pytest.approx(0.2) and math.isnan(one.p) and "no test" in joined(one.note)
    same = paired_test([[0.2, 0.2], [0.2, 0.2], [0.2, 0.2]])
    assert (same.mean, same.low, same.high, same.p, same.sigma_t2, same.sigma_u2) == (0.2, 0.2, 0.2, 0.0, 0.0, 0.0)
    assert "the same mean difference" in joined(same.note)
    zero = paired_test([[0.0, 0.0], [0.0, 0.0]])
    assert (zero.p, zero.t) == (1.0, 0.0)
    unbalanced = paired_test([[0.1, 0.3], [0.2, 0.4, 0.9], [math.nan, 0.5], []])
    assert (unbalanced.I, unbalanced.n, unbalanced.balanced) == (3, 6, False)
    assert unbalanced.mean == pytest.approx(np.mean([0.2, 0.5, 0.5]))  # the mean of the training-seed means
    assert "unbalanced grid" in joined(unbalanced.note)
    assert math.isnan(paired_test([]).mean)
