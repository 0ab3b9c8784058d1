"""The ranking task's numerics and budgets: ρ against an exact computation, a long perfect-click fine-tuning run that
used to turn NaN, the reference's online NDCG, its query budget, and the discounted online metric."""

from __future__ import annotations

import numpy as np
import pytest

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.ranking.bench import discounted
from unlearnbench.tasks.ranking.data import Queries, SyntheticLetor
from unlearnbench.tasks.ranking.federation import (
    HONEST,
    ModelPoisoning,
    QueryCursor,
    Simulator,
    online_ndcg,
    train_federation,
)
from unlearnbench.tasks.ranking.methods.base import FederatedTask
from unlearnbench.tasks.ranking.methods.fed_finetune import FedFinetune
from unlearnbench.tasks.ranking.pdgd import CLICK_MODELS, Ndcg, pdgd_pairs

mp = pytest.importorskip("mpmath")
RNG = np.random.default_rng(11)


# ------------------------------------------------------------------ ρ, exactly


def gapped_lists(gap: float, batch: int = 40, width: int = 25):
    """Lists of 3–25 documents whose one or two top documents outscore the rest by `gap`, shown in a random order
    or in the most probable one, with random clicks."""
    scores = np.full((batch, width), -np.inf)
    ranking, clicks = np.zeros((batch, 10), dtype=np.int64), np.zeros((batch, 10), dtype=bool)
    for row in range(batch):
        n = int(RNG.integers(3, width + 1))
        s = RNG.normal(size=n)
        s[RNG.choice(n, int(RNG.integers(1, 3)), replace=False)] += gap
        order = np.argsort(-s, kind="stable") if RNG.random() < 0.5 else RNG.permutation(n)
        k = min(10, n)
        scores[row, :n] = s
        ranking[row] = np.concatenate([order[:k], np.arange(n, n + 10 - k)])  # short lists: padding below
        clicks[row, :k] = RNG.random(k) < 0.4
    shown = np.isfinite(scores[np.arange(batch)[:, None], ranking])
    return scores, ranking, shown, clicks & shown


def exact_rho(scores: np.ndarray, order: list[int], low: int, high: int):
    """P(R*)/(P(R) + P(R*)) with 60 significant digits: the Plackett–Luce step probabilities of ranks low..high,
    each denominator summed over every document not placed above, from the float scores taken exactly."""
    real = [d for d in range(len(scores)) if np.isfinite(scores[d])]
    weight = {d: mp.exp(mp.mpf(float(scores[d]))) for d in real}

    def probability(listed: list[int]):
        placed, p = set(listed[:low]), mp.mpf(1)
        for r in range(low, high + 1):
            p *= weight[listed[r]] / mp.fsum(weight[d] for d in real if d not in placed)
            placed.add(listed[r])
        return p

    swapped = list(order)
    swapped[low], swapped[high] = swapped[high], swapped[low]
    p, q = probability(list(order)), probability(swapped)
    return q / (p + q)


@pytest.mark.parametrize("gap", [0.0, 10.0, 40.0, 700.0])
def test_rho_equals_the_exact_plackett_luce_ratio_whatever_the_score_gap(gap):
    with mp.workdps(60):
        scores, ranking, shown, clicks = gapped_lists(gap)
        pairs = pdgd_pairs(scores, ranking, shown, clicks)
        assert len(pairs.rho) > 100
        for q, a, b, rho in zip(pairs.query, pairs.a, pairs.b, pairs.rho, strict=True):
            exact = exact_rho(scores[q], list(ranking[q]), min(a, b), max(a, b))
            if exact > mp.mpf("1e-290"):  # a normal double: 1e-12 relative
                assert abs(mp.mpf(float(rho)) - exact) <= mp.mpf("1e-12") * exact, (gap, q, a, b, rho, exact)
            else:  # below the doubles' normal range: 0 or as tiny
                assert rho < 1e-290
        assert np.isfinite(pairs.weight).all() and (pairs.weight >= 0).all()


def test_a_dominant_top_document_keeps_rho_finite_where_the_running_difference_gave_nan():
    """Top document 45 above the rest: total − Σ shown cancels to 0 (or below) after it, the old denominators."""
    scores = np.array([[45.0, 0.3, -0.2, 0.1, -1.0]])
    ranking, shown = np.array([[0, 1, 2, 3, 4]]), np.ones((1, 5), dtype=bool)
    clicks = np.array([[False, False, True, False, False]])
    pairs = pdgd_pairs(scores, ranking, shown, clicks)
    with mp.workdps(60):
        for a, b, rho in zip(pairs.a, pairs.b, pairs.rho, strict=True):
            exact = exact_rho(scores[0], [0, 1, 2, 3, 4], min(a, b), max(a, b))
            assert float(rho) == pytest.approx(float(exact), rel=1e-12)
    assert {(int(a), int(b)) for a, b in zip(pairs.a, pairs.b, strict=True)} == {(2, 0), (2, 1), (2, 3)}


# ------------------------------------------------------------------ a long fine-tuning run stays finite


def test_long_perfect_click_fine_tuning_with_the_reference_budget_stays_finite(tmp_path):
    """Poisoned training, then fine-tuning with perfect clicks and the reference's budget (1000 per round, capped
    at the 10-query partition: one pass per round). At lr 2 the weights grow fast enough that the old running
    difference D_r = total − Σ shown turned every client's model NaN at unlearning round 135 of this very run;
    the full-size run (lr 0.1, 1000 wrapped interactions) did so at round 85."""
    data = SyntheticLetor(name="synthetic_letor", root=str(tmp_path), train_queries=100, test_queries=40).load()
    scenario = ModelPoisoning(click_model="perfect", rounds=200, unlearning_rounds=300)
    trained = train_federation(data, scenario, 2.0, 0)
    task = FederatedTask(data, scenario, Simulator(data.train, CLICK_MODELS["perfect"], 2.0), 0, 0)
    rounds = FedFinetune("fed_finetune", interactions_per_round=1000).unlearn(trained, task)
    models = np.array(rounds.globals)
    assert models.shape == (300, data.features) and np.isfinite(models).all()
    assert np.linalg.norm(models[-1]) > 1.4 * np.linalg.norm(trained.final)  # the weights grew (‖w‖ 33 → 50)
    ndcg = Ndcg(data.test.features, data.test.labels)
    assert ndcg(models[-1]) > ndcg(trained.final) + 0.3  # and it learned (poisoned 0.28, fine-tuned 0.69)
    assert np.isfinite(rounds.online).all()


# ------------------------------------------------------------------ online NDCG, as the reference's


def two_queries() -> Queries:
    """Query 0: relevance 2, 0, 1 with feature 0 the relevance; query 1: no relevant document."""
    labels = np.array([[2, 0, 1], [0, 0, 0]])
    features = np.zeros((2, 3, 2))
    features[..., 0] = labels
    return Queries(features, labels, np.array([3, 3]), np.arange(2))


def test_online_ndcg_scores_a_query_without_relevant_documents_zero_and_averages_per_client():
    simulator = Simulator(two_queries(), CLICK_MODELS["perfect"], 0.1)
    sharp = np.array([1e3, 0.0])  # ranks query 0 ideally whatever the Gumbel noise
    streams = [np.random.default_rng(1), np.random.default_rng(2)]
    _, online = simulator.local_models(sharp, np.array([[0, 1], [1, 1]]), streams, [HONEST, HONEST])
    assert online == pytest.approx((1.0 + 0.0) / 2 / 2)  # client means 1/2 and 0, then their mean
    _, nothing = simulator.local_models(sharp, np.array([[1]]), streams[:1], [HONEST])
    assert nothing == 0.0  # the pooled definition skipped it (NaN)
    assert online_ndcg(np.array([[3.0, 0.0]]), np.array([[4.0, 0.0]])) == pytest.approx(0.375)


def test_discounted_online_ndcg_counts_only_rounds_that_showed_lists():
    assert discounted(np.array([np.nan, 0.5, 0.25])) == pytest.approx(0.5 + 0.9995 * 0.25)
    assert discounted(np.array([0.4] * 3)) == pytest.approx(0.4 * (1 + 0.9995 + 0.9995**2))
    assert discounted(np.array([np.nan, np.nan])) is None


# ------------------------------------------------------------------ the query budget


def test_the_capped_budget_is_one_pass_over_the_partition_as_the_reference_and_wrapped_goes_round():
    partitions = np.array([[5, 6, 7], [1, 2, 3]])
    capped = QueryCursor(partitions, np.array([1, 0]))
    assert capped.take([0, 1], 1000).tolist() == [[6, 7, 5], [1, 2, 3]]
    assert capped.pointers.tolist() == [1, 0]  # a whole pass: back where it started
    assert capped.take([0], 2).tolist() == [[6, 7]] and capped.pointers.tolist() == [0, 0]
    wrapped = QueryCursor(partitions, np.array([1, 0]), wrap=True)
    assert wrapped.take([0], 7).tolist() == [[6, 7, 5, 6, 7, 5, 6]] and wrapped.pointers.tolist() == [2, 0]
    assert QueryCursor.pointers_at(partitions, 4, 2).tolist() == [2, 2]  # 4 rounds × 2 queries, modulo 3


def test_interacting_methods_take_the_budget_by_name_and_refuse_others():
    from unlearnbench.core.components import build

    method = build({"_target_": "unlearnbench.tasks.ranking.methods.fed_finetune.FedFinetune", "name": "fed_finetune",
                    "query_budget": "wrapped"}, "method")
    assert method.wrap
    with pytest.raises(UserError, match=r"method.query_budget='twice' is not valid; valid: one of capped, wrapped"):
        build({"_target_": "unlearnbench.tasks.ranking.methods.fed_finetune.FedFinetune", "name": "fed_finetune",
               "query_budget": "twice"}, "method")
    with pytest.raises(UserError, match=r"scenario.rounds=0 is not valid"):
        ModelPoisoning(rounds=0)
