"""The ranking task's unlearning methods, each variant against a re-implementation on a simulator one can follow by
hand, and a method that diverges in a whole job."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import results, run_cli
from tiny import CLIENTS, FEATURES, PARTITION, QUERIES, stub_federation

from unlearnbench.tasks.ranking.federation import (
    Rounds,
    TrainedFederation,
    client_streams,
    initial_weights,
)
from unlearnbench.tasks.ranking.methods.base import FederatedMethod, FederatedTask
from unlearnbench.tasks.ranking.methods.fed_gradient_ascent import FedGradientAscent
from unlearnbench.tasks.ranking.methods.fed_retrain import FedRetrain
from unlearnbench.tasks.ranking.methods.federaser import FedEraser

TESTS = Path(__file__).resolve().parent  # this module, importable by the job as test_ltr_methods
@pytest.fixture
def setting():
    return stub_federation()


def moved(start: np.ndarray, steps: np.ndarray, queries, factor: float = 1.0) -> np.ndarray:
    return start + factor * steps[list(queries)].sum(0)


def test_federaser_reference_variant(setting):
    """Ũ^1 = mean W_k^0; then FedAvg of the retained clients from their continuing pointers, capped at one pass
    (5 > 4 queries), the mean step rescaled to the stored mean update's length every 5th round."""
    trained, task = setting
    rounds = FedEraser("federaser", interactions_per_round=5).unlearn(trained, task)
    steps, retained, pointers = task.simulator.steps, [1, 2, 3], trained.pointers.copy()
    model = trained.locals[0, retained].mean(0)
    expected = [model]
    for t in range(1, 9):
        taken = {k: [trained.partitions[k, (pointers[k] + i) % PARTITION] for i in range(PARTITION)] for k in retained}
        new = np.mean([moved(model, steps, taken[k]) for k in retained], axis=0)
        if t % 5 == 0:
            stored = np.linalg.norm(trained.locals[t, retained].mean(0) - trained.globals[t])
            new = model + stored * (new - model) / np.linalg.norm(new - model)
        model = new
        expected.append(model)
    np.testing.assert_allclose(np.array(rounds.globals), np.array(expected), rtol=1e-12)
    assert np.isnan(rounds.online[0]) and len(rounds.online) == 9


def test_federaser_paper_variant(setting):
    """Retained rounds t_j = 0, 2, 4, …; from M̃^1 = G^0 + mean U_k^0 each retained client trains ⌈0.5 · 3⌉ = 2 of
    the queries it took in round t_j, and its new update is rescaled to its own stored update's length; after the 6
    retained rounds the model is held."""
    trained, task = setting
    rounds = FedEraser("federaser", variant="paper").unlearn(trained, task)
    steps, retained = task.simulator.steps, [1, 2, 3]
    updates = trained.locals - trained.globals[:-1, None]
    model = trained.globals[0] + updates[0, retained].mean(0)
    expected = [model]
    for t in (2, 4, 6, 8, 10):
        first = t * 3 % PARTITION  # where round t's queries began: 3 per round, modulo the partition
        calibrated = []
        for k in retained:
            new = steps[[trained.partitions[k, (first + i) % PARTITION] for i in range(2)]].sum(0)
            calibrated.append(np.linalg.norm(updates[t, k]) * new / np.linalg.norm(new))
        model = model + np.mean(calibrated, axis=0)
        expected.append(model)
    expected += [model] * (9 - len(expected))
    np.testing.assert_allclose(np.array(rounds.globals), np.array(expected), rtol=1e-12)
    assert np.isnan(rounds.online[0]) and np.isnan(rounds.online[6:]).all() and np.isfinite(rounds.online[1:6]).all()


def test_gradient_ascent_reference_variant(setting):
    """Every round: the retained clients step on their partitions, the malicious one ascends on queries drawn from
    its stream; FedAvg over all four."""
    trained, task = setting
    rounds = FedGradientAscent("fed_gradient_ascent", interactions_per_round=3).unlearn(trained, task)
    steps, retained, pointers = task.simulator.steps, [1, 2, 3], trained.pointers.copy()
    streams = client_streams(CLIENTS, 0xF2, 4, 5)
    model, expected = trained.final, []
    for _ in range(9):
        local = []
        for k in retained:
            local.append(moved(model, steps, [trained.partitions[k, (pointers[k] + i) % PARTITION] for i in range(3)]))
            pointers[k] = (pointers[k] + 3) % PARTITION
        local.append(moved(model, steps, streams[0].integers(0, QUERIES, 3), factor=-1.0))
        model = np.mean(local, axis=0)
        expected.append(model)
    np.testing.assert_allclose(np.array(rounds.globals), np.array(expected), rtol=1e-12)


def test_gradient_ascent_paper_variant(setting):
    """From w_ref = mean of the retained clients' last local models, the malicious client makes 2 passes over its
    partition, each step projected onto B(w_ref, δ), δ² = mean squared distance to 10 fresh models / 3; then the
    retained clients fine-tune from its model."""
    trained, task = setting
    steps, retained, pointers = 10 * task.simulator.steps, [1, 2, 3], trained.pointers.copy()
    task.simulator.steps = steps  # large steps, so that the ball binds
    rounds = FedGradientAscent("fed_gradient_ascent", variant="paper", ascent_rounds=2,
                               interactions_per_round=3).unlearn(trained, task)
    reference = trained.locals[-1, retained].mean(0)
    rng = np.random.default_rng(np.random.SeedSequence([0xF3, 1, 4, 5]))
    radius = np.sqrt(np.mean([np.sum((reference - initial_weights(FEATURES, rng)) ** 2) for _ in range(10)]) / 3)
    model, expected = reference, []
    for _ in range(2):
        for i in range(PARTITION):
            model = model - steps[trained.partitions[0, (pointers[0] + i) % PARTITION]]
            offset = model - reference
            model = reference + offset * min(1.0, radius / np.linalg.norm(offset))
        expected.append(model)
    for _ in range(7):
        local = []
        for k in retained:
            local.append(moved(model, steps, [trained.partitions[k, (pointers[k] + i) % PARTITION] for i in range(3)]))
            pointers[k] = (pointers[k] + 3) % PARTITION
        model = np.mean(local, axis=0)
        expected.append(model)
    np.testing.assert_allclose(np.array(rounds.globals), np.array(expected), rtol=1e-12)
    assert np.linalg.norm(expected[1] - reference) == pytest.approx(radius)  # the projection was active


def test_retraining_starts_from_the_references_w0_and_continues_the_pointers(setting):
    trained, task = setting
    rounds = FedRetrain("fed_retrain", interactions_per_round=1).unlearn(trained, task)
    w0 = 0.01 * np.random.default_rng(np.random.SeedSequence([0xF3, 0, 4, 5])).standard_normal(FEATURES)
    first = [trained.partitions[k, trained.pointers[k]] for k in (1, 2, 3)]
    np.testing.assert_allclose(rounds.globals[0], np.mean([w0 + task.simulator.steps[q] for q in first], axis=0))


def test_variants_are_named_options():
    from unlearnbench.core.components import build
    from unlearnbench.runtime.errors import UserError

    with pytest.raises(UserError, match=r"method.variant='original' is not valid; valid: one of reference, paper"):
        build({"_target_": "unlearnbench.tasks.ranking.methods.federaser.FedEraser", "name": "federaser",
               "variant": "original"}, "method")
    assert math.ceil(FedEraser("f", variant="paper").calibration_ratio * 5) == 3


# ------------------------------------------------------------------ a diverging method in a whole job


class ExplodingRanker(FederatedMethod):
    """Test-only method: the trained model for 9 rounds, then NaN weights (a method whose update blew up)."""

    def unlearn(self, trained: TrainedFederation, task: FederatedTask) -> Rounds:
        nan = np.full_like(trained.final, np.nan)
        return Rounds([trained.final] * 9 + [nan] * (task.rounds - 9), [0.5] * task.rounds)


@pytest.mark.processes
def test_a_diverging_method_is_a_failure_with_null_metrics_and_the_others_are_scored(tmp_path):
    conf = tmp_path / "user_conf" / "method"
    conf.mkdir(parents=True)
    (conf / "exploding_ranker.yaml").write_text("_target_: test_ltr_methods.ExplodingRanker\nname: exploding_ranker\n")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), before or ""])  # and helpers.py
    try:
        run = run_cli([f"--config-dir={tmp_path / 'user_conf'}", "experiment=foltr", "scenario.rounds=40",
                       "scenario.unlearning_rounds=30", "dataset.train_queries=120", "dataset.test_queries=40",
                       "methods=[exploding_ranker,fedremove]"], tmp_path)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    assert run.returncode == 1 and "Traceback" not in run.stderr  # a failed method fails the sweep, in one line
    assert "method exploding_ranker: exploding_ranker diverged" in run.stderr
    ((_, result),) = results(tmp_path / "sweep").items()
    assert result["status"] == "complete"
    assert result["failures"] == [{"target": "0,1,2", "method": "exploding_ranker",
                                   "error": "exploding_ranker diverged: its weights are not finite from round 50 on "
                                            "(unlearning round 10); its metrics are null"}]
    exploding = {(r["metric"], r.get("round")): r["value"] for r in result["records"]
                 if r["method"] == "exploding_ranker"}
    assert all(exploding[("ndcg@10", t)] is not None for t in range(41, 50))  # finite rounds keep their scores
    assert all(exploding[("ndcg@10", t)] is None for t in range(50, 71))
    assert exploding[("online_ndcg", None)] is None and exploding[("weight_distance", None)] is None
    fedremove = [r["value"] for r in result["records"] if r["method"] == "fedremove" and r["metric"] == "ndcg@10"]
    assert len(fedremove) == 30 and all(isinstance(v, float) for v in fedremove)
