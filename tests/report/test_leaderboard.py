"""The leaderboard's statistics on constructed tables whose answer is known, each checked against a re-implementation
written here: Friedman's statistic from its formula, the exact signed-rank p-value by enumerating sign flips, Holm's
step-down by hand, the bootstrap's rank intervals and P(best) by a loop; and the report's leaderboard section."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from unlearnbench.report.build import build_report
from unlearnbench.report.compute.leaderboard import (
    AGGREGATE,
    RESAMPLES,
    SEED,
    blocks_needed,
    bootstrap_ranks,
    leaderboards,
    ranks_of,
    tables,
)
from unlearnbench.report.read.catalogue import legacy_catalogue
from unlearnbench.report.render.words import joined
from unlearnbench.runtime.errors import UserError

KEYS = ["dataset", "model", "scenario"]
METRIC = ("delta_acc", "forget_test")
LEGACY = legacy_catalogue()


def values(scores: dict[str, np.ndarray], metric: tuple[str, str] = METRIC, unlearning_seeds: int = 1,
           targets: tuple[str, ...] = ("3",)) -> pd.DataFrame:
    """study.values-shaped records: method m's value for target t, training seed i, unlearning seed j is
    scores[m][i] (plus ±0.01 alternating over j, which the block mean cancels)."""
    rows = []
    for method, per_seed in scores.items():
        for target, (i, value), j in itertools.product(targets, enumerate(per_seed), range(unlearning_seeds)):
            wobble = 0.0 if unlearning_seeds == 1 else 0.01 * (-1) ** j
            rows.append({"dataset": "digits", "model": "resnet18", "scenario": "full_class", "target": target,
                         "role": "unlearned", "method": method, "metric": metric[0], "split": metric[1],
                         "seed_train": i, "seed_unlearn": 100 * i + j, "seed_eval": 100 * i + j,
                         "value": value + wobble})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def known():
    """Two methods drawn alike (`alpha`, `beta`), one clearly worse (`gamma`), over 12 training seeds."""
    rng = np.random.default_rng(7)
    scores = {"alpha": rng.uniform(0.0, 0.2, 12), "beta": rng.uniform(0.0, 0.2, 12),
              "gamma": rng.uniform(0.5, 0.7, 12)}
    board, = leaderboards(values(scores, unlearning_seeds=2), KEYS, [METRIC], LEGACY)
    return scores, board


def test_two_equal_methods_and_a_clearly_worse_one(known):
    scores, board = known
    rows = {r["method"]: r for r in board.rows}
    assert rows["gamma"]["mean_rank"] == 3.0 and rows["gamma"]["p_best"] == 0.0
    assert rows["gamma"]["rank_low"] == rows["gamma"]["rank_high"] == 3.0
    assert rows["alpha"]["p_best"] + rows["beta"]["p_best"] == pytest.approx(1.0)
    assert rows["alpha"]["friedman_p"] < 0.01 and not rows["alpha"]["note"]
    verdicts = {(p["method_a"], p["method_b"]): p["different"] for p in board.pairs}
    assert verdicts == {("alpha", "beta"): False, ("alpha", "gamma"): True, ("beta", "gamma"): True}
    for method, row in rows.items():
        assert row["rank_low"] <= row["mean_rank"] <= row["rank_high"]
        assert row["score"] == pytest.approx(np.abs(scores[method]).mean())  # the block means: ±0.01 cancels


def test_friedman_matches_its_formula(known):
    scores, board = known
    matrix = np.column_stack([scores[m] for m in ("alpha", "beta", "gamma")])
    n, k = matrix.shape
    ranks = np.array([scipy_stats.rankdata(row) for row in matrix])
    statistic = 12 / (n * k * (k + 1)) * np.sum(ranks.sum(axis=0) ** 2) - 3 * n * (k + 1)
    assert board.rows[0]["friedman_p"] == pytest.approx(scipy_stats.chi2.sf(statistic, k - 1), rel=1e-9)


def exact_signed_rank_p(differences: np.ndarray) -> float:
    """Two-sided exact p of Wilcoxon's signed-rank test: the share of the 2ⁿ sign assignments whose rank sum of
    positives is at least as far from its mean as the observed one (no zeros, no ties)."""
    ranks = scipy_stats.rankdata(np.abs(differences))
    observed = ranks[differences > 0].sum()
    centre = ranks.sum() / 2
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s) for signs in
            itertools.product((0, 1), repeat=len(ranks))]
    return float(np.mean([abs(s - centre) >= abs(observed - centre) - 1e-9 for s in sums]))


def holm(p: list[float]) -> list[float]:
    order = np.argsort(p)
    adjusted, running = [0.0] * len(p), 0.0
    for step, index in enumerate(order):
        running = max(running, (len(p) - step) * p[index])
        adjusted[index] = min(1.0, running)
    return adjusted


def test_wilcoxon_holm_match_the_exact_test_and_holms_step_down(known):
    scores, board = known
    pairs = board.pairs
    exact = [exact_signed_rank_p(scores[p["method_a"]] - scores[p["method_b"]]) for p in pairs]
    assert [p["p"] for p in pairs] == pytest.approx(exact, rel=1e-9)
    assert [p["p_holm"] for p in pairs] == pytest.approx(holm(exact), rel=1e-9)


def test_bootstrap_matches_a_loop_over_resampled_training_seeds(known):
    _, board = known
    ranks = board.ranks[METRIC]
    seeds = sorted(set(ranks.index.get_level_values("seed_train")))
    methods = list(ranks.columns)
    picks = np.random.default_rng([SEED, len(seeds), len(methods), RESAMPLES]).integers(0, len(seeds),
                                                                                     (RESAMPLES, len(seeds)))
    blocks_of = {seed: ranks.xs(seed, level="seed_train").to_numpy() for seed in seeds}  # its rows, by column
    means, best = [], np.zeros(len(methods))
    for draw in picks:
        blocks = np.concatenate([blocks_of[seeds[k]] for k in draw])
        mean = [float(value) for value in blocks.mean(axis=0)]
        winners = [m for m, v in zip(methods, mean, strict=True) if v == min(mean)]
        for m in winners:
            best[methods.index(m)] += 1 / len(winners)
        means.append(mean)
    expected = bootstrap_ranks(ranks)
    np.testing.assert_allclose(expected["p_best"], best / RESAMPLES, rtol=1e-12)
    np.testing.assert_allclose(expected["rank_low"], np.percentile(means, 2.5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(expected["rank_high"], np.percentile(means, 97.5, axis=0), rtol=1e-12)


def test_blocks_needed_is_where_the_smallest_p_reaches_alpha():
    friedman, wilcoxon = blocks_needed(3)
    assert friedman == 3  # χ²(2) tail at n(k − 1) = 2n is e^(−n): e^(−3) ≤ 0.05 < e^(−2)
    assert wilcoxon == 7  # 2/2⁷ ≤ 0.05/3 < 2/2⁶
    separated = {"a": np.arange(1, 8) * 0.01, "b": np.arange(1, 8) * 0.01 + 0.5, "c": np.arange(1, 8) * 0.01 + 1}
    board, = leaderboards(values(separated), KEYS, [METRIC], LEGACY)
    assert all(p["different"] for p in board.pairs) and not board.rows[0]["note"]
    short = {m: v[:6] for m, v in separated.items()}
    board, = leaderboards(values(short), KEYS, [METRIC], LEGACY)
    assert not board.pairs and joined(board.rows[0]["note"]) == (
        "a Wilcoxon–Holm test over 3 methods needs 7 blocks, not 6: 7 training seeds of 1 target "
        "(seeds.train=range(7))")


def test_ranks_are_within_blocks_ties_shared_and_retrained_ideals_use_m_rs_block_mean():
    scores = pd.DataFrame({"a": [0.1, 0.2], "b": [0.1, 0.3], "c": [0.0, 0.4]})
    np.testing.assert_array_equal(ranks_of(scores).to_numpy(), [[2.5, 2.5, 1], [1, 2, 3]])
    frame = values({"a": np.array([0.50, 0.50]), "b": np.array([0.80, 0.90]), "retrain": np.array([0.0, 0.0])},
                   metric=("acc", "forget_train"))
    reference = frame[frame["method"] == "a"].assign(role="retrained", method="", value=[0.85, 0.88])
    board, = leaderboards(pd.concat([frame, reference]), KEYS, [("acc", "forget_train")], LEGACY)
    rows = {r["method"]: r for r in board.rows}
    assert set(rows) == {"a", "b"}  # retrain (M_r itself) is not ranked
    assert rows["b"]["mean_rank"] == 1.0 and rows["b"]["score"] == pytest.approx(0.035)


def test_the_aggregate_is_the_mean_rank_over_the_metrics(known):
    """On 8 of the 12 training seeds: enough for the pairwise tests (7), whose exact null over tied mean ranks
    enumerates 2ⁿ sign flips (2¹² took seconds)."""
    scores = {method: per_seed[:8] for method, per_seed in known[0].items()}
    other = {"alpha": scores["gamma"], "beta": scores["alpha"], "gamma": scores["beta"]}  # alpha now worst
    frame = pd.concat([values(scores), values(other, metric=("delta_mia", "forget_train"))])
    board, = leaderboards(frame, KEYS, [METRIC, ("delta_mia", "forget_train")], LEGACY)
    aggregate = {r["method"]: r["mean_rank"] for r in board.rows if r["metric"] == AGGREGATE}
    per_metric = board.ranks[METRIC] + board.ranks[("delta_mia", "forget_train")]
    expected = ranks_of(per_metric / 2).mean()
    assert aggregate == pytest.approx(expected.to_dict())
    ranked, pairs = tables([board], KEYS)
    assert set(ranked["metric"]) == {"delta_acc", "delta_mia", AGGREGATE} and len(pairs) == 9


def test_the_report_opens_with_the_leaderboard_and_a_small_sweep_says_what_a_test_needs(tmp_path):
    for i in range(2):
        records = [{"target": "3", "method": m, "role": "unlearned", "metric": "delta_acc", "split": "forget_test",
                    "value": v + i / 100} for m, v in (("alpha", 0.1), ("beta", 0.3), ("gamma", 0.2))]
        folder = tmp_path / "sweep" / f"job{i}"
        folder.mkdir(parents=True)
        job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
               "method": "all", "seed_train": i, "seed_unlearn": i, "seed_eval": i}
        (folder / "result.json").write_text(json.dumps({"schema": 1, "status": "complete", "error": None,
                                                        "job": job, "records": records}))
    report = build_report([tmp_path / "sweep"], tmp_path / "report", figures=False)
    text = (tmp_path / "report" / "report.md").read_text()
    assert text.index("\n## Leaderboard") < text.index("\n## Warnings") < text.index("\n## digits · resnet18")
    assert "| method | mean rank by Δacc D'_f [95%] | P(best) |" in text and "| alpha | 1 [1, 1] | 1.00 |" in text
    assert ("no pairwise test: a Wilcoxon–Holm test over 3 methods needs 7 blocks, not 2: 7 training seeds of 1 "
            "target") in text
    board = pd.read_csv(tmp_path / "report" / "leaderboard.csv")
    assert list(board.sort_values("mean_rank")["method"]) == ["alpha", "gamma", "beta"]
    assert math.isnan(board["friedman_p"].iloc[0])  # 2 blocks: Friedman needs 3 for 3 methods
    assert report.study.leaderboard


def test_the_critical_difference_diagram_is_drawn_where_the_pairs_were_tested(known, tmp_path):
    from types import SimpleNamespace

    from unlearnbench.report.render.figures import leaderboard
    from unlearnbench.report.render.markdown import leaderboard_section

    _, board = known
    path, = leaderboard(SimpleNamespace(leaderboard=[board], catalogue=LEGACY), tmp_path)
    assert path.name == "leaderboard_digits_resnet18_full_class.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = leaderboard_section([board], {path.stem: f"figures/{path.name}"}, LEGACY)
    assert f"![critical-difference diagram](figures/{path.name})" in section
    assert any("pairs that differ (Wilcoxon–Holm, α = 0.05; < reads closer to the ideal): alpha < gamma, "
               "beta < gamma." in line for line in section)
    short, = leaderboards(values({m: v[:6] for m, v in known[0].items()}), KEYS, [METRIC], LEGACY)
    no_test = SimpleNamespace(leaderboard=[short], catalogue=LEGACY)
    assert leaderboard(no_test, tmp_path / "none") == []  # no test: no diagram


def small_sweep(folder, catalogue: dict | None = None) -> None:
    """Two jobs of three methods recording Δacc D'_f (schema 1, or schema 2 with `catalogue`)."""
    for i in range(2):
        records = [{"target": "3", "method": m, "role": "unlearned", "metric": "delta_acc", "split": "forget_test",
                    "value": v + i / 100} for m, v in (("alpha", 0.1), ("beta", 0.3), ("gamma", 0.2))]
        job_folder = folder / f"job{i}"
        job_folder.mkdir(parents=True)
        job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
               "method": "all", "seed_train": i, "seed_unlearn": i, "seed_eval": i}
        extra = {} if catalogue is None else {"catalogue": catalogue}
        (job_folder / "result.json").write_text(json.dumps({"schema": 2 if extra else 1, "status": "complete",
                                                            "error": None, "job": job, "records": records, **extra}))


def test_a_leaderboard_metric_without_a_best_value_or_records_is_refused_in_one_line_when_the_report_is_built(
        tmp_path):
    """The config checks the syntax only; the results' catalogue says which metrics have a best value, and the
    report refuses the others before writing a file."""
    from helpers import compose_config

    from unlearnbench.core.config import leaderboard_problems, validate

    assert leaderboard_problems(["acc:forget_train", "relearn_steps:forget_train", "ndcg@10", "anything"]) == []
    problem, = leaderboard_problems(["acc:forget_train", ":forget_train", "acc:"])
    assert problem == ("the 'report.leaderboard.metrics' option must name metrics as metric or metric:split (a "
                       "recorded metric's name, then optionally one of its splits); got ':forget_train', 'acc:' "
                       "instead")
    with pytest.raises(UserError, match=r"^invalid config: the 'report.leaderboard.metrics' option must name"):
        validate(compose_config(["report.leaderboard.metrics=[:bar]"]))
    assert compose_config([]).report.leaderboard.metrics is None  # the declared ones
    validate(compose_config(["report.leaderboard.metrics=[foo:bar]"]))
    small_sweep(tmp_path / "sweep")
    for named in (["delta_acc:forget_test", "weight_distance"], ["delta_acc:forget_test", "acc:forget_test"]):
        with pytest.raises(UserError) as refused:  # no best value; a best value, but recorded by no result
            build_report([tmp_path / "sweep"], tmp_path / "report", figures=False, leaderboard_metrics=named)
        assert str(refused.value) == ("the 'report.leaderboard.metrics' option must name metrics with a best value "
                                      f"(metric or metric:split of delta_acc); got {named[1]} instead")
    assert not (tmp_path / "report").exists()


def test_the_default_leaderboard_metrics_are_the_declared_ones_of_the_results(tmp_path):
    """A schema-2 result declares Δacc D'_f a leaderboard metric under its own label; a schema-1 one is read with
    the legacy catalogue, whose leaderboard has Δacc D'_f among others."""
    declared = {"metrics": [{"name": "delta_acc", "label": "gap", "ideal": 0.0, "headline": ["forget_test"],
                             "leaderboard": ["forget_test"]}], "splits": {"forget_test": "test"},
                "gold_standards": ["retrain"]}
    small_sweep(tmp_path / "new", declared)
    small_sweep(tmp_path / "old")
    for sweep in ("new", "old"):
        report = build_report([tmp_path / sweep], tmp_path / sweep / "report", figures=False)
        board, = report.study.leaderboard
        assert {(row["metric"], row["split"]) for row in board.rows} == {METRIC}
    new = (tmp_path / "new" / "report" / "report.md").read_text()
    assert "| method | mean rank by gap test [95%] | P(best) |" in new
    assert "| alpha | **0.105 ± 0.00707** | 2 | 2 |" in new and "| gap test | I | n |" in new
