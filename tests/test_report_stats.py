"""The reporter's statistics (unlearnbench.report.stats) against hand-computed cases and simulations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from unlearnbench.report.stats import chi2_interval, graybill_wang, nested_variance, w2, w2_null, w2_nulls

# ---------------------------------------------------------------------------------------------------------- W2


@pytest.mark.parametrize(("u", "v", "expected"), [
    ([0, 1, 2], [1, 2, 3], 1.0),  # a shift by 1
    ([3, 0, 0], [2, 0, 1], math.sqrt(2 / 3)),  # sorted: (0, 0, 3) against (0, 1, 2): squares 0, 1, 1
    ([0, 1], [0, 1, 2], math.sqrt(1 / 2)),  # breakpoints 1/3, 1/2, 2/3: squares 1 on (1/3, 1/2] and (2/3, 1]
    ([0], [0, 2], math.sqrt(2)),  # 0 against 0 on (0, 1/2] and 2 on (1/2, 1]
    ([0, 4], [0, 1, 3, 4], math.sqrt(1 / 2)),  # coinciding breakpoints 1/2: squares 1 on (1/4, 1/2], (1/2, 3/4]
    ([5.0], [2.0], 3.0),
])
def test_w2_hand_computed(u, v, expected):
    assert w2(u, v) == pytest.approx(expected, rel=1e-12)
    assert w2(v, u) == pytest.approx(expected, rel=1e-12)


def test_w2_of_two_single_points_is_their_distance():
    rng = np.random.default_rng(0)
    for a, b in rng.normal(size=(20, 2)) * 10:
        assert w2([a], [b]) == pytest.approx(abs(a - b), rel=1e-12)


def test_w2_unequal_sizes_equals_the_equal_size_formula_on_replicated_samples():
    """The empirical distribution of u repeated m times is that of u: W2(u, v) = W2(u×m, v×n) with equal sizes."""
    rng = np.random.default_rng(1)
    for n, m in [(3, 5), (4, 6), (7, 2), (10, 9)]:
        u, v = rng.normal(size=n), rng.exponential(size=m)
        equal = np.sqrt(np.mean((np.sort(np.repeat(u, m)) - np.sort(np.repeat(v, n))) ** 2))
        assert w2(u, v) == pytest.approx(equal, rel=1e-12)


def test_w2_is_symmetric_zero_on_identical_samples_and_ignores_nan():
    rng = np.random.default_rng(2)
    u, v = rng.normal(size=8), rng.normal(size=5)
    assert w2(u, v) == w2(v, u)
    assert w2(u, u) == 0.0
    assert w2(u, rng.permutation(u)) == 0.0
    assert w2([*u, math.nan], v) == w2(u, v)
    assert math.isnan(w2([], v))


def test_permutation_null_is_reproducible_nonnegative_and_batched_alike():
    rng = np.random.default_rng(3)
    samples, b = [rng.normal(size=5) for _ in range(4)], rng.normal(size=7)
    first = [w2_null(u, b) for u in samples]
    assert first == [w2_null(u, b) for u in samples]  # the same seed: the same splits
    assert first == pytest.approx(w2_nulls(samples, b), rel=1e-12)
    assert all(q > 0 for q in first)
    assert w2_null(samples[0], b, seed=1) != first[0]
    assert w2_null([1.0, 1.0], [1.0, 1.0, 1.0]) == 0.0


def test_permutation_null_rejects_about_five_percent_of_same_distribution_pairs():
    rng = np.random.default_rng(4)
    trials = 300
    rejected = 0
    for _ in range(trials):
        u, v = rng.normal(size=6), rng.normal(size=9)
        rejected += w2(u, v) > w2_null(u, v, permutations=400)
    assert rejected / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)
    assert w2(np.zeros(6), np.full(9, 5.0)) > w2_null(np.zeros(6), np.full(9, 5.0))


# ---------------------------------------------------------------------------------------------- variance


def test_variance_components_of_a_hand_computed_balanced_grid():
    """I = 3, J = 2: means 2, 5, 9, grand mean 16/3; SSW = 2 + 2 + 8 = 12, MSW = 12/3 = 4;
    MSB = 2·((2 − 16/3)² + (5 − 16/3)² + (9 − 16/3)²)/2 = 222/9; σ_T² = (222/9 − 4)/2 = 31/3."""
    result = nested_variance([[1, 3], [4, 6], [7, 11]])
    assert (result.I, result.J, result.n, result.balanced) == (3, 2, 6, True)
    assert result.mean == pytest.approx(16 / 3)
    assert result.msw == pytest.approx(4.0)
    assert result.msb == pytest.approx(222 / 9)
    assert result.sigma_u2 == pytest.approx(4.0)
    assert result.sigma_t2 == pytest.approx(31 / 3)
    assert result.total == pytest.approx(31 / 3 + 4)
    assert result.icc == pytest.approx(31 / 43)
    chi_low, chi_high = scipy_stats.chi2.ppf([0.975, 0.025], 3)
    assert (result.sigma_u2_low, result.sigma_u2_high) == pytest.approx((12 / chi_low, 12 / chi_high))
    assert 0 <= result.sigma_t2_low <= result.sigma_t2 <= result.sigma_t2_high
    assert result.warnings == ["fewer than 10 training seeds (I = 3): σ_T² is barely identifiable"]


def test_sigma_t2_is_truncated_at_zero():
    result = nested_variance([[0, 10], [5, 5.5], [10, 0]])  # within spread far larger than between
    assert result.msb < result.msw
    assert result.sigma_t2 == 0.0 and result.icc == 0.0
    assert result.sigma_t2_low == 0.0


def test_graybill_wang_bounds_meet_the_f_test():
    """L = 0 exactly where MSB/MSW = F(1−α/2; I−1, I(J−1)); U = 0 where it is F(α/2; …) (Burdick & Graybill)."""
    df_b, df_w, j = 9, 40, 5
    f_high, f_low = scipy_stats.f.ppf([0.975, 0.025], df_b, df_w)
    low, _ = graybill_wang(f_high * 2.0, 2.0, df_b, df_w, j)
    assert low == pytest.approx(0.0, abs=1e-9)
    low, _ = graybill_wang(f_high * 2.0 * 1.01, 2.0, df_b, df_w, j)
    assert low > 0
    _, high = graybill_wang(f_low * 2.0, 2.0, df_b, df_w, j)
    assert high == pytest.approx(0.0, abs=1e-9)


def simulate(sigma_t2: float, sigma_u2: float, runs: int, count: int, per: int, seed: int):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, math.sqrt(sigma_t2), (runs, count, 1)) + rng.normal(0, math.sqrt(sigma_u2), (runs, count, per))
    means = z.mean(axis=2)
    msw = ((z - means[..., None]) ** 2).sum(axis=(1, 2)) / (count * (per - 1))
    msb = per * ((means - means.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) / (count - 1)
    return z, msb, msw


@pytest.mark.parametrize(("sigma_t2", "sigma_u2"), [(1.0, 1.0), (0.25, 1.0), (4.0, 1.0)])
def test_interval_coverage_on_simulated_grids(sigma_t2, sigma_u2):
    """2000 simulated I = 10 × J = 5 grids: the χ² interval for σ_U² is exact (95% ± 1.5%, three Monte-Carlo
    standard errors); the Graybill–Wang interval for σ_T² is approximate: its coverage lies within 93.5–98% (it is
    close to nominal and conservative near σ_T² = 0, as Burdick & Graybill report)."""
    runs, count, per = 2000, 10, 5
    z, msb, msw = simulate(sigma_t2, sigma_u2, runs, count, per, seed=int(sigma_t2 * 100))
    low_u, high_u = chi2_interval(msw, count * (per - 1))
    low_t, high_t = graybill_wang(msb, msw, count - 1, count * (per - 1), per)
    chi2_coverage = np.mean((low_u <= sigma_u2) & (sigma_u2 <= high_u))
    gw_coverage = np.mean((low_t <= sigma_t2) & (sigma_t2 <= high_t))
    assert abs(chi2_coverage - 0.95) <= 0.015
    assert 0.935 <= gw_coverage <= 0.98
    for k in range(5):  # the vectorised formulas are those of nested_variance
        result = nested_variance(list(z[k]))
        assert (result.msb, result.msw) == pytest.approx((msb[k], msw[k]), rel=1e-10)
        assert (result.sigma_t2_low, result.sigma_t2_high) == pytest.approx((low_t[k], high_t[k]), rel=1e-10)
        assert (result.sigma_u2_low, result.sigma_u2_high) == pytest.approx((low_u[k], high_u[k]), rel=1e-10)


def test_a_constant_method_has_exactly_zero_unlearning_seed_variance():
    groups = [[0.1] * 3, [0.2] * 3, [0.3] * 3, [0.7] * 3]
    assert np.var([0.1] * 3) != 0.0  # the naive computation leaves rounding noise
    result = nested_variance(groups)
    assert result.sigma_u2 == 0.0 and result.msw == 0.0
    assert (result.sigma_u2_low, result.sigma_u2_high) == (0.0, 0.0)
    assert result.sigma_t2 == pytest.approx(np.var([0.1, 0.2, 0.3, 0.7], ddof=1), rel=1e-12)
    assert result.icc == 1.0
    same = nested_variance([[0.3] * 4] * 5)
    assert (same.sigma_t2, same.sigma_u2, same.total, same.mean) == (0.0, 0.0, 0.0, 0.3)
    assert math.isnan(same.icc)


def test_one_unlearning_seed_per_training_seed_identifies_only_the_total():
    result = nested_variance([[1.0], [2.0], [4.0]])
    assert result.J == 1 and result.total == pytest.approx(7 / 3)
    assert math.isnan(result.sigma_t2) and math.isnan(result.sigma_u2) and math.isnan(result.icc)
    assert any("J = 1" in w for w in result.warnings)


def test_one_training_seed_identifies_only_the_unlearning_seed_component():
    result = nested_variance([[1.0, 2.0, 4.0]])
    assert result.I == 1 and result.sigma_u2 == pytest.approx(7 / 3)
    assert math.isnan(result.sigma_t2) and math.isnan(result.total)
    assert result.sigma_u2_low < 7 / 3 < result.sigma_u2_high
    assert any("I = 1" in w for w in result.warnings)


def test_unbalanced_grid_uses_the_unbalanced_anova_estimator_and_warns():
    """n = (2, 3, 3), N = 8: means 2, 6, 9, grand mean 49/8; SSW = 2 + 8 + 8 = 18, MSW = 18/5;
    SSB = 2(2 − 49/8)² + 3(6 − 49/8)² + 3(9 − 49/8)² = 58.875, MSB = 29.4375; n0 = (8 − 22/8)/2 = 2.625."""
    result = nested_variance([[1, 3], [4, 6, 8], [7, 9, 11]])
    assert not result.balanced and (result.J_min, result.J_max) == (2, 3)
    assert result.J == 2.625  # exact in binary
    assert result.msw == pytest.approx(3.6) and result.msb == pytest.approx(29.4375)
    assert result.sigma_t2 == pytest.approx((29.4375 - 3.6) / 2.625)
    assert any(w.startswith("unbalanced grid (2 to 3 unlearning seeds") for w in result.warnings)


def test_enough_balanced_training_seeds_give_no_warning_and_nan_is_dropped():
    rng = np.random.default_rng(5)
    groups = [list(rng.normal(size=3)) for _ in range(10)]
    assert nested_variance(groups).warnings == []
    with_nan = [[*g, math.nan] for g in groups]
    assert nested_variance(with_nan).as_dict() == nested_variance(groups).as_dict()
    assert nested_variance([]).warnings == ["no values"]
