"""The federated online learning-to-rank task: clicks, PDGD, NDCG, the LETOR loader, unlearning, the whole job."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import permutations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import results, run_cli

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.ranking.data import FEATURES, Mq2007, Queries, SyntheticLetor, read_letor
from unlearnbench.tasks.ranking.federation import (
    HONEST,
    ModelPoisoning,
    QueryCursor,
    Simulator,
    fedavg,
    train_federation,
)
from unlearnbench.tasks.ranking.methods.base import FederatedTask
from unlearnbench.tasks.ranking.methods.fed_finetune import FedFinetune
from unlearnbench.tasks.ranking.methods.fed_retrain import FedRetrain
from unlearnbench.tasks.ranking.methods.federaser import FedEraser
from unlearnbench.tasks.ranking.methods.fedremove import FedRemove
from unlearnbench.tasks.ranking.pdgd import CLICK_MODELS, Ndcg, cascade_clicks, display, pdgd_gradient, pdgd_pairs

RNG = np.random.default_rng(7)


def random_lists(batch: int = 200, width: int = 30):
    scores = RNG.normal(size=(batch, width))
    scores[:, 20:] = -np.inf  # padding beyond 20 documents
    labels = np.where(np.isfinite(scores), RNG.integers(0, 3, (batch, width)), -1)
    ranking, shown = display(scores, RNG.gumbel(size=(batch, width)))
    return scores, labels, ranking, shown


# ------------------------------------------------------------------ clicks and PDGD


def test_perfect_click_model_never_clicks_a_non_relevant_document():
    _, labels, ranking, shown = random_lists()
    relevance = np.take_along_axis(labels, ranking, 1)
    clicks = cascade_clicks(relevance, shown, RNG.random((*ranking.shape, 2)), CLICK_MODELS["perfect"])
    assert clicks.any() and not (clicks & (relevance == 0)).any()
    assert (clicks[relevance == 2]).all()  # P(click | 2) = 1 and the perfect user never stops


def test_cascade_user_stops_after_a_stopping_click():
    relevance = np.array([[2, 2, 2]])
    uniform = np.array([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])  # clicks, and stops, wherever it can
    clicks = cascade_clicks(relevance, np.ones((1, 3), bool), uniform, CLICK_MODELS["navigational"])
    assert clicks.tolist() == [[True, False, False]]


def test_no_clicks_give_a_zero_gradient():
    scores, _, ranking, shown = random_lists(20)
    features = RNG.normal(size=(*scores.shape, 5))
    gradient = pdgd_gradient(features, scores, ranking, shown, np.zeros(ranking.shape, bool))
    assert gradient.shape == (20, 5) and not gradient.any()


def test_rho_lies_strictly_between_0_and_1_and_matches_the_plackett_luce_probabilities():
    scores, labels, ranking, shown = random_lists(100)
    clicks = cascade_clicks(np.take_along_axis(labels, ranking, 1), shown, RNG.random((*ranking.shape, 2)),
                            CLICK_MODELS["informational"])
    pairs = pdgd_pairs(scores, ranking, shown, clicks)
    assert len(pairs.rho) > 50 and ((pairs.rho > 0) & (pairs.rho < 1)).all()
    for q, a, b, rho in list(zip(pairs.query, pairs.a, pairs.b, pairs.rho, strict=True))[:20]:
        order = list(ranking[q])
        swapped = order.copy()
        swapped[a], swapped[b] = swapped[b], swapped[a]
        p, p_swapped = (plackett_luce(scores[q], listed, min(a, b), max(a, b)) for listed in (order, swapped))
        assert rho == pytest.approx(p_swapped / (p + p_swapped), rel=1e-9)


def plackett_luce(scores: np.ndarray, listed: list[int], low: int, high: int) -> float:
    """Product of the Plackett–Luce step probabilities of ranks low..high, denominators over every document."""
    placed = set(listed[:low])
    p = 1.0
    for r in range(low, high + 1):
        rest = [d for d in range(len(scores)) if np.isfinite(scores[d]) and d not in placed]
        p *= np.exp(scores[listed[r]]) / sum(np.exp(scores[d]) for d in rest)
        placed.add(listed[r])
    return p


def test_rho_is_one_half_for_adjacent_documents_with_equal_scores():
    scores = np.array([[0.3, 0.3, -1.0]])
    ranking, shown = np.array([[0, 1, 2]]), np.ones((1, 3), bool)
    pairs = pdgd_pairs(scores, ranking, shown, np.array([[False, True, False]]))
    (rho,) = pairs.rho[(pairs.a == 1) & (pairs.b == 0)]
    assert rho == 0.5
    assert set(zip(pairs.a.tolist(), pairs.b.tolist(), strict=True)) == {(1, 0), (1, 2)}  # one below the last click


def test_gradient_is_the_weighted_sum_of_feature_differences():
    scores = np.array([[0.5, -0.2, 0.1]])
    features = RNG.normal(size=(1, 3, 4))
    ranking, shown = np.array([[2, 0, 1]]), np.ones((1, 3), bool)
    clicks = np.array([[False, True, False]])
    pairs = pdgd_pairs(scores, ranking, shown, clicks)
    expected = sum(w * (features[0, ranking[0, a]] - features[0, ranking[0, b]])
                   for a, b, w in zip(pairs.a, pairs.b, pairs.weight, strict=True))
    np.testing.assert_allclose(pdgd_gradient(features, scores, ranking, shown, clicks)[0], expected)


def test_plackett_luce_sampling_shows_documents_in_proportion_to_softmax():
    scores = np.array([[np.log(3.0), 0.0, -np.inf]])
    firsts = [display(scores, RNG.gumbel(size=(1, 3)))[0][0, 0] for _ in range(4000)]
    assert np.mean(np.array(firsts) == 0) == pytest.approx(0.75, abs=0.03)


def test_fedavg_of_identical_models_is_the_identity():
    w = RNG.normal(size=FEATURES)
    np.testing.assert_allclose(fedavg(np.tile(w, (10, 1))), w, rtol=1e-15, atol=0)


# ------------------------------------------------------------------ NDCG


def tiny_queries() -> Queries:
    labels = np.array([[2, 0, 1, -1], [0, 0, 0, -1], [1, 0, 0, 2]])
    features = np.zeros((3, 4, 2))
    features[..., 0] = np.clip(labels, 0, None)  # feature 0 is the relevance
    features[..., 1] = [[0, 1, 2, 0], [0, 0, 0, 0], [3, 2, 1, 0]]  # feature 1 ranks badly
    return Queries(features, labels, (labels >= 0).sum(1), np.arange(3))


def test_ndcg_of_the_ideal_ranking_is_one_and_queries_without_relevant_documents_are_left_out():
    queries = tiny_queries()
    ndcg = Ndcg(queries.features, queries.labels)
    assert ndcg(np.array([1.0, 0.0])) == pytest.approx(1.0)
    # by feature 1: query 0 shows (rel 1, 0, 2), query 2 shows (1, 0, 0, 2); query 1 (nothing relevant) is skipped
    discount = 1 / np.log2(np.arange(2, 6))
    first = (1 * discount[0] + 3 * discount[2]) / (3 * discount[0] + 1 * discount[1])
    third = (1 * discount[0] + 3 * discount[3]) / (3 * discount[0] + 1 * discount[1])
    assert ndcg(np.array([0.0, 1.0])) == pytest.approx((first + third) / 2)
    np.testing.assert_allclose(ndcg.curve(np.array([[1.0, 0.0], [0.0, 1.0]])), [1.0, (first + third) / 2])


# ------------------------------------------------------------------ data


def letor_line(label: int, qid: int, values: np.ndarray, doc: str) -> str:
    features = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(values))
    return f"{label} qid:{qid} {features} #docid = {doc} inc = 0.0474 prob = 0.1164"


def test_loader_reads_a_fabricated_mq2007_fold(tmp_path):
    folder = tmp_path / "MQ2007" / "Fold1"
    folder.mkdir(parents=True)
    rows = [(2, 10, "GX001-01"), (0, 10, "GX001-02"), (1, 10, "GX001-03"), (0, 7, "GX002-01"), (1, 7, "GX002-02")]
    values = RNG.uniform(0, 1, (len(rows), FEATURES)).round(6)
    (folder / "train.txt").write_text("\n".join(letor_line(label, qid, v, doc) for (label, qid, doc), v
                                                in zip(rows, values, strict=True)) + "\n")
    (folder / "test.txt").write_text(letor_line(1, 3, values[0], "GX003-01") + "\n")
    data = Mq2007(name="mq2007", root=str(tmp_path), fold=1).load()
    train = data.train
    assert train.qids.tolist() == [10, 7] and train.sizes.tolist() == [3, 2]  # queries in file order
    assert train.features.shape == (2, 3, 46) and train.labels.tolist() == [[2, 0, 1], [0, 1, -1]]
    np.testing.assert_allclose(train.features[1, 1], values[4])
    assert len(data.test) == 1


def test_missing_mq2007_files_say_where_they_go(tmp_path):
    with pytest.raises(UserError, match=r"MQ2007/Fold2/train.txt.*MQ2007.rar"):
        Mq2007(name="mq2007", root=str(tmp_path), fold=2).load()
    with pytest.raises(UserError, match="valid folds: 1, 2, 3, 4, 5"):
        Mq2007(name="mq2007", root=str(tmp_path), fold=6)


def test_synthetic_letor_is_written_in_the_letor_format_and_seeded(tmp_path):
    source = SyntheticLetor(name="synthetic_letor", root=str(tmp_path), train_queries=60, test_queries=20)
    data = source.load()
    train_file = source.folder() / "train.txt"
    first = train_file.read_text().splitlines()[0]
    assert first.split()[1].startswith("qid:") and "#docid = " in first and len(first.split("#")[0].split()) == 48
    again = read_letor(train_file)
    np.testing.assert_array_equal(again.labels, data.train.labels)
    other = SyntheticLetor(name="synthetic_letor", root=str(tmp_path / "b"), train_queries=60, test_queries=20).load()
    np.testing.assert_array_equal(other.train.features, data.train.features)  # same seed, same data
    sizes = data.train.sizes
    assert sizes.min() >= 6 and sizes.max() <= 147 and len(data.train) == 60 and len(data.test) == 20
    assert set(np.unique(data.train.labels)) <= {-1, 0, 1, 2}
    real = data.train.features[data.train.valid]
    assert real.min() >= 0 and real.max() <= 1  # min–max normalised per query


# ------------------------------------------------------------------ federation and unlearning


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Synthetic data of 300 training and 100 test queries; 300 training rounds, 400 unlearning rounds."""
    data = SyntheticLetor(name="synthetic_letor", root=str(tmp_path_factory.mktemp("letor")), train_queries=300,
                          test_queries=100).load()
    poisoned = ModelPoisoning(rounds=300, unlearning_rounds=400)
    clean = ModelPoisoning(malicious=(), rounds=300, unlearning_rounds=400)
    return data, poisoned, train_federation(data, poisoned, 0.1, 0), train_federation(data, clean, 0.1, 0)


def unlearn(method, data, scenario, trained, seed_unlearn: int):
    simulator = Simulator(data.train, CLICK_MODELS[scenario.click_model], 0.1)
    rounds = method.unlearn(trained, FederatedTask(data, scenario, simulator, 0, seed_unlearn))
    return Ndcg(data.test.features, data.test.labels).curve(np.array(rounds.globals))


def test_clean_training_ranks_clearly_better_than_poisoned_training(small):
    data, _, poisoned, clean = small
    ndcg = Ndcg(data.test.features, data.test.labels)
    assert ndcg(clean.final) > 0.6 and ndcg(poisoned.final) < 0.3
    assert poisoned.globals.shape == (301, FEATURES) and poisoned.locals.shape == (300, 10, FEATURES)


def test_unlearning_recovers_except_fedremove(small):
    data, scenario, poisoned, clean = small
    ndcg = Ndcg(data.test.features, data.test.labels)
    low, high = ndcg(poisoned.final), ndcg(clean.final)
    for method in (FedRetrain("fed_retrain"), FedFinetune("fed_finetune"), FedEraser("federaser")):
        final = unlearn(method, data, scenario, poisoned, 0)[-1]
        assert final > low + 0.6 * (high - low), (method.name, final, low, high)
    remove = unlearn(FedRemove("fedremove"), data, scenario, poisoned, 0)
    assert remove[-1] < low + 0.25 * (high - low)
    np.testing.assert_array_equal(remove, unlearn(FedRemove("fedremove"), data, scenario, poisoned, 1))


def test_unlearning_is_seeded(small):
    """The unlearning seed fixes every round's clicks: compared over 100 unlearning rounds (each round draws anew)."""
    data, scenario, poisoned, _ = small
    scenario = replace(scenario, unlearning_rounds=100)
    first = unlearn(FedFinetune("fed_finetune"), data, scenario, poisoned, 3)
    assert len(first) == 100
    np.testing.assert_array_equal(first, unlearn(FedFinetune("fed_finetune"), data, scenario, poisoned, 3))
    assert not np.array_equal(first, unlearn(FedFinetune("fed_finetune"), data, scenario, poisoned, 4))
    again = train_federation(data, ModelPoisoning(rounds=300), 0.1, 0)
    np.testing.assert_array_equal(again.globals, poisoned.globals)


def test_clients_take_their_partition_in_order_and_wrap():
    cursor = QueryCursor(np.array([[5, 6, 7], [1, 2, 3]]))
    assert cursor.take([0, 1], 2).tolist() == [[5, 6], [1, 2]]
    assert cursor.take([0], 2).tolist() == [[7, 5]] and cursor.pointers.tolist() == [1, 2]


def test_local_models_take_one_pdgd_step_per_query(small):
    data, *_ = small
    simulator = Simulator(data.train, CLICK_MODELS["perfect"], 0.1)
    start = np.zeros(FEATURES)
    models, online = simulator.local_models(start, np.array([[0, 1], [2, 3]]),
                                            [np.random.default_rng(1), np.random.default_rng(2)], [HONEST, HONEST])
    assert models.shape == (2, FEATURES) and np.isfinite(models).all() and 0 <= online <= 1


# ------------------------------------------------------------------ the job and the report


FAST = ["experiment=foltr", "scenario.rounds=40", "scenario.unlearning_rounds=30", "dataset.train_queries=120",
        "dataset.test_queries=40"]


@pytest.mark.processes
def test_foltr_sweep_over_training_seeds_reports_trajectories_for_every_method(tmp_path):
    run = run_cli([*FAST, "seeds.train=range(3)", "report.figures=true"], tmp_path)
    assert run.returncode == 0, run.stderr
    jobs = results(tmp_path / "sweep")
    assert len(jobs) == 3 and all(r["status"] == "complete" and r["job"]["task"] == "ranking" for r in jobs.values())
    methods = {p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "method").glob("fed*.yaml")}
    for result in jobs.values():
        rounds = {}
        for r in result["records"]:
            if r["metric"] == "ndcg@10":
                rounds.setdefault(r["method"], []).append(r["round"])
        assert rounds[None] == list(range(41))  # the original model: before training, then every training round
        assert set(rounds) - {None} == methods
        assert all(r == list(range(41, 71)) for m, r in rounds.items() if m is not None)
    summary = pd.read_csv(tmp_path / "sweep" / "report" / "summary.csv")
    trajectory = summary[summary["metric"] == "ndcg@10"]
    assert set(trajectory["n"]) == {3}  # mean ± std over the three training seeds, every round
    figures = list((tmp_path / "sweep" / "report" / "figures").glob("trajectory_*.png"))
    assert figures and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
    assert "fed_finetune" in run.stdout and "NDCG@10" in run.stdout  # the job's own table
    report = (tmp_path / "sweep" / "report" / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("|  |"))
    assert [c.strip() for c in header.split("|")[2:6]] == ["NDCG@10", "online NDCG", "‖w_T − w‖", "time s"]
    retrain_row = next(line for line in report.splitlines() if line.startswith("| fed_retrain |"))
    assert "**" not in retrain_row  # the gold standard is the reference, never the best
    ndcg_cells = [line.split("|")[2] for line in report.splitlines() if line.startswith("| fed")]
    assert sum("**" in cell for cell in ndcg_cells) >= 1  # closest to fed_retrain's NDCG@10 is marked


@pytest.mark.processes
def test_foltr_seed_grid_separates_training_and_unlearning_seed_variance(tmp_path):
    run = run_cli([*FAST, "+method=fedremove,fed_finetune", "seeds.train=range(2)", "seeds.unlearn=range(2)",
                   "report.figures=true"],
                  tmp_path)
    assert run.returncode == 0, run.stderr
    report = tmp_path / "sweep" / "report"
    variance = pd.read_csv(report / "seed_variance.csv").set_index(["method", "metric"])
    assert variance.loc[("fedremove", "ndcg@10"), "sigma_u2"] == 0.0  # deterministic: the unlearning seed is unused
    assert variance.loc[("fedremove", "ndcg@10"), "sigma_t2"] > 0.0
    assert variance.loc[("fed_finetune", "ndcg@10"), "sigma_u2"] > 0.0  # its clicks are drawn from the unlearning seed
    figures = {f.name for f in (report / "figures").glob("*.png")}
    assert "designs_synthetic_letor_linear_ranker_model_poisoning_ndcg-10.png" in figures
    assert "variance_synthetic_letor_linear_ranker_model_poisoning.png" in figures


@pytest.mark.parametrize(("args", "message"), [
    (["experiment=foltr", "+method=finetune"], "method finetune serves the image task"),
    (["+method=fedremove"], "method fedremove serves the ranking task"),
    (["experiment=foltr", "dataset=mq2007"], "MQ2007/Fold1/train.txt"),
    (["experiment=foltr", "scenario.click_model=lazy"], "unknown click model 'lazy'; valid: perfect"),
])
@pytest.mark.processes
def test_task_mismatches_and_missing_files_fail_clearly(tmp_path, args, message):
    run = run_cli(args, tmp_path)
    assert run.returncode != 0 and message in run.stderr and "Traceback" not in run.stderr
    for result in results(tmp_path / "sweep").values():
        assert json.dumps(result).count(message.split(";")[0][:30]) >= 1


def test_all_pairs_of_a_three_document_list():
    """Every click pattern on a three-document list gives pairs consistent with the definition."""
    scores, ranking, shown = np.array([[0.2, 0.1, 0.0]]), np.array([[0, 1, 2]]), np.ones((1, 3), bool)
    for pattern in {p for n in range(4) for p in permutations([True] * n + [False] * (3 - n))}:
        clicks = np.array([pattern])
        pairs = pdgd_pairs(scores, ranking, shown, clicks)
        last = max((i for i, c in enumerate(pattern) if c), default=-2)
        expected = {(a, b) for a in range(3) for b in range(3) if pattern[a] and not pattern[b] and b <= last + 1}
        assert set(zip(pairs.a.tolist(), pairs.b.tolist(), strict=True)) == expected
