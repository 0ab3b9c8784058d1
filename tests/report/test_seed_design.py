"""Rank stability and the seed plan (unlearnbench.report.compute.seed_design, stats.seed_plan) on grids whose answers
are
known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from unlearnbench.report.compute import stats
from unlearnbench.report.compute.analysis import analyse
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.seed_design import (
    costs,
    extend,
    rank_label,
    rank_stability,
    ranked_metrics,
    seed_plans,
    wilson,
)
from unlearnbench.report.compute.stats import seed_plan
from unlearnbench.report.read.catalogue import legacy_catalogue
from unlearnbench.report.render.markdown import render
from unlearnbench.report.render.words import joined, text

KEYS = ["dataset", "model", "scenario"]
LEGACY = legacy_catalogue()
RANKED = [("delta_acc", "forget_test", 0.0)]


def ranks_of(scores: dict[str, np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return rank_stability(analyse(frame(scores), LEGACY).values, KEYS, RANKED, LEGACY.gold_standards)


def frame(scores: dict[str, np.ndarray], metric: str = "delta_acc", split: str = "forget_test",
          time_s: float = 2.0, original_s: float = 30.0, retrained_s: float = 20.0) -> pd.DataFrame:
    """Records of complete jobs: `scores[method][i, j]` is Z of training seed i, unlearning seed j (s_u = 100i + j),
    plus each method's `time_s` and the jobs' training times."""
    rows = []
    for method, grid in scores.items():
        for i, row in enumerate(np.atleast_2d(grid)):
            for j, value in enumerate(row):
                common = {"dataset": "digits", "model": "resnet18", "scenario": "full_class", "target": "3",
                          "method": method, "role": "unlearned", "seed_train": i, "seed_unlearn": 100 * i + j,
                          "seed_eval": 100 * i + j, "status": "complete", "round": None,
                          "cost_original_s": original_s, "cost_retrained_s": retrained_s}
                rows.append({**common, "metric": metric, "split": split, "value": float(value)})
                rows.append({**common, "metric": "time_s", "split": "", "value": time_s})
    return pd.DataFrame(rows)


def test_no_training_seed_effect_changes_no_ranking_beyond_ties():
    """σ_T² = 0 and σ_U² = 0: every training seed's scores are the method's; b and c tie for best."""
    grid = {"a": np.full((6, 3), 0.3), "b": np.full((6, 3), -0.1), "c": np.full((6, 3), 0.1),
            "retrain": np.zeros((6, 3))}  # the gold standard is never ranked
    ranks, by_seed = ranks_of(grid)
    row = ranks.iloc[0]
    assert (row["I"], row["methods"], row["best_all"]) == (6, 3, "b, c")  # ranked by |Z|: |−0.1| = |0.1|
    assert row["p_best_changes"] == 0.0 and (row["tau_mean"], row["tau_min"]) == (1.0, 1.0)
    assert set(by_seed["best_single"]) == {"b, c"} and not by_seed["best_changed"].any()


def test_training_seeds_that_swap_the_best_method_are_counted():
    """Method a is best (|Z| 0.1 against 0.2) except on training seeds 1 and 4, where it is 0.3 (the other seeds'
    mean stays below 0.2 for every seed left out): 2 of 6 seeds."""
    a = np.full((6, 2), 0.1)
    a[[1, 4]] = 0.3
    grid = {"a": a, "b": np.full((6, 2), 0.2), "c": np.full((6, 2), 0.9)}
    ranks, by_seed = ranks_of(grid)
    row = ranks.iloc[0]
    assert row["p_best_changes"] == pytest.approx(2 / 6)
    assert list(by_seed[by_seed["best_changed"]]["seed_train"]) == [1, 4]
    assert set(by_seed[by_seed["best_changed"]]["best_single"]) == {"b"}
    # on seeds 1 and 4 the ranking is b, a, c against a, b, c: one discordant pair of three, τ = 1/3
    assert list(by_seed["kendall_tau"]) == pytest.approx([1, 1 / 3, 1, 1, 1 / 3, 1])
    assert (row["p_low"], row["p_high"]) == pytest.approx(wilson(2, 6))


def test_single_design_averages_its_unlearning_seeds_and_the_others_exclude_the_seed():
    """Seed 0's A(0) averages |Z| over its unlearning seeds (a: (0 + 1)/2 = 0.5 > b's 0.4); the other seeds make a
    best (0.1 against 0.4): seed 0 changes the best method, seeds 1 and 2 do not."""
    a = np.array([[0.0, 1.0], [0.1, 0.1], [0.1, 0.1]])
    ranks, by_seed = ranks_of({"a": a, "b": np.full((3, 2), 0.4)})
    assert list(by_seed["best_changed"]) == [True, False, False]
    assert list(by_seed["best_single"]) == ["b", "a", "a"]
    assert ranks.iloc[0]["best_all"] == "a"  # (0.5 + 0.1 + 0.1)/3 < 0.4


def test_the_ranked_metrics_are_the_declared_leaderboard_metrics_with_a_number_for_ideal():
    """Those judged against M_r (model utility, NDCG@10) have no fixed ideal to rank one seed's values by."""
    assert ranked_metrics(LEGACY) == [("delta_acc", "forget_train", 0.0), ("delta_acc", "forget_test", 0.0),
                                      ("delta_acc", "retain_test", 0.0), ("delta_mia", "forget_train", 0.0),
                                      ("forget_quality", "forget", 1.0), ("privleak", "forget", 0.0)]
    assert rank_label("delta_acc", "forget_test", LEGACY) == "|Δacc D'_f|"
    assert rank_label("forget_quality", "forget", LEGACY) == "|1 − FQ D_f|"


def test_the_design_caveats_are_data_and_the_report_words_them():
    """Three training seeds of one unlearning seed each: σ_T² barely identifiable, no single-seed design."""
    study = analyse(frame({"a": np.arange(3.0)[:, None], "b": np.ones((3, 1))}), LEGACY)
    assert study.warnings == [Note("few_training_seeds", {"below": 10, "seeds": [3]}), Note("one_unlearning_seed")]
    assert [text(caveat) for caveat in study.warnings] == [
        "fewer than 10 training seeds (I = 3): σ_T² is barely identifiable; its interval is wide",
        "one unlearning seed per training seed (J = 1): only the total variance is identifiable and there is no "
        "single-training-seed design to compare (no W2)"]
    unbalanced = Note("unbalanced", {"rows": 2, "methods": ["a", "b"]})
    assert text(unbalanced).startswith("unbalanced grid (2 rows; methods a, b): not every training seed")


def test_wilson_interval():
    low, high = wilson(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # the textbook value for 5 of 10
    assert wilson(0, 4)[0] == 0.0 and wilson(4, 4)[1] == 1.0


def test_seed_plans_take_the_costs_from_the_sweep():
    """c_T: the median time to train M_o; c_U: the median of M_r's training time plus the method's time_s."""
    rng = np.random.default_rng(0)
    study = analyse(frame({"a": rng.normal(size=(5, 4)) * 0.01 + 0.1}, time_s=2.0, original_s=30.0,
                          retrained_s=20.0), LEGACY)
    priced = costs(study.values, study.keys)
    assert priced[["cost_train_s", "cost_unlearn_s", "cost_eval_s"]].iloc[0].tolist() == [30.0, 22.0, 2.0]
    plans = seed_plans(study.variance, study.values, study.keys, [("delta_acc", "forget_test")], target_se=0.004)
    row = plans.iloc[0]
    for prefix, suffix in (("point", ""), ("upper", "_high")):  # at the estimates and at the upper limits
        expected = seed_plan(row[f"sigma_t2{suffix}"], row[f"sigma_u2{suffix}"], 30.0, 22.0, 0.004)
        assert (row[f"{prefix}_I"], row[f"{prefix}_J"], row[f"{prefix}_K"], row[f"{prefix}_cost_s"]) == (
            expected.I, expected.J, 1, expected.cost_s)
    assert row["upper_cost_s"] >= row["point_cost_s"] and row["upper_level"] == 0.975


def test_a_sweep_over_evaluation_seeds_gets_its_variance_split_into_three_parts():
    """Z_ijk of method a over 3 training × 2 unlearning × 3 evaluation seeds; method b's values do not move with the
    evaluation seed (σ_E² = 0); a sweep with one evaluation seed per pair has no such table."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=(3, 2, 3))
    rows = [frame({"a": z[:, :, k], "b": z[:, :, 0]}) for k in range(3)]
    rows = [part.assign(seed_eval=part["seed_eval"] + 1000 * k) for k, part in enumerate(rows)]
    study = extend(analyse(pd.concat(rows, ignore_index=True), LEGACY))
    split = study.variance_eval.set_index(["method", "metric"])
    expected = stats.evaluation_split(z.tolist())
    assert split.loc[("a", "delta_acc"), "sigma_e2"] == pytest.approx(expected.sigma_e2)
    assert split.loc[("a", "delta_acc"), ["I", "J", "K"]].tolist() == [3, 2, 3]
    assert split.loc[("b", "delta_acc"), "sigma_e2"] == 0.0 and split.loc[("b", "time_s"), "total"] == 0.0
    text = render(study, [], [], [], [], [], Path("."))
    assert "### Seed variance with the evaluation seed (σ_E²)" in text
    assert analyse(rows[0], LEGACY).variance_eval.empty


def test_no_report_recommends_fewer_than_two_training_seeds():
    """A sweep whose training-seed means agree while its unlearning seeds spread (MSB < MSW): σ̂_T² is a negative
    estimate truncated at 0, which once made the plan one training seed with many unlearning seeds. Both plans keep
    two training seeds, and the report marks the truncated estimate."""
    grid = np.array([[0.1, 0.3], [0.3, 0.1], [0.15, 0.25], [0.25, 0.15]])
    study = extend(analyse(frame({"a": grid}), LEGACY), target_se=0.01)
    variance = study.variance[study.variance["metric"] == "delta_acc"].iloc[0]
    assert variance["msb"] < variance["msw"] and variance["sigma_t2"] == 0.0 and variance["sigma_t2_truncated"]
    plan = study.plans[study.plans["metric"] == "delta_acc"].iloc[0]
    assert plan["sigma_t2_truncated"] and plan["point_I"] == 2 and plan["upper_I"] >= 2
    assert "negative estimate truncated at 0" in joined(plan["point_note"])
    assert plan["upper_cost_s"] > plan["point_cost_s"]  # the upper limits ask for more
    text = render(study, [], [], [], [], [], Path("."))
    section = text[text.index("### How many seeds to run"):]
    row = next(line for line in section.splitlines() if line.startswith("| a | |Δacc D'_f|"[:6]))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2].startswith("0† (") and cells[7].startswith(f"{int(plan['upper_I'])} × ")
    assert cells[9] == f"2 × {int(plan['point_J'])}"


def test_a_sweep_over_evaluation_seeds_takes_its_seed_variance_from_the_three_stage_split():
    """seed_variance.csv's σ_T², σ_U², σ_E² and intervals of a row whose evaluation seed varies are the three-stage
    split's, not those of the J·K values of a training seed taken as J·K unlearning seeds."""
    rng = np.random.default_rng(5)
    z = (rng.normal(size=(4, 1, 1)) + rng.normal(size=(4, 3, 1)) * 0.5 + rng.normal(size=(4, 3, 2)) * 2)
    rows = [frame({"a": z[:, :, k]}).assign(seed_eval=lambda f, k=k: f["seed_eval"] + 1000 * k) for k in range(2)]
    study = analyse(pd.concat(rows, ignore_index=True), LEGACY)
    row = study.variance.set_index(["method", "metric"]).loc[("a", "delta_acc")]
    split = stats.evaluation_split(z.tolist())
    for name in ("sigma_t2", "sigma_t2_low", "sigma_t2_high", "sigma_u2", "sigma_u2_low", "sigma_u2_high",
                 "sigma_e2", "sigma_e2_low", "sigma_e2_high"):
        assert row[name] == pytest.approx(getattr(split, name)), name
    assert (row["J"], row["K"], row["total"]) == (3, 2, pytest.approx(split.total))
    assert math.isnan(row["sigma_u2_chi2_low"])  # the χ² interval of the cell means' MSW is not σ_U²'s
    old = stats.nested_variance(z.reshape(4, 6))  # the J·K values as unlearning seeds: σ_E² leaks into σ_U²
    assert old.sigma_u2 > split.sigma_u2 + split.sigma_e2 / 2
    plan = extend(study).plans.set_index("metric").loc["delta_acc"]
    assert plan["sigma_e2"] == pytest.approx(split.sigma_e2) and plan["cost_eval_s"] == 2.0
    assert plan["point_K"] >= 1 and plan["point_se"] <= 0.01 * (1 + 1e-9)


def powers_of(scores: dict[str, np.ndarray], **options) -> pd.DataFrame:
    from unlearnbench.report.compute.leaderboard import leaderboards
    from unlearnbench.report.compute.seed_design import seed_powers

    study = extend(analyse(frame(scores), LEGACY))
    study.leaderboard = leaderboards(study.values, study.keys, [("delta_acc", "forget_test")], LEGACY)
    return seed_powers(study, **options)


def test_seed_power_plans_the_leaderboards_neighbours_from_their_paired_differences():
    """Three methods, a closest to the ideal 0 and c farthest; a − b differs by about 0.05 in every job, with a
    training-seed effect on the difference. The neighbours a–b and b–c are compared; a−b's mean, interval and p are the
    one-sample t-test on the training seeds' mean differences of |Z|; the plan detects the observed difference."""
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(11)
    shift = rng.normal(0, 0.02, (8, 1)) + rng.normal(0, 0.01, (8, 3))
    scores = {"a": 0.1 + shift, "b": 0.15 + shift + rng.normal(0, 0.02, (8, 3)), "c": np.full((8, 3), 0.6),
              "retrain": np.zeros((8, 3))}
    powers = powers_of(scores)
    assert list(zip(powers["method_a"], powers["method_b"], powers["pair"], strict=True)) == [
        ("a", "b", "neighbours"), ("b", "c", "neighbours")]
    row = powers.iloc[0]
    differences = (np.abs(scores["a"]) - np.abs(scores["b"])).mean(axis=1)
    test = scipy_stats.ttest_1samp(differences, 0.0)
    assert row["mean_difference"] == pytest.approx(differences.mean())
    assert row["p"] == pytest.approx(test.pvalue) and bool(row["separated"]) is bool(test.pvalue < 0.05)
    low, high = test.confidence_interval(0.95)
    assert (row["low"], row["high"]) == pytest.approx((low, high))
    assert (row["I"], row["J"], row["difference_from"]) == (8, 3, "observed")
    assert row["min_difference"] == pytest.approx(abs(differences.mean()))
    assert row["plan_I"] >= 2 and row["plan_power"] >= 0.8
    assert row["cost_unlearn_s"] == 20.0 + 2.0 + 2.0  # M_r and both methods
    named = powers_of(scores, compare=["a", "c"], min_difference=0.01)
    assert ("a", "c", "compare") in set(zip(named["method_a"], named["method_b"], named["pair"], strict=True))
    assert set(named["min_difference"]) == {0.01} and set(named["difference_from"]) == {"report.min_difference"}
    smaller = named.iloc[0]
    assert smaller["plan_I"] * smaller["plan_J"] >= row["plan_I"] * row["plan_J"]  # a smaller δ needs more jobs


def test_report_compare_must_name_two_ranked_methods():
    from unlearnbench.report.compute.seed_design import check_compare
    from unlearnbench.runtime.errors import UserError

    values = analyse(frame({"a": np.ones((2, 2)), "b": np.ones((2, 2)), "retrain": np.zeros((2, 2))}), LEGACY).values
    check_compare(None, values, LEGACY.gold_standards)
    check_compare(["b", "a"], values, LEGACY.gold_standards)
    for named in (["a"], ["a", "a"], ["a", "nonesuch"], ["a", "retrain"]):
        with pytest.raises(UserError, match=r"^the 'report.compare' option must name two or more of the ranked "
                                            rf"methods \(a, b\); got {', '.join(named)} instead$"):
            check_compare(named, values, LEGACY.gold_standards)


def test_the_power_section_is_one_line_where_no_pair_has_two_training_seeds():
    from unlearnbench.report.render.markdown import power_section

    one_seed = powers_of({"a": np.full((1, 3), 0.1), "b": np.full((1, 3), 0.3)})
    assert list(one_seed["I"]) == [1] and one_seed["plan_I"].isna().all()
    assert power_section(one_seed, LEGACY) == [
        "How many seeds to tell two methods apart: not identifiable from this grid: I = 1 (a paired test over training "
        "seeds needs two; `seed_power.csv`)."]
    rng = np.random.default_rng(2)
    table = power_section(powers_of({"a": rng.normal(0.1, 0.02, (4, 2)), "b": rng.normal(0.3, 0.02, (4, 2))}), LEGACY)
    assert table[0].startswith("| pair | metric | I × J |")
    assert table[2].startswith("| a − b | Δacc D'_f | 4 × 2 | -0.199 [")
