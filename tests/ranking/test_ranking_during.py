"""Evaluation during unlearning in federated learning to rank (`evaluation.during`, runtime/during.py): one round is
one step; every method's final records are those of the same job without it, value for value; its points sit at step
0 (M_o), every N rounds and the end, and score the weights of that round."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import run_config, run_in_process, with_paths
from tiny import stub_federation

from unlearnbench.core.result import check_record
from unlearnbench.runtime.during import Schedule, Watch, watching
from unlearnbench.tasks.ranking.bench import RankingEvaluation, sampled_ndcg
from unlearnbench.tasks.ranking.data import SyntheticLetor
from unlearnbench.tasks.ranking.federation import Rounds
from unlearnbench.tasks.ranking.methods.fed_finetune import FedFinetune
from unlearnbench.tasks.ranking.methods.fed_gradient_ascent import FedGradientAscent
from unlearnbench.tasks.ranking.methods.fed_original import FedOriginal
from unlearnbench.tasks.ranking.methods.fed_retrain import FedRetrain
from unlearnbench.tasks.ranking.methods.federaser import FedEraser
from unlearnbench.tasks.ranking.methods.fedremove import FedRemove
from unlearnbench.tasks.ranking.pdgd import Ndcg

FAST = ["experiment=foltr", "scenario.rounds=40", "scenario.unlearning_rounds=30", "dataset.train_queries=120",
        "dataset.test_queries=40"]
TRAINING_ROUNDS, UNLEARNING_ROUNDS = 40, 30
METHODS = ["fed_original", "fed_finetune", "fed_gradient_ascent", "fed_retrain", "federaser", "fedremove"]
COSTS = {"time_s", "memory_gib", "utilisation_pct", "during_time_s"}  # measured, not computed: they differ by run
VARIANTS = ["fed_gradient_ascent", "federaser"]  # the methods with a paper variant beside the reference's
# each setting: its methods, their options and the watched job's overrides. The first scores every 7 rounds both
# metrics on every test query (40 ≤ 256); the second the paper variants every 10 rounds (30 a multiple: the end is a
# step already scored), the default metrics on 15 sampled test queries
SETTINGS = {
    "reference": (METHODS, [], ["evaluation.during.every=7", "evaluation.during.metrics=[ndcg@10,weight_distance]"]),
    "paper": (VARIANTS, ["method.variant=paper"], ["evaluation.during.every=10 steps",
                                                   "evaluation.during.max_examples=15"]),
}


def run(overrides: list[str], folder: Path, methods: list[str], options: list[str], cache: Path, data: Path):
    """The job in-process (`run_in_process`), its synthetic LETOR files read from `data`: written by the first job
    there, read by the others (writing them was a third of a job here)."""
    cfg = with_paths(overrides, folder, cache)
    cfg.paths.data_dir = str(data)
    outcome = run_config(cfg, folder, dict.fromkeys(methods, options))
    assert outcome.error is None and outcome.failures == [], (outcome.error, outcome.failures)
    return outcome


@pytest.fixture(scope="module")
def letor_folder(tmp_path_factory) -> Path:
    """The module's data folder: its jobs read the same synthetic LETOR files."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, shared_cache, letor_folder) -> dict[str, tuple]:
    """Per setting, one job of every method without points and the same job with them."""
    made = {}
    for setting, (methods, options, watched) in SETTINGS.items():
        plain = run(FAST, tmp_path_factory.mktemp(f"plain_{setting}"), methods, options, shared_cache, letor_folder)
        made[setting] = plain, run([*FAST, *watched], tmp_path_factory.mktemp(f"watched_{setting}"), methods,
                                   options, shared_cache, letor_folder)
    return made


def final(records: list[dict]) -> dict:
    return {(r["method"], r["role"], r["metric"], r["split"], r.get("round")): r["value"] for r in records
            if "step" not in r and r["metric"] not in COSTS}


def points(records: list[dict]) -> dict[str, dict[int, dict[str, float | None]]]:
    """method → step → metric → value of the records with a step."""
    found: dict[str, dict[int, dict]] = {}
    for record in records:
        if "step" in record:
            check_record(record, "record")
            assert record["split"] is None and record["role"] == "unlearned"
            found.setdefault(record["method"], {}).setdefault(record["step"], {})[record["metric"]] = record["value"]
    return found


@pytest.mark.parametrize("setting", SETTINGS)
def test_the_final_records_do_not_move_for_any_method(jobs, setting):
    plain, watched = jobs[setting]
    methods = SETTINGS[setting][0]
    before, after = final(plain.records), final(watched.records)
    assert before.keys() == after.keys() and {key[0] for key in before} == {None, *methods}
    moved = sorted({key[0] for key in before if before[key] != after[key]})
    assert moved == [], f"final records moved for {moved}"
    assert not any("step" in r for r in plain.records)
    spent = {r["method"]: r["value"] for r in watched.records if r["metric"] == "during_time_s"}
    assert set(spent) == set(methods) and all(value > 0 for value in spent.values())


@pytest.mark.parametrize(("setting", "steps", "metrics"), [
    ("reference", [0, 7, 14, 21, 28, 30], {"ndcg@10", "weight_distance"}),
    ("paper", [0, 10, 20, 30], {"ndcg@10"}),  # null metrics: the leaderboard's
])
def test_points_at_step_0_every_n_rounds_and_the_end(jobs, setting, steps, metrics):
    _, watched = jobs[setting]
    found, methods = points(watched.records), SETTINGS[setting][0]
    assert set(found) == set(methods)
    for method in methods:
        assert sorted(found[method]) == steps, method
        assert all(set(found[method][step]) == metrics for step in steps), method
        assert found[method][0] == found[methods[0]][0]  # M_o, the same for every method
    epochs = {r["step"]: r["epoch"] for r in watched.records if "step" in r}
    assert epochs == dict.fromkeys(steps)  # the methods count no epochs: null at every point


def test_a_point_on_every_test_query_is_that_rounds_record(jobs):
    """With every test query scored, step i's NDCG@10 is round T + i's record (step 0: M_o's last round), and the
    last step's distance to the trained weights is the final one."""
    _, watched = jobs["reference"]
    found = points(watched.records)
    final_records = [r for r in watched.records if "step" not in r]
    curve = {(r["method"], r["round"]): r["value"] for r in final_records if "round" in r}
    distance = {r["method"]: r["value"] for r in final_records if r["metric"] == "weight_distance"}
    for method in METHODS:
        assert found[method][0] == {"ndcg@10": curve[None, TRAINING_ROUNDS], "weight_distance": 0.0}
        for step in (7, 14, 21, 28, 30):
            assert found[method][step]["ndcg@10"] == curve[method, TRAINING_ROUNDS + step], (method, step)
        assert found[method][UNLEARNING_ROUNDS]["weight_distance"] == distance[method] > 0


def test_points_on_sampled_queries_are_ndcg_values_of_the_same_queries_throughout(jobs):
    """15 of the test queries: M_o's value is not the full set's, and it is the same for both methods."""
    _, watched = jobs["paper"]
    found = points(watched.records)
    full = next(r["value"] for r in watched.records if r.get("round") == TRAINING_ROUNDS and r["method"] is None)
    assert found[VARIANTS[0]][0] == found[VARIANTS[1]][0] and found[VARIANTS[0]][0]["ndcg@10"] != full
    assert all(0 <= point["ndcg@10"] <= 1 for method in VARIANTS for point in found[method].values())


def test_sampled_queries_are_fixed_by_the_evaluation_seed(tmp_path):
    queries = SyntheticLetor(name="synthetic_letor", root=str(tmp_path), train_queries=20, test_queries=60).load().test
    whole = Ndcg(queries.features, queries.labels)
    weights = np.random.default_rng(0).normal(size=queries.features.shape[2])
    assert sampled_ndcg(queries, whole, 0, "0,1,2", whole.count) is whole  # all of them fit: the final scorer
    sample = sampled_ndcg(queries, whole, 0, "0,1,2", 10)
    assert sample.count == 10 and sample(weights) == sampled_ndcg(queries, whole, 0, "0,1,2", 10)(weights)
    others = {sampled_ndcg(queries, whole, seed, "0,1,2", 10)(weights) for seed in range(1, 6)}
    assert len(others | {sample(weights)}) > 1  # another evaluation seed, other queries


def test_a_watched_job_draws_from_no_global_generator(tmp_path, shared_cache, letor_folder):
    """A point every round, on sampled queries: numpy's and torch's global generators stand where they stood."""
    numpy_state, torch_state = np.random.get_state(), torch.get_rng_state()
    try:
        np.random.seed(11), torch.manual_seed(11)
        expected = np.random.random(), torch.rand(1)
        np.random.seed(11), torch.manual_seed(11)
        outcome = run([*FAST, "evaluation.during.every=1", "evaluation.during.max_examples=5"], tmp_path,
                      ["fed_finetune"], [], shared_cache, letor_folder)
        assert len(points(outcome.records)["fed_finetune"]) == UNLEARNING_ROUNDS + 1
        assert (np.random.random(), torch.rand(1)) == expected
    finally:
        np.random.set_state(numpy_state), torch.set_rng_state(torch_state)


def test_a_point_of_non_finite_weights_is_null_and_m_o_is_the_trained_weights(tmp_path):
    """As the final evaluation scores a diverged method: null, never a number of a broken model."""
    data = SyntheticLetor(name="synthetic_letor", root=str(tmp_path), train_queries=20, test_queries=30).load()
    trained, _ = stub_federation()
    trained.globals = np.random.default_rng(1).normal(size=(3, data.features))
    ndcg = Ndcg(data.test.features, data.test.labels)
    bench = SimpleNamespace(data=data, ndcg=ndcg, seeds={"eval": 0}, during={"max_examples": 256},
                            point_metrics=["ndcg@10", "weight_distance"])
    evaluation = RankingEvaluation(bench, "0", trained)
    assert evaluation.during("m", None) == {("ndcg@10", None): ndcg(trained.final), ("weight_distance", None): 0.0}
    broken = trained.final.copy()
    broken[0] = np.nan
    assert evaluation.during("m", Rounds([trained.final, broken], [0.1, 0.2])) == {
        ("ndcg@10", None): None, ("weight_distance", None): None}
    assert evaluation.during("m", Rounds())[("weight_distance", None)] == 0.0  # no round: the trained weights


@pytest.mark.parametrize("method", [
    FedOriginal("fed_original"), FedFinetune("fed_finetune"), FedRetrain("fed_retrain"), FedRemove("fedremove"),
    FedEraser("federaser"), FedEraser("federaser", variant="paper"), FedGradientAscent("fed_gradient_ascent"),
    FedGradientAscent("fed_gradient_ascent", variant="paper")], ids=lambda m: f"{m.name}-{getattr(m, 'variant', '')}")
def test_every_round_is_announced_as_one_step(method):
    """Each method's round i is step i, with the weights it keeps for that round."""
    trained, task = stub_federation()
    seen: list[tuple[int, np.ndarray]] = []
    watch = Watch(Schedule(1), lambda weights, step, epoch: seen.append((step, weights.copy())))
    with watching(watch):
        rounds = method.unlearn(trained, task)
    assert [step for step, _ in seen] == list(range(1, task.rounds + 1)) == list(range(1, len(rounds.globals) + 1))
    np.testing.assert_array_equal(np.array([weights for _, weights in seen]), np.array(rounds.globals))


@pytest.mark.parametrize(("override", "message"), [
    ("evaluation.during.metrics=[online_ndcg]", "the 'metrics' option of evaluation.during must be null or a list of "
                                                "ndcg@10, weight_distance"),
    ("evaluation.during.every=1epoch", "the 'every' option of evaluation.during must be null, or N >= 1"),
])
def test_a_bad_point_option_is_refused_in_one_line_before_training(tmp_path, override, message):
    outcome = run_in_process([*FAST, "evaluation.during.every=5", override], tmp_path, ["fedremove"],
                             tmp_path / "cache")
    assert outcome.error is not None and "\n" not in outcome.error and message in outcome.error
    assert outcome.records == [] and not (tmp_path / "cache").exists()
