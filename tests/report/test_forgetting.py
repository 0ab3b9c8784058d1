"""The per-example forgetting statistics (unlearnbench.report.compute.forgetting) against a literal re-implementation
of the
NeurIPS 2023 unlearning competition's metric loop, constructed cases, the permutation null and Gaussian pools of known
separation for LiRA."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn.metrics import roc_auc_score, roc_curve

from unlearnbench.report.compute import forgetting
from unlearnbench.report.compute.forgetting import (
    epsilon_cap,
    epsilons,
    forget_quality,
    lira,
    null_qualities,
    points,
    score,
)
from unlearnbench.runtime.errors import UserError

# ------------------------------------------------------------------------------------- the reference, literally


def reference_pools(unlearned, retrained):
    """Per example the pool with the larger median is positive (ties: the unlearned one)."""
    retrained_positive = np.median(retrained, axis=0) > np.median(unlearned, axis=0)
    return (np.where(retrained_positive, retrained, unlearned), np.where(retrained_positive, unlearned, retrained))


def reference_single_thresholds(pos, neg):
    everything = np.concatenate([pos, neg])
    low, high = everything.min(), everything.max()
    return np.linspace(low, high, int(np.ceil((high - low) * 100)))


def reference_double_thresholds(pos, neg):
    """(left, right, peakier pool, other pool): every (left, right) pair of the double-threshold family, flat."""
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    smallest = neg_diff if pos_diff > neg_diff else pos_diff
    if pos_diff >= neg_diff:
        pos, neg = neg, pos
    low, high = pos.min() + smallest - 2.0, pos.max() + 2.0
    rights = np.linspace(low, high, int(np.ceil((high - low) * 100)))
    lefts = np.concatenate([np.linspace(r - smallest - 2.0, r - smallest + 2.0, 400) for r in rights])
    return lefts, np.repeat(rights, 400), pos, neg


def rate(predicted, dtype):
    return predicted.astype(dtype).mean(axis=0)


def reference_rates(pos, neg, dtype):
    """tpr, fnr, fpr, tnr over both families, double first, as the reference concatenates them."""
    lefts, rights, peaky, other = reference_double_thresholds(pos, neg)

    def inside(c):
        return (lefts[None, :] <= c[:, None]) & (c[:, None] <= rights[None, :])

    peaky_in, other_in = inside(peaky), inside(other)
    singles = reference_single_thresholds(pos, neg)
    pos_above, neg_above = pos[:, None] >= singles[None, :], neg[:, None] >= singles[None, :]
    return (np.concatenate([rate(peaky_in, dtype), rate(pos_above, dtype)]),
            np.concatenate([rate(~peaky_in, dtype), rate(~pos_above, dtype)]),
            np.concatenate([rate(other_in, dtype), rate(neg_above, dtype)]),
            np.concatenate([rate(~other_in, dtype), rate(~neg_above, dtype)]))


def reference_example_epsilon(tpr, fnr, fpr, tnr):
    eps = np.zeros(len(tpr), dtype=tpr.dtype)
    eps[(fpr + fnr == 0) & (tpr + tnr == 2)] = np.inf
    eps[(eps == 0) & (fpr * fnr == 0)] = np.nan
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns of nanmax
        formula = np.clip(np.nanmax([np.log(1 - forgetting.DELTA - fpr) - np.log(fnr),
                                     np.log(1 - forgetting.DELTA - fnr) - np.log(fpr)], axis=0), 0, None)
    eps = np.where(eps == 0, formula, eps)
    kept = eps[~np.isnan(eps)]
    return float(np.nanmax(kept)) if len(kept) else 0.0  # the mended assert; nothing kept: 0


def reference_epsilons(unlearned, retrained, rate_dtype=np.float64):
    """The reference's per-example loop on the CPU (`_get_epsilons` with both rate functions)."""
    pos_all, neg_all = reference_pools(unlearned, retrained)
    result = []
    for i in range(pos_all.shape[1]):
        pos, neg = pos_all[:, i], neg_all[:, i]
        pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
        largest = pos_diff if pos_diff > neg_diff else neg_diff
        smallest = neg_diff if pos_diff > neg_diff else pos_diff
        with np.errstate(invalid="ignore"):
            if smallest / largest < 0.01:
                result.append(50.0)
                continue
        result.append(reference_example_epsilon(*reference_rates(pos, neg, rate_dtype)))
    return np.clip(np.array(result), 0, 50)


def reference_quality(eps, n):
    """`compute_forget_score_from_confs`'s bucket loop."""
    cap, start, bucket_points, value = np.ceil(np.log(n - 1)), 0.0, {}, 1.0
    while start + 0.5 <= cap:
        bucket_points[start] = value
        value /= 2
        start += 0.5
    total = 0.0
    for e in eps:
        for begin, value in bucket_points.items():
            if e < begin + 0.5:
                total += value
                break
    return total / len(eps)


# ------------------------------------------------------------------------------------------ fabricated pools


def gaussian_pools(rng, n, e, separation, spread=1.0):
    unlearned = rng.normal(size=(n, e)) * rng.uniform(0.5, 2, size=e) * spread
    return unlearned, rng.normal(size=(n, e)) * spread + separation


def column_grids(unlearned, retrained):
    """One example's single thresholds, left thresholds and right thresholds."""
    pos, neg = reference_pools(unlearned[:, None], retrained[:, None])
    return (reference_single_thresholds(pos[:, 0], neg[:, 0]), *reference_double_thresholds(pos[:, 0], neg[:, 0])[:2])


def on_the_grids(rng, unlearned, retrained):
    """The pools with a third of each column's interior values moved onto threshold-grid values (single, right and
    left thresholds) inside that pool's range, so that the grids stay as they were."""
    unlearned, retrained = unlearned.copy(), retrained.copy()
    for i in range(unlearned.shape[1]):
        grids = column_grids(unlearned[:, i], retrained[:, i])
        for pool in (unlearned, retrained):
            column = pool[:, i]
            low, high = column.min(), column.max()
            interior = np.argsort(column)[1:-1]
            for k in rng.permutation(interior)[:len(interior) // 3]:
                grid = grids[rng.integers(3)]
                candidates = grid[(grid > low) & (grid < high)]
                if len(candidates):
                    column[k] = candidates[rng.integers(len(candidates))]
        after = column_grids(unlearned[:, i], retrained[:, i])
        assert all(np.array_equal(b, a) for b, a in zip(grids, after, strict=True))
    return unlearned, retrained


def cases():
    """(name, unlearned, retrained): the shapes on which the module must agree with the reference loop."""
    rng = np.random.default_rng(20240603)
    found = []
    for separation in (0.0, 0.5, 2.0, 6.0):
        found.append((f"gaussian {separation}σ", *gaussian_pools(rng, 16, 5, separation)))
    found.append(("wide pools", *gaussian_pools(rng, 8, 4, 3.0, spread=6.0)))
    u, r = gaussian_pools(rng, 16, 6, 0.5)
    u[:, :3] = u[:, :3] * 1e-3  # near-point pools: under the 1% rule
    z = rng.normal(size=(16, 3))
    centre = np.sort(r[:, 3:], axis=0)[8]  # just over the rule, around a retrained confidence: not separable
    u[:, 3:] = centre + (z - z.mean(axis=0)) / np.ptp(z, axis=0) * 0.0102 * np.ptp(r[:, 3:], axis=0)
    found.append(("near-point pools", u, r))
    found.append(("rounded to 0.1", *(np.round(p, 1) for p in gaussian_pools(rng, 16, 6, 0.5))))
    found.append(("rounded to 0.1, apart", *(np.round(p, 1) for p in gaussian_pools(rng, 16, 4, 3.0))))
    found.append(("on the grids", *on_the_grids(rng, *gaussian_pools(rng, 16, 5, 0.5))))
    rounded = (np.round(p, 2) for p in gaussian_pools(rng, 8, 5, 1.0))
    found.append(("on the grids, rounded", *on_the_grids(rng, *rounded)))
    found.append(("N = 2", *gaussian_pools(rng, 2, 8, 1.0)))
    found.append(("N = 2 rounded", *(np.round(p, 1) for p in gaussian_pools(rng, 2, 6, 0.5))))
    found.append(("N = 64", *gaussian_pools(rng, 64, 3, 0.5)))
    found.append(("N = 64, apart", *gaussian_pools(rng, 64, 2, 2.5)))
    return found


CASES = cases()


@pytest.fixture(scope="module")
def reference_values():
    return {name: reference_epsilons(u, r) for name, u, r in CASES}


@pytest.mark.parametrize(("name", "unlearned", "retrained"), CASES, ids=[c[0] for c in CASES])
def test_epsilons_and_quality_equal_the_reference_loop(name, unlearned, retrained, reference_values):
    expected = reference_values[name]
    got = epsilons(unlearned, retrained)
    assert got.dtype == np.float64 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    n = unlearned.shape[0]
    assert forget_quality(unlearned, retrained) == pytest.approx(reference_quality(expected, n), abs=1e-12)


def test_the_cases_reach_what_they_are_meant_to(reference_values):
    """The fabricated shapes exercise the cap, the uncapped near-point pools, ε spread over the buckets, and ∞."""
    values = reference_values
    assert np.all(values["near-point pools"][:3] == 50) and np.all(values["near-point pools"][3:] < 50)
    assert np.sum(values["gaussian 6.0σ"] == 50) >= 3  # perfectly separated: ∞, clipped
    assert len(np.unique(np.floor(np.concatenate([values["gaussian 0.5σ"], values["gaussian 2.0σ"]]) * 2))) >= 3


def test_float32_rates_as_the_reference_has_them_move_epsilon_by_under_1e_5(reference_values):
    moved = [reference_epsilons(u, r, rate_dtype=np.float32) - reference_values[name] for name, u, r in CASES[:3]]
    assert np.abs(np.concatenate(moved)).max() < 1e-5


# -------------------------------------------------------------------------------------------- constructed cases


def test_grid_counts_are_those_of_np_linspace_with_values_on_the_grid():
    rng = np.random.default_rng(3)
    for _ in range(20):
        start = rng.normal() * 10
        stop = start + rng.uniform(0.02, 8)
        num = int(rng.integers(2, 900))
        grid = np.linspace(start, stop, num)
        x = np.concatenate([rng.choice(grid, 30), rng.uniform(start - 1, stop + 1, 30), np.nextafter(grid[:5], -np.inf),
                            np.nextafter(grid[-5:], np.inf), np.round(rng.uniform(start, stop, 30), 2)])
        for strict, side in ((False, "right"), (True, "left")):
            got = forgetting._grid_counts(np.array(start), np.array(stop), np.array(num), x, strict=strict)
            np.testing.assert_array_equal(got, np.searchsorted(grid, x, side=side))


def test_identical_pools_score_one_disjoint_and_point_pools_zero():
    rng = np.random.default_rng(4)
    pool = rng.normal(size=(32, 20))
    assert np.all(epsilons(pool, pool) == 0) and forget_quality(pool, pool) == 1.0
    assert np.all(epsilons(pool, pool + 20) == 50) and forget_quality(pool, pool + 20) == 0.0
    point = np.broadcast_to(pool[:1], pool.shape)  # every unlearned model alike: range 0, under the 1% rule
    assert np.all(epsilons(point, pool) == 50) and forget_quality(point, pool) == 0.0


def test_two_models_score_zero_and_constant_pools_are_decided_without_a_kept_threshold():
    rng = np.random.default_rng(5)
    pool = rng.normal(size=(2, 10))
    assert np.all(epsilons(pool, pool) == 0) and forget_quality(pool, pool) == 0.0  # no bucket at N = 2
    constant = np.full((8, 3), 1.5)
    assert np.all(epsilons(constant, constant) == 0)  # nothing kept (the reference fails): ε = 0
    assert np.all(epsilons(constant, constant + 1) == 50)  # two ranges of 0 are not capped; they separate perfectly


def test_points_buckets_and_cap():
    assert epsilon_cap(32) == 4 and epsilon_cap(2) == 0 and epsilon_cap(3) == 1
    np.testing.assert_array_equal(points(np.array([0, 0.49, 0.5, 1.2, 3.99, 4.0, 50]), 32),
                                  [1, 1, 0.5, 0.25, 1 / 128, 0, 0])
    assert np.all(points(np.array([0.0, 0.3]), 2) == 0)


def test_score_multiplies_the_accuracy_ratios_and_is_nan_where_undefined():
    assert score(0.5, 0.9, 0.9, 0.4, 0.8) == pytest.approx(0.25)
    assert math.isnan(score(0.5, 0.9, 0.0, 0.4, 0.8)) and math.isnan(score(0.5, 0.9, 0.9, 0.4, math.nan))


def test_inputs_are_checked():
    with pytest.raises(UserError):
        epsilons(np.zeros((4, 3)), np.zeros((5, 3)))
    with pytest.raises(UserError):
        epsilons(np.full((4, 3), np.nan), np.zeros((4, 3)))


# ------------------------------------------------------------------------------------------------------ the null


@pytest.mark.parametrize("n", [8, 16, 32])
def test_pools_from_one_distribution_lie_inside_their_null(n):
    """The 2N models are exchangeable, so F's rank in its null is uniform: F lies inside the null's range nearly
    always, and the ranks centre on one half. Pools apart lie below it."""
    rng = np.random.default_rng(n)
    ranks, outside = [], 0
    for dataset in range(8):
        u, r = rng.normal(size=(n, 20)), rng.normal(size=(n, 20))
        null = null_qualities(u, r, permutations=30, seed=dataset)
        assert null.shape == (30,) and np.all((null >= 0) & (null <= 1))
        f = forget_quality(u, r)
        ranks.append(np.mean(null <= f))
        outside += not null.min() <= f <= null.max()
    assert outside <= 1 and 0.25 <= np.mean(ranks) <= 0.75
    assert forget_quality(u, r + 3) < null.min()


def test_null_is_reproducible_and_its_splits_are_seeded():
    rng = np.random.default_rng(9)
    u, r = rng.normal(size=(8, 30)), rng.normal(size=(8, 30))
    first = null_qualities(u, r, permutations=20, seed=3)
    np.testing.assert_array_equal(first, null_qualities(u, r, permutations=20, seed=3))
    assert not np.array_equal(first, null_qualities(u, r, permutations=20, seed=4))
    order = np.random.default_rng([3, 8, 30, 20]).random((20, 16)).argsort(axis=1)
    pooled = np.concatenate([u, r])
    assert first[5] == forget_quality(pooled[order[5, :8]], pooled[order[5, 8:]])


@pytest.mark.parametrize("n", [1, 2])
def test_the_null_of_pools_too_small_to_score_is_every_splits_forget_quality(n):
    """With N ≤ 2 every split scores F = 0 (no bucket), so the null is zeros without scoring a split; its inputs are
    still checked."""
    rng = np.random.default_rng(n)
    u, r = rng.normal(size=(n, 12)), rng.normal(size=(n, 12)) + 5
    null = null_qualities(u, r, permutations=7, seed=1)
    pooled = np.concatenate([u, r])
    order = np.random.default_rng([1, n, 12, 7]).random((7, 2 * n)).argsort(axis=1)
    scored = [forget_quality(pooled[row[:n]], pooled[row[n:]]) for row in order]
    np.testing.assert_array_equal(null, scored)
    assert null.shape == (7,)
    with pytest.raises(UserError):
        null_qualities(u, np.full_like(r, np.nan), permutations=7)


# -------------------------------------------------------------------------------------------------------- LiRA


def hanley_mcneil_se(auc, n_pos, n_neg):
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    return math.sqrt((auc * (1 - auc) + (n_pos - 1) * (q1 - auc**2) + (n_neg - 1) * (q2 - auc**2)) / (n_pos * n_neg))


@pytest.mark.parametrize("d", [0.0, 1.0, 2.0])
def test_lira_auc_on_gaussian_pools_of_known_separation(d):
    rng = np.random.default_rng(int(10 + d))
    means = rng.normal(size=300) * 3
    retrained = means + rng.normal(size=(100, 300))
    unlearned = means + d + rng.normal(size=(100, 300))
    result = lira(unlearned, retrained)
    expected = scipy_stats.norm.cdf(d / math.sqrt(2))
    # Pairs share an example's fit: a model-level standard error, not a pair-level one.
    assert abs(result["auc"] - expected) < 4 * hanley_mcneil_se(expected, 100, 100)
    if d == 0:
        assert abs(result["tpr_at_1pct"] - 0.01) < 0.005 and result["tpr_at_0_1pct"] < 0.005
    assert result["tpr_at_1pct"] >= result["tpr_at_0_1pct"]


def test_lira_with_few_models_shares_one_variance_and_reads_the_direction():
    rng = np.random.default_rng(11)
    means = rng.normal(size=400) * 3
    retrained = means + rng.normal(size=(16, 400))
    remembered, overforgotten = means + 1 + rng.normal(size=(16, 400)), means - 1 + rng.normal(size=(16, 400))
    assert lira(remembered, retrained)["auc"] > 0.7 and lira(overforgotten, retrained)["auc"] < 0.3
    assert abs(lira(remembered, retrained)["auc"] - scipy_stats.norm.cdf(1 / math.sqrt(2))) < 0.03


def test_lira_guards_point_pools_and_too_few_models():
    rng = np.random.default_rng(12)
    retrained = np.tile(rng.normal(size=5), (6, 1))
    result = lira(retrained + 0.5, retrained)  # σ = 0: every unlearned pair scores +∞, every retrained one 0
    assert result == {"auc": 1.0, "tpr_at_1pct": 1.0, "tpr_at_0_1pct": 1.0}
    assert all(math.isnan(v) for v in lira(rng.normal(size=(4, 5)), rng.normal(size=(2, 5))).values())


def test_leave_one_out_fits_equal_refitting_without_each_model():
    rng = np.random.default_rng(14)
    pool = rng.normal(size=(7, 5)) * 3 + 1
    pool[:, 0] = 2.5  # constant
    pool[1:, 1] = -1.0  # constant once model 0 is out
    mean, var = forgetting._leave_one_out_fit(pool)
    for k in range(7):
        others = np.delete(pool, k, axis=0)
        np.testing.assert_allclose(mean[k], others.mean(axis=0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(var[k], others.var(axis=0, ddof=1), rtol=1e-9, atol=1e-12)
    assert var[0, 1] == 0 and mean[0, 1] == -1.0 and np.all(var[:, 0] == 0) and np.all(mean[:, 0] == 2.5)


def test_roc_summary_equals_sklearn():
    rng = np.random.default_rng(13)
    positives, negatives = np.round(rng.normal(0.7, 1, 3000), 1), np.round(rng.normal(0, 1, 5000), 1)
    result = forgetting._roc_summary(positives, negatives)
    labels, scores = np.r_[np.ones(3000), np.zeros(5000)], np.r_[positives, negatives]
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    assert result["auc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert result["tpr_at_1pct"] == tpr[fpr <= 0.01].max() and result["tpr_at_0_1pct"] == tpr[fpr <= 0.001].max()
