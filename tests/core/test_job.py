"""What one job computes, run in-process on one CPU: reproducibility, the retrain baseline, the cache, precisions."""

from __future__ import annotations

import math

import pytest
from helpers import TINY, run_config, run_in_process
from omegaconf import OmegaConf

COST = {"time_s", "memory_gib", "utilisation_pct"}
SPLITS = {"forget_train", "retain_train", "forget_test", "retain_test"}


def scientific(records: list[dict]) -> list[dict]:
    return [r for r in records if r["metric"] not in COST]


def by_key(records: list[dict]) -> dict:
    return {(r["target"], r["method"], r["role"], r["metric"], r["split"]): r["value"] for r in records}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cfg_tiny_global) -> dict:
    """The same job (finetune, retrain, and SSD, which also caches an importance per M_o) cold on an empty cache
    ("cold"), cold on another ("own_cache"), then warm on that one's full cache ("warm"); and on that cache at 2
    threads ("two_threads", running `retrain`: at 2 threads only M_o and M_r matter). Fine-tuning for 1 epoch, not
    5: its 5 epochs on D_r cost more than training M_o, and 1 already takes D'_f's accuracy from 0.89 to 0."""
    methods = {"finetune": ["method.epochs=1"], "retrain": [], "ssd": []}
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    plan = {"cold": (a, {}, methods), "own_cache": (b, {}, methods), "warm": (b, {}, methods),
            "two_threads": (b, {"runtime": {"threads": 2}}, {"retrain": []})}
    runs = {}
    for name, (folder, options, job_methods) in plan.items():
        paths = {"paths": {"cache_dir": str(folder / "cache"), "data_dir": str(folder / "data")}}
        runs[name] = run_config(OmegaConf.merge(cfg_tiny_global, paths, options), folder, job_methods)
        assert runs[name].error is None, (name, runs[name].trace)
    return runs


def test_job_completes_with_every_record(runs):
    outcome = runs["cold"]
    records = by_key(outcome.records)
    for role, method in (("original", None), ("retrained", None), ("unlearned", "finetune"),
                         ("unlearned", "retrain")):
        for split in SPLITS:
            for metric in ("acc", "loss"):
                assert ("3", method, role, metric, split) in records
        assert ("3", method, role, "mia", "forget_train") in records
        for metric in COST:
            assert ("3", method, role, metric, None) in records
    for method, role in ((None, "original"), ("finetune", "unlearned")):
        for split in SPLITS:
            for metric in ("activation_distance", "js_divergence", "completeness", "delta_acc", "delta_loss"):
                assert ("3", method, role, metric, split) in records
        for metric, split in (("layer_distance", None), ("delta_mia", "forget_train"), ("tow", None)):
            assert ("3", method, role, metric, split) in records
    assert all(isinstance(r["value"], float) and math.isfinite(r["value"]) for r in scientific(outcome.records)
               if r["value"] is not None)


def test_same_job_twice_with_empty_caches_gives_bit_identical_records(runs):
    first, second = runs["cold"], runs["own_cache"]
    assert first.cache["original"]["key"] == second.cache["original"]["key"]
    assert not first.cache["original"]["hit"] and not second.cache["original"]["hit"]
    assert scientific(first.records) == scientific(second.records)


def test_a_warm_cache_gives_exactly_the_cold_run(runs):
    cold, warm = runs["own_cache"], runs["warm"]
    assert warm.cache["original"]["hit"] and all(r["hit"] for r in warm.cache["retrained"])
    assert warm.cache["original"]["key"] == cold.cache["original"]["key"]
    assert warm.numerics == cold.numerics
    assert scientific(warm.records) == scientific(cold.records)  # bit for bit, M_o, M_r and SSD's importances reused


def test_thread_count_is_part_of_every_cache_key(runs):
    one, two = runs["cold"], runs["two_threads"]
    assert one.numerics["threads"] == 1 and two.numerics["threads"] == 2
    assert one.cache["original"]["key"] != two.cache["original"]["key"]
    assert one.cache["retrained"][0]["key"] != two.cache["retrained"][0]["key"]
    assert not two.cache["original"]["hit"] and not two.cache["retrained"][0]["hit"]  # trained, not served


def test_retrain_baseline_matches_the_retrained_model_exactly(runs):
    records = [r for r in runs["cold"].records if r["method"] == "retrain"]
    deltas = [r for r in records if r["metric"].startswith("delta_")]
    assert len(deltas) == 9 and all(r["value"] == 0.0 for r in deltas)
    values = by_key(records)
    assert values["3", "retrain", "unlearned", "layer_distance", None] == 0.0
    for split in SPLITS:
        assert values["3", "retrain", "unlearned", "completeness", split] == 1.0
        assert values["3", "retrain", "unlearned", "js_divergence", split] == 0.0
        assert values["3", "retrain", "unlearned", "activation_distance", split] == 0.0
    # its cost is that of retraining, not of returning a model
    retrained = by_key(runs["cold"].records)["3", None, "retrained", "time_s", None]
    assert values["3", "retrain", "unlearned", "time_s", None] == retrained > 0.1


def test_finetune_moves_away_from_the_original(runs):
    records = by_key(runs["cold"].records)
    assert records["3", "finetune", "unlearned", "layer_distance", None] > 0
    assert records["3", "finetune", "unlearned", "acc", "forget_test"] < records["3", None, "original", "acc",
                                                                                  "forget_test"]


@pytest.fixture(scope="module")
def random_sample(tmp_path_factory, shared_cache) -> dict:
    """`retrain` in the random-sample scenario at unlearning seeds 0 and 1, one after the other on one cache (the
    suite's: nothing here asserts that a model was trained). On a quarter of digits, as test_image_during.py's jobs:
    their M_o and the M_r of seed 0 are these, trained once per run."""
    folder = tmp_path_factory.mktemp("random_sample")
    base = [*TINY, "dataset.test_fraction=0.75", "scenario=random_sample", "scenario.targets=[0.05]"]
    return {seed: run_in_process([*base, f"seeds.unlearn={seed}"], folder, ["retrain"], shared_cache)
            for seed in (0, 1)}


def test_random_sample_scenario_uses_the_forget_set_as_forget_test(random_sample):
    outcome = random_sample[0]
    assert outcome.error is None, outcome.trace
    records = by_key(outcome.records)
    assert records["0.05", None, "original", "acc", "forget_train"] == records["0.05", None, "original", "acc",
                                                                                "forget_test"]


def test_unlearning_seed_changes_the_forget_set_and_the_retrained_model(random_sample):
    a, b = random_sample[0], random_sample[1]
    assert a.cache["original"]["key"] == b.cache["original"]["key"] and b.cache["original"]["hit"]
    assert a.cache["retrained"][0]["key"] != b.cache["retrained"][0]["key"]


@pytest.mark.parametrize("precision", ["64-true", "bf16-mixed", "bf16-true", "16-true"])
def test_cpu_precisions_run_a_tiny_job(tmp_path, precision):
    overrides = ["model.width=4", "train.epochs=1", "runtime.threads=1", f"precision={precision}",
                 "method.epochs=1", "dataset.test_fraction=0.75"]  # a quarter of digits to train on: float16 is slow
    outcome = run_in_process(overrides, tmp_path, ["finetune"])
    assert outcome.error is None, outcome.trace
    accuracy = by_key(outcome.records)["3", "finetune", "unlearned", "acc", "retain_test"]
    assert 0.0 <= accuracy <= 1.0
