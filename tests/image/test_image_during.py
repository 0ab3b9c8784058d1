"""Evaluation during unlearning on images (`evaluation.during`, runtime/during.py): every method's final records are
those of the same job without it, bit for bit, and its points sit at step 0, every N and the end."""

from __future__ import annotations

import math

import pytest
from helpers import TINY, image_methods, run_in_process

from unlearnbench.core.result import check_record
from unlearnbench.runtime.errors import UserError

pytestmark = pytest.mark.slow  # every method's whole job, twice: make test runs them

# a quarter of digits for training: every method's epochs 4× shorter
QUARTER = [*TINY, "dataset.test_fraction=0.75", "scenario=random_sample", "scenario.targets=[0.05]"]
COSTS = {"time_s", "memory_gib", "utilisation_pct", "during_time_s"}  # measured, not computed: they differ by run


def final(records: list[dict]) -> dict:
    return {(r["method"], r["role"], r["metric"], r["split"]): r["value"] for r in records
            if "step" not in r and r["metric"] not in COSTS}


@pytest.fixture(scope="module")
def methods() -> list[str]:
    return image_methods("random_sample")


@pytest.fixture(scope="module")
def plain(tmp_path_factory, shared_cache, methods):
    outcome = run_in_process(QUARTER, tmp_path_factory.mktemp("plain"), methods, shared_cache)
    assert outcome.error is None, outcome.trace
    return outcome


@pytest.fixture(scope="module")
def watched(tmp_path_factory, shared_cache, methods):
    """The same job, each method evaluated every 2 steps on at most 40 examples of each split."""
    outcome = run_in_process([*QUARTER, "evaluation.during.every=2", "evaluation.during.max_examples=40",
                              "evaluation.during.metrics=[acc,delta_acc,js_divergence]"],
                             tmp_path_factory.mktemp("watched"), methods, shared_cache)
    assert outcome.error is None, outcome.trace
    return outcome


def test_every_method_runs_in_the_random_sample_scenario(plain, methods):
    assert {r["method"] for r in plain.records if r["role"] == "unlearned"} == set(methods)
    accuracies = {(r["method"], r["split"]): r["value"] for r in plain.records
                  if r["role"] == "unlearned" and r["metric"] == "acc"}
    for method in methods:  # (this job stands for the random-sample runs test_methods_{more,ssd,teachers} had)
        for split in ("forget_train", "retain_train", "forget_test", "retain_test"):
            assert 0 <= accuracies[method, split] <= 1, (method, split)
    assert not any("step" in r for r in plain.records)


def test_the_final_records_do_not_move_for_any_method(plain, watched, methods):
    before, after = final(plain.records), final(watched.records)
    assert before.keys() == after.keys()
    moved = sorted({key[0] for key in before if before[key] != after[key]
                    and not (before[key] is None and after[key] is None)})
    assert moved == [], f"final records moved for {moved}"
    assert {r["method"] for r in watched.records if "step" in r} == set(methods)


def test_points_at_step_0_every_2_steps_and_the_end(watched, methods):
    points: dict[str, dict[int, dict]] = {}
    for record in watched.records:
        if "step" in record:
            check_record(record, "record")
            points.setdefault(record["method"], {}).setdefault(record["step"], {})[
                record["metric"], record["split"]] = record["value"]
    for method in methods:
        steps = sorted(points[method])
        assert steps[0] == 0 and steps[1:-1] == list(range(2, 2 * len(steps) - 2, 2)), (method, steps)
        assert {metric for metric, _ in points[method][0]} == {"acc", "delta_acc", "js_divergence"}
        # step 0 is M_o, the same for every method; the last point is M_u on the same examples
        assert points[method][0] == points[methods[0]][0]
        for value in points[method][steps[-1]].values():
            assert value is None or math.isfinite(value)
    assert sorted(points["ssd"]) == [0, 1]  # no step loop: one update
    accuracy_o = points["finetune"][0]["acc", "retain_test"]
    assert 0 < accuracy_o <= 1
    spent = {r["method"]: r["value"] for r in watched.records if r["metric"] == "during_time_s"}
    assert set(spent) == set(methods) and all(value > 0 for value in spent.values())


def test_epochs_counted_where_the_loop_announces_them(watched):
    epochs = {r["step"]: r["epoch"] for r in watched.records if r.get("method") == "finetune" and "step" in r}
    assert epochs[0] == 0
    counted = [epochs[step] for step in sorted(epochs)]
    assert counted == sorted(counted) and counted[-1] == 5  # finetune's 5 epochs


def test_an_unknown_metric_is_refused_in_one_line(tmp_path, shared_cache):
    outcome = run_in_process([*QUARTER, "evaluation.during.every=1", "evaluation.during.metrics=[mia]"],
                             tmp_path, ["finetune"], shared_cache)
    assert outcome.error is not None and "\n" not in outcome.error
    assert "the 'metrics' option of evaluation.during must be null or a list of acc" in outcome.error
    assert "got ['mia'] instead" in outcome.error


def test_the_schedule_is_read_as_documented():
    from unlearnbench.runtime.during import Schedule

    assert Schedule.parse(None) is None
    assert Schedule.parse(5) == Schedule(5, "step")
    assert Schedule.parse("3 steps") == Schedule(3, "step")
    assert Schedule.parse("1epoch") == Schedule(1, "epoch")
    assert Schedule.parse("2 epochs") == Schedule(2, "epoch")
    for bad in (0, "-1", "every epoch", True, 1.5):
        with pytest.raises(UserError, match=r"the .every. option of evaluation\.during must be null"):
            Schedule.parse(bad)
