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
from unlearnbench.report.compute.analysis import Caveat, analyse
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
from unlearnbench.report.render.markdown import caveat_text, render

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
    assert study.warnings == [Caveat("few_training_seeds", {"below": 10, "seeds": [3]}), Caveat("one_unlearning_seed")]
    assert [caveat_text(caveat) for caveat in study.warnings] == [
        "fewer than 10 training seeds (I = 3): σ_T² is barely identifiable; its interval is wide",
        "one unlearning seed per training seed (J = 1): only the total variance is identifiable and there is no "
        "single-training-seed design to compare (no W2)"]
    unbalanced = Caveat("unbalanced", {"rows": 2, "methods": ["a", "b"]})
    assert caveat_text(unbalanced).startswith("unbalanced grid (2 rows; methods a, b): not every training seed")


def test_wilson_interval():
    low, high = wilson(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # the textbook value for 5 of 10
    assert wilson(0, 4)[0] == 0.0 and wilson(4, 4)[1] == 1.0


@pytest.mark.parametrize(("sigma_t2", "sigma_u2", "cost_train", "cost_unlearn", "target"), [
    (1e-4, 4e-4, 30.0, 5.0, 0.005), (4e-4, 1e-4, 10.0, 10.0, 0.01), (2.5e-3, 2.5e-3, 1.0, 50.0, 0.02),
    (1e-5, 9e-4, 100.0, 1.0, 0.01)])
def test_seed_plan_is_the_cheapest_design_reaching_the_target(sigma_t2, sigma_u2, cost_train, cost_unlearn, target):
    plan = seed_plan(sigma_t2, sigma_u2, cost_train, cost_unlearn, target)
    assert plan.se <= target * (1 + 1e-9)
    assert plan.cost_s == pytest.approx(plan.I * cost_train + plan.I * plan.J * cost_unlearn)
    feasible = [(i * cost_train + i * j * cost_unlearn, j, i) for i in range(1, 300) for j in range(1, 300)
                if sigma_t2 / i + sigma_u2 / (i * j) <= target**2 * (1 + 1e-9)]
    cheapest = min(feasible)
    assert plan.cost_s == pytest.approx(cheapest[0])
    assert plan.j_star == pytest.approx(math.sqrt(cost_train * sigma_u2 / (cost_unlearn * sigma_t2)))


def test_seed_plan_says_when_unlearning_seeds_buy_nothing():
    plan = seed_plan(0.01, 0.0, 30.0, 5.0, 0.01)  # a deterministic method, e.g. SSD in a targeted scenario
    assert (plan.I, plan.J, plan.j_star) == (100, 1, 0.0)
    assert "extra unlearning seeds buy nothing" in plan.note
    plan = seed_plan(0.0, 0.01, 30.0, 5.0, 0.01)  # no training-seed effect: one M_o, many unlearning seeds
    assert (plan.I, plan.J) == (1, 100) and plan.j_star == math.inf
    assert seed_plan(math.nan, 0.01, 30.0, 5.0, 0.01).I is None
    assert "no training or unlearning time" in seed_plan(0.01, 0.01, math.nan, 5.0, 0.01).note


def test_seed_plans_take_the_costs_from_the_sweep():
    """c_T: the median time to train M_o; c_U: the median of M_r's training time plus the method's time_s."""
    rng = np.random.default_rng(0)
    study = analyse(frame({"a": rng.normal(size=(5, 4)) * 0.01 + 0.1}, time_s=2.0, original_s=30.0,
                          retrained_s=20.0), LEGACY)
    priced = costs(study.values, study.keys)
    assert (priced["cost_train_s"].iloc[0], priced["cost_unlearn_s"].iloc[0]) == (30.0, 22.0)
    plans = seed_plans(study.variance, study.values, study.keys, [("delta_acc", "forget_test")], target_se=0.004)
    row = plans.iloc[0]
    expected = seed_plan(row["sigma_t2"], row["sigma_u2"], 30.0, 22.0, 0.004)
    assert (row["plan_I"], row["plan_J"], row["plan_cost_s"]) == (expected.I, expected.J, expected.cost_s)


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
