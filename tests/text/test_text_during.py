"""Evaluation during unlearning on the text task (`evaluation.during`, tasks/text/evaluate/during.py): every text
method's final records unchanged by it, the step records at step 0, every N steps and the end (with epochs where the
loop announces them), the last point on whole splits equal to the final evaluation, unknown metrics refused in one
line, and WMDP's points on a sample of its questions. The TOFU jobs run on a small set of the built-in data (`SMALL`),
their M_o and M_r trained once into the suite's shared cache; WMDP's M_o and M_r are the suite's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import run_in_process

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.benchmarks.muse import POINTS as MUSE_POINTS
from unlearnbench.tasks.text.benchmarks.tofu import POINTS as TOFU_POINTS
from unlearnbench.tasks.text.evaluate.during import sample

METHODS = ["altpo", "ceu", "grad_ascent", "grad_diff", "idk_dpo", "npo", "pdu", "rmu", "satimp", "simnpo",
           "text_finetune", "text_retrain", "undial", "wga"]
LOOPED = [m for m in METHODS if m not in ("text_finetune", "text_retrain")]  # the forget-retain loop's
STEPS, EVERY = 4, 3  # `train.unlearn.max_steps` of the loop's methods, `evaluation.during.every`
# without the GradNorm attack (a backward pass per forget and holdout example, a tenth of a job here) and with greedy
# answers of 4 tokens, not 32 (half of a final evaluation's time): the points compute neither, and both jobs of a
# comparison take the same setting
TOFU = ["experiment=tofu", "runtime.threads=1", "runtime.print_table=false", f"train.unlearn.max_steps={STEPS}",
        "evaluation.gradnorm=false", "model.max_new_tokens=4"]
# The module's jobs on 6 entities of the built-in data (1 forgotten, 50 retain records) and 4 records in each general
# set, not 20 entities and 20 records: a third of the examples to score at each point and each final evaluation (what
# these jobs spend most on); their M_o and M_r train in about 10 CPU-s, once per suite: test_text_relearn,
# test_text_tuning_parts and test_corpus_jobs' Leak@k jobs take the same ones from the shared cache (keep them equal)
SMALL = ["dataset.entities=6", "dataset.general=4"]
COSTS = ("time_s", "memory_gib", "utilisation_pct", "during_time_s")
DEFAULT = {"forget_quality", "prob", "truth_ratio", "privleak"}  # TOFU's leaderboard without generation


def finals(outcome) -> dict:
    """The final records (no step) but the costs, NaN written as text so that it equals itself."""
    assert outcome.error is None and not outcome.failures, (outcome.error, outcome.failures)
    return {(r["target"], r["role"], r["method"], r["metric"], r["split"]):
            "nan" if isinstance(r["value"], float) and math.isnan(r["value"]) else r["value"]
            for r in outcome.records if "step" not in r and r["metric"] not in COSTS}


def points(outcome, method: str) -> dict[int, dict]:
    """A method's step records: step → {"epoch": its epoch, (metric, split): value}."""
    steps: dict[int, dict] = {}
    for record in outcome.records:
        if record.get("step") is not None and record["method"] == method:
            steps.setdefault(record["step"], {"epoch": record["epoch"]})[record["metric"], record["split"]] = \
                record["value"]
    return steps


@pytest.fixture(scope="module")
def tofu(tmp_path_factory, shared_cache):
    """The same job of every text method without and with `evaluation.during.every` (text_finetune one epoch: 4
    steps of batch 16 over the small set's retain records)."""
    folder, options = tmp_path_factory.mktemp("during"), {"text_finetune": ["method.epochs=1"]}
    plain = run_in_process([*TOFU, *SMALL], folder / "plain", METHODS, shared_cache, options)
    watched = run_in_process([*TOFU, *SMALL, f"evaluation.during.every={EVERY}"], folder / "watched", METHODS,
                             shared_cache, options)
    return plain, watched


@pytest.mark.slow
def test_every_methods_final_records_are_those_of_the_same_job_unwatched(tofu):
    plain, watched = tofu
    assert finals(watched) == finals(plain)
    assert {r["method"] for r in watched.records if r["metric"] == "during_time_s"} == set(METHODS)
    assert not any("step" in r for r in plain.records)


@pytest.mark.slow
def test_the_points_are_step_0_every_n_steps_and_the_end_with_the_loops_epochs(tofu):
    watched = tofu[1]
    for method in LOOPED:
        steps = points(watched, method)
        assert sorted(steps) == [0, EVERY, STEPS], method
        epochs = [steps[step]["epoch"] for step in sorted(steps)]
        assert epochs[0] == 0 and all(isinstance(e, int) for e in epochs) and epochs == sorted(epochs), method
    finetune = points(watched, "text_finetune")
    last = max(finetune)
    assert last > EVERY and sorted(finetune) == sorted({*range(0, last, EVERY), last})
    assert finetune[last]["epoch"] in (0, 1) and finetune[EVERY]["epoch"] == 0  # one epoch, announced by its meter
    assert sorted(points(watched, "text_retrain")) == [0, 1]  # no steps: M_o, then M_u
    assert points(watched, "text_retrain")[1]["epoch"] is None


@pytest.mark.slow
def test_each_point_records_the_default_metrics_and_m_o_is_every_methods_step_0(tofu):
    watched = tofu[1]
    starts = [{key: value for key, value in points(watched, method)[0].items() if key != "epoch"}
              for method in METHODS]
    assert all(start == starts[0] for start in starts)
    for method in METHODS:
        for values in points(watched, method).values():
            assert {key[0] for key in values if key != "epoch"} == DEFAULT
    original = {(r["metric"], r["split"]): r["value"] for r in watched.records if r["role"] == "original"}
    assert starts[0] == {
        key: value for key, value in original.items() if key[0] in DEFAULT}  # every example: the whole splits


@pytest.mark.slow
def test_the_last_point_on_whole_splits_is_the_final_evaluation(tofu):
    """The tiny splits are under `max_examples`: the last point scores the method's model on the same examples."""
    watched = tofu[1]
    for method in METHODS:
        final = {(r["metric"], r["split"]): r["value"] for r in watched.records
                 if "step" not in r and r["method"] == method and r["metric"] in DEFAULT}
        steps = points(watched, method)
        assert {key: value for key, value in steps[max(steps)].items() if key != "epoch"} == final, method
    retrain = points(watched, "text_retrain")[1]
    assert retrain["forget_quality", "forget"] == 1.0 and retrain["privleak", "forget"] == 0.0  # M_r against M_r


def test_an_unknown_metric_is_refused_in_one_line_with_the_valid_ones(tmp_path, shared_cache):
    refused = run_in_process([*TOFU, "evaluation.during.every=2", "evaluation.during.metrics=[prob,bleu]"],
                             tmp_path, ["grad_ascent"], shared_cache)
    message = refused.error  # before any model trains: the job's one line
    assert message.startswith("the 'metrics' option of evaluation.during must be null or a list of forget_quality")
    assert "\n" not in message and "['prob', 'bleu']" in message and "privleak" in message
    assert not refused.records
    with pytest.raises(UserError, match=r"leak_at_k and max_rouge_at_k with evaluation\.sampling\.k > 0"):
        TOFU_POINTS.chosen(["leak_at_k"], ["forget_quality"], sampling=False)
    assert TOFU_POINTS.chosen(["leak_at_k"], ["forget_quality"], sampling=True) == ["leak_at_k"]


def test_the_defaults_are_the_leaderboard_metrics_without_generation_or_their_stand_ins():
    leaderboard = ["forget_quality", "model_utility", "privleak"]
    assert TOFU_POINTS.chosen(None, leaderboard, sampling=True) == ["forget_quality", "prob", "truth_ratio",
                                                                    "privleak"]
    assert MUSE_POINTS.chosen(None, ["verbmem_rouge", "knowmem_rouge", "privleak"], sampling=False) == [
        "extraction_strength", "privleak"]
    assert TOFU_POINTS.chosen(["rouge_l_recall", "prob"], leaderboard, sampling=False) == ["rouge_l_recall", "prob"]
    assert TOFU_POINTS.generates(["rouge_l_recall"]) and not TOFU_POINTS.generates(["prob", "privleak"])


def test_a_sample_is_sorted_rows_drawn_from_its_generator():
    drawn = [sample(50, 8, torch.Generator().manual_seed(seed)) for seed in (0, 0, 1)]
    assert np.array_equal(drawn[0], drawn[1]) and not np.array_equal(drawn[0], drawn[2])
    assert len(drawn[0]) == 8 and np.all(np.diff(drawn[0]) > 0) and drawn[0].max() < 50
    assert np.array_equal(sample(5, 8, torch.Generator()), np.arange(5))


@pytest.mark.slow
def test_a_wmdp_job_records_its_points_on_a_sample_of_its_questions(tmp_path, shared_cache):
    wmdp = ["experiment=wmdp", "runtime.threads=1", "runtime.print_table=false", "train.unlearn.max_steps=3",
            "evaluation.during.every=2", "evaluation.during.max_examples=3"]
    outcome = run_in_process(wmdp, tmp_path, ["grad_ascent", "rmu"], shared_cache)
    assert outcome.error is None and not outcome.failures
    for method in ("grad_ascent", "rmu"):
        steps = points(outcome, method)
        assert sorted(steps) == [0, 2, 3]
        for values in steps.values():
            accuracies = [value for key, value in values.items() if key != "epoch"]
            assert {key for key in values if key != "epoch"} == {("mc_accuracy", "forget"),
                                                                 ("mc_accuracy", "general")}
            assert all(value * 3 == pytest.approx(round(value * 3)) for value in accuracies)  # 3 questions a split
    assert points(outcome, "grad_ascent")[0] == points(outcome, "rmu")[0]  # the same questions for every method
