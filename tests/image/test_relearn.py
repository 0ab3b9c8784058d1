"""Relearn time (`evaluation.relearn`): the loop's definition on scripted losses, the relearn set's draw, a real
digits job's records (M_o, M_r, each method), M_o relearning at once, identical numbers for identical seeds, one
method's failure kept to itself, and bad options refused with one line. Nothing here asserts how fast one trained
model relearns compared with another: that hangs on the models' luck."""

from __future__ import annotations

import pytest
import torch
from helpers import RELEARN_METRICS as METRICS
from helpers import TINY, assert_relearn_records, compose_config, relearnt, run_in_process

from unlearnbench.core.catalogue import CORE
from unlearnbench.core.config import validate
from unlearnbench.core.relearn import Measurement, Relearning, relearn
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.metrics.relearn import relearn_subset

METHODS = ["finetune", "retrain"]
# finetune's 5 epochs over D_r were most of each job here; its relearn records are what is read, never how well it
# fine-tuned: one epoch gives them as well
ONE_EPOCH = {"finetune": ["method.epochs=1"]}
RELEARN = ["evaluation.relearn.enabled=true", "evaluation.relearn.max_steps=10", "evaluation.relearn.k=2"]


class Scripted:
    """A learner whose loss after each step is given in advance (accuracy: 1 − loss)."""

    def __init__(self, losses: list[float]) -> None:
        self.losses, self.steps, self.measured = losses, 0, 0

    def step(self) -> None:
        self.steps += 1

    def measure(self) -> Measurement:
        self.measured += 1
        loss = self.losses[min(self.steps, len(self.losses) - 1)]
        return Measurement(loss, 1 - loss)


@pytest.mark.parametrize(("losses", "max_steps", "k", "steps", "accuracy", "capped", "taken"), [
    ([0.5, 0.3, 0.2, 0.1], 10, 0, 2, 0.5, False, 2),  # at the threshold (0.2) counts; stops once there
    ([0.5, 0.3, 0.2, 0.1], 10, 3, 2, 0.9, False, 3),  # goes on to k for the accuracy
    ([0.5, 0.4, 0.3], 2, 1, 2, 0.6, True, 2),  # never there: the cap, marked capped
    ([0.2, 0.9], 5, 0, 0, 0.8, False, 0),  # already there: 0 steps, no step taken
])
def test_the_loop_counts_steps_to_the_threshold_and_reads_the_accuracy_after_k(losses, max_steps, k, steps,
                                                                               accuracy, capped, taken):
    learner = Scripted(losses)
    run = relearn(learner, 0.2, max_steps, k)
    assert (run.steps, run.capped, learner.steps) == (steps, capped, taken)
    assert run.accuracy == pytest.approx(accuracy)
    assert run.scores("forget_train") == {("relearn_steps", "forget_train"): steps,
                                          ("relearn_acc", "forget_train"): run.accuracy}


def test_a_diverging_relearn_records_nulls():
    run = relearn(Scripted([0.5, float("nan")]), 0.2, 10, 3)
    assert (run.steps, run.accuracy) == (None, None) and run.describe(3) == "diverged"


def test_the_original_sets_the_threshold_and_relearns_at_once():
    """The constructed case: M_o's loss before any step is the threshold; a second copy of it (its own
    measurement) is there at once too, a worse model is not."""

    class Constant(Relearning):
        def learner(self, model):
            return Scripted(model)

    relearning = Constant(settings(max_steps=4, k=1), 0, "3")
    with pytest.raises(AssertionError, match="it comes first"):
        relearning.run([0.1])
    original = relearning.original([0.1, 0.05])
    assert (original.steps, relearning.threshold) == (0, 0.1)
    assert relearning.run([0.1, 0.05]).steps == 0
    assert relearning.run([0.7, 0.4, 0.1]).steps == 2


def settings(**changes):
    from unlearnbench.core.relearn import RelearnSettings

    values = {"examples": None, "max_steps": 25, "k": 5, "lr": None, "batch_size": 32} | changes
    return RelearnSettings.of(values, train_lr=0.05)


def test_the_learning_rate_defaults_to_the_recipes():
    assert settings().lr == 0.05 and settings(lr=0.3).lr == 0.3


def test_the_relearn_set_is_all_of_d_f_or_a_seeded_draw_of_it(digits_forget):
    assert relearn_subset(digits_forget, None, torch.Generator().manual_seed(0)) is digits_forget
    assert relearn_subset(digits_forget, 10**6, torch.Generator().manual_seed(0)) is digits_forget
    draws = [relearn_subset(digits_forget, 20, torch.Generator().manual_seed(seed)).indices for seed in (0, 0, 1)]
    assert len(draws[0]) == 20 and torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert set(draws[0].tolist()) <= set(digits_forget.indices.tolist())
    assert torch.equal(draws[0], torch.sort(draws[0]).values)
    with pytest.raises(UserError, match="at least 2 forget examples"):
        relearn_subset(digits_forget.with_indices(digits_forget.indices[:1]), None, torch.Generator())


@pytest.fixture(scope="module")
def digits_forget() -> Subset:
    from omegaconf import OmegaConf

    from unlearnbench.core.components import build

    data = build(OmegaConf.to_container(compose_config([]).dataset, resolve=True), "dataset").load()
    indices = torch.nonzero(data.train_labels == 3).flatten()
    return Subset(data, "train", indices)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, shared_cache):
    """The same digits job with relearning twice (its models from the suite's cache, the methods run afresh each
    time, finetune for one epoch), and once more with the relearn set a draw of 20 examples of D_f."""
    runs = [run_in_process([*TINY, *RELEARN], tmp_path_factory.mktemp(name), METHODS, shared_cache, ONE_EPOCH)
            for name in ("a", "b")]
    drawn = run_in_process([*TINY, *RELEARN, "evaluation.relearn.examples=20"], tmp_path_factory.mktemp("c"),
                           ["retrain"], shared_cache)
    return runs, drawn


def test_a_job_records_relearn_time_for_every_model(jobs):
    assert_relearn_records(jobs[0][0], METHODS, "forget_train", max_steps=10)
    assert {key[0] for key in relearnt(jobs[0][0])} == {"3"}


def test_the_original_relearns_at_once_and_retrain_exactly_as_the_retrained_model(jobs):
    records = relearnt(jobs[0][0])
    assert records["3", "original", None, "relearn_steps", "forget_train"] == 0
    for metric in METRICS:  # `retrain` returns M_r: the same copy, the same batches, the same numbers
        assert (records["3", "unlearned", "retrain", metric, "forget_train"]
                == records["3", "retrained", None, metric, "forget_train"])


def test_the_same_seeds_give_identical_numbers(jobs):
    (first, second), _ = jobs
    assert relearnt(first) == relearnt(second)


def test_a_drawn_relearn_set_is_recorded_like_the_whole_one(jobs):
    _, drawn = jobs
    records = relearnt(drawn)
    assert drawn.error is None and not drawn.failures, drawn.trace
    assert records["3", "original", None, "relearn_steps", "forget_train"] == 0
    assert len(records) == 6


def test_off_by_default_and_then_no_record_and_no_stage(tmp_path, shared_cache):
    assert compose_config([]).evaluation.relearn.enabled is False
    outcome = run_in_process(list(TINY), tmp_path, ["retrain"], shared_cache)
    assert not relearnt(outcome) and not any(t.startswith("relearn:") for t in outcome.timings)


def test_one_methods_failure_in_relearning_leaves_the_others(tmp_path, shared_cache, monkeypatch):
    calls = []
    run = Relearning.run

    def failing_second(self, model):  # calls: M_r, then finetune (fails), then retrain
        calls.append(model)
        if len(calls) == 2:
            raise RuntimeError("relearning broke")
        return run(self, model)

    monkeypatch.setattr(Relearning, "run", failing_second)
    outcome = run_in_process([*TINY, *RELEARN], tmp_path, METHODS, shared_cache, ONE_EPOCH)
    assert [(f["method"], f["error"]) for f in outcome.failures] == [("finetune", "RuntimeError: relearning broke")]
    records = relearnt(outcome)
    assert ("3", "unlearned", "retrain", "relearn_steps", "forget_train") in records
    assert ("3", "unlearned", "finetune", "relearn_steps", "forget_train") not in records
    assert outcome.status == ("complete", None)


@pytest.mark.parametrize(("override", "message"), [
    ("evaluation.relearn.examples=1", "evaluation.relearn.examples=1 is not valid; valid: >= 2"),
    ("evaluation.relearn.max_steps=0", "evaluation.relearn.max_steps=0 is not valid; valid: >= 1"),
    ("evaluation.relearn.k=-1", "evaluation.relearn.k=-1 is not valid; valid: >= 0"),
    ("evaluation.relearn.lr=0", "evaluation.relearn.lr=0.0 is not valid; valid: > 0"),
    ("evaluation.relearn.batch_size=1", "evaluation.relearn.batch_size=1 is not valid; valid: >= 2"),
    ("evaluation.relearn.k=30", "evaluation.relearn.k=30 is not valid; valid: <= evaluation.relearn.max_steps=25"),
])
def test_bad_values_fail_with_one_line_before_any_work(override, message):
    with pytest.raises(UserError) as error:
        validate(compose_config([override]))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_report_marks_the_value_closest_to_the_retrained_models_best():
    assert CORE.ideal("relearn_steps") == CORE.ideal("relearn_acc") == "retrained"


def test_the_report_reads_the_relearn_records_like_any_other(jobs, tmp_path):
    import json

    import pandas as pd

    from unlearnbench.core.result import result_document
    from unlearnbench.report.build import build_report

    outcome = jobs[0][0]
    folder = tmp_path / "sweep" / "job"
    folder.mkdir(parents=True)
    document = result_document(compose_config([*TINY, *RELEARN]), outcome, None)
    (folder / "result.json").write_text(json.dumps(document))
    build_report([tmp_path / "sweep"], tmp_path / "report", figures=False)
    summary = pd.read_csv(tmp_path / "report" / "summary.csv")
    steps = summary[summary["metric"] == "relearn_steps"].fillna({"method": ""})
    assert set(zip(steps["role"], steps["method"], strict=True)) == {
        ("original", ""), ("retrained", ""), *(("unlearned", m) for m in METHODS)}
    assert (steps["split"] == "forget_train").all()
