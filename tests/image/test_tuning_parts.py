"""Selection and judgement on different examples (core/validation.py): the parts of a set outside training that a
tuning's trials and its held-out judgement score (disjoint, covering the set, of the documented sizes, the same for
every job of a tuning, refused in one line where a part would be empty), and tiny digits jobs of each stage: the
trials score one part of the test pool on D'_f, D'_r and the attacks' non-members, the held-out judgement the other,
D_f and D_r whole, and a job outside tuning everything, as before."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import TINY, plain_config, run_in_process
from lightning_fabric import Fabric

from unlearnbench.core.components import build
from unlearnbench.core.outcome import Outcome
from unlearnbench.core.plan import JobPlan
from unlearnbench.core.validation import HELDOUT, TRIALS, parts, scored_part
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.bench import ImageBench
from unlearnbench.tasks.image.data.base import full_pool

COSTS = {"time_s", "memory_gib", "utilisation_pct"}


def tuning(stage: str | None, seed: int = 0, fraction: float = 0.5, **more) -> dict:
    """A job config's `tune` block as the sweeper sets it on each job (`more`: trial, replicate, …)."""
    return {"tune": {"stage": stage, "seed": seed, "validation_fraction": fraction, **more}}


@pytest.mark.parametrize(("size", "fraction", "trials"), [
    (359, 0.5, 180),  # 179.5: halves up
    (10, 0.15, 2),  # exactly 1.5 (the floating-point product is below it)
    (7, 0.3, 2), (2, 0.5, 1), (1000, 0.999, 999), (3, 0.2, 1),
])
def test_the_trials_part_holds_round_fraction_n_and_the_parts_split_the_set(size, fraction, trials):
    split = parts("test", size, fraction, 0)
    assert len(split[TRIALS]) == trials and len(split[HELDOUT]) == size - trials
    assert np.array_equal(np.sort(np.concatenate([split[TRIALS], split[HELDOUT]])), np.arange(size))
    assert all(np.all(np.diff(rows) > 0) for rows in split.values())  # ascending, each row once


def test_every_size_and_fraction_that_leaves_both_parts_an_example_splits_exactly():
    for size in range(2, 80):
        for fraction in (0.05, 0.1, 0.25, 0.5, 0.6, 0.75, 0.9, 0.95):
            expected = math.floor(Fraction(str(fraction)) * size + Fraction(1, 2))
            if not 0 < expected < size:
                continue
            split = parts("holdout", size, fraction, 7)
            assert len(split[TRIALS]) == expected
            assert len(np.intersect1d(split[TRIALS], split[HELDOUT])) == 0
            assert len(np.union1d(split[TRIALS], split[HELDOUT])) == size


def test_every_job_of_a_tuning_gets_the_same_parts_and_the_stages_get_disjoint_ones():
    size = 500
    trial_jobs = [scored_part({**tuning("trial", 3, trial=trial, replicate=0), "seeds": {"train": train}}, "test",
                              size) for trial in range(3) for train in (0, 5)]
    heldout_jobs = [scored_part({**tuning(stage, 3, trial=None), "seeds": {"train": train}}, "test", size)
                    for stage in ("tuned", "default") for train in (10, 11)]
    assert all(np.array_equal(job.rows, trial_jobs[0].rows) and job.part == TRIALS for job in trial_jobs)
    assert all(np.array_equal(job.rows, heldout_jobs[0].rows) and job.part == HELDOUT for job in heldout_jobs)
    assert len(np.intersect1d(trial_jobs[0].rows, heldout_jobs[0].rows)) == 0
    assert trial_jobs[0].describe() == {"part": "trials", "examples": 250, "of": 500}
    assert not np.array_equal(scored_part(tuning("trial", 4), "test", size).rows, trial_jobs[0].rows)  # tune.seed
    assert not np.array_equal(scored_part(tuning("trial", 3), "holdout", size).rows, trial_jobs[0].rows)  # the set


def test_the_parts_are_drawn_from_the_documented_seed_alone():
    """The same numbers on every machine: numpy's SeedSequence and PCG64 are platform-independent."""
    split = parts("test", 10, 0.5, 0)
    again = parts("test", 10, 0.5, 0)
    assert split[TRIALS].tolist() == again[TRIALS].tolist() == PINNED_TRIALS


PINNED_TRIALS = [0, 1, 5, 6, 9]  # parts("test", 10, 0.5, seed 0): streams("validation", 0, "test")


@pytest.mark.parametrize("config", [{}, {"tune": None}, tuning(None)])
def test_a_job_outside_tuning_scores_every_example(config):
    assert scored_part(config, "test", 359) is None


@pytest.mark.parametrize(("size", "fraction", "message"), [
    (1, 0.5, r"^the set 'holdout' holds 1 example\(s\), too few to give the trials and the held-out judgement one "
             r"each \(tune.validation_fraction=0.5\); a tuning needs 2 at least$"),
    (3, 0.1, r"^the 'tune.validation_fraction' option must leave the trials and the held-out judgement one example "
             r"each of the set 'holdout' \(3 examples\), from 0.1667 to below 0.8333; got 0.1 instead$"),
    (3, 0.9, r"from 0.1667 to below 0.8333; got 0.9 instead$"),
])
def test_a_set_too_small_to_split_is_one_line_naming_it_and_the_fraction(size, fraction, message):
    with pytest.raises(UserError, match=message):
        scored_part(tuning("tuned", fraction=fraction), "holdout", size)


# The jobs: tiny digits, full-class forgetting of "3", the `retrain` method (M_r itself: nothing to unlearn), M_o
# and M_r from the suite's shared cache. `outside` sets the tune options with no stage, as a sweep outside tuning.
STAGES = {"plain": [], "outside": ["experiment=tune"], "trial": ["experiment=tune", "tune.stage=trial"],
          "tuned": ["experiment=tune", "tune.stage=tuned"]}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, shared_cache):
    """Each stage's outcome and the splits its scorer scored (the positions in the test pool as loaded)."""
    scored = {}

    def spy(bench, target, splits):
        scorer = original_scorer(bench, target, splits)
        subsets = {**dict(splits.items()), "test pool": full_pool(bench.data, "test"),
                   "loss attack's non-members": scorer.loss_nonmembers()}
        scored[current] = {name: bench.data.loaded_positions(subset.pool, subset.indices).numpy()
                           for name, subset in subsets.items()}
        return scorer

    runs, original_scorer = {}, ImageBench.scorer
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ImageBench, "scorer", spy)
        for current, overrides in STAGES.items():
            runs[current] = run_in_process([*TINY, *overrides], tmp_path_factory.mktemp(current), ["retrain"],
                                           shared_cache)
            assert runs[current].error is None and not runs[current].failures
    return runs, scored


def test_the_trials_and_the_heldout_judgement_score_disjoint_test_examples_on_d_f_and_d_r(jobs):
    runs, scored = jobs
    trial, tuned, plain = scored["trial"], scored["tuned"], scored["plain"]
    for split in ("forget_test", "retain_test"):
        assert len(np.intersect1d(trial[split], tuned[split])) == 0, split
        assert np.array_equal(np.union1d(trial[split], tuned[split]), plain[split]), split  # together: the whole
    assert np.array_equal(np.union1d(trial["test pool"], tuned["test pool"]), np.arange(359))
    assert runs["trial"].dataset["scored"] == {"test": {"part": "trials", "examples": 180, "of": 359}}
    assert runs["tuned"].dataset["scored"] == {"test": {"part": "heldout", "examples": 179, "of": 359}}
    assert runs["trial"].dataset["test"] == 359  # the pool as loaded, described before its part is taken


def test_the_membership_attacks_non_members_are_the_jobs_part(jobs):
    """The entropy attack's non-members are the test pool the job scores, the loss attack's its D'_f."""
    runs, scored = jobs
    assert len(np.intersect1d(scored["trial"]["test pool"], scored["tuned"]["test pool"])) == 0
    for stage in ("trial", "tuned"):
        part = scored[stage]["test pool"]
        assert len(part) == runs[stage].dataset["scored"]["test"]["examples"]
        assert np.array_equal(part, np.union1d(scored[stage]["forget_test"], scored[stage]["retain_test"]))
        assert np.array_equal(scored[stage]["loss attack's non-members"], scored[stage]["forget_test"])  # D'_f's part
    assert len(scored["plain"]["test pool"]) == 359


def test_d_f_and_d_r_are_scored_whole_by_every_stage(jobs):
    runs, scored = jobs
    for split in ("forget_train", "retain_train"):
        assert all(np.array_equal(scored[stage][split], scored["plain"][split]) for stage in STAGES)
    whole = {stage: {(r["role"], r["method"], r["metric"], r["split"]): r["value"] for r in runs[stage].records
                     if r["split"] in ("forget_train", "retain_train") and r["metric"] in ("acc", "loss")}
             for stage in STAGES}
    assert len(whole["plain"]) == 12 and whole["trial"] == whole["tuned"] == whole["plain"]


def test_examples_parquet_indexes_each_parts_examples_in_the_test_pool_as_loaded(jobs, tmp_path):
    runs, scored = jobs
    loaded = build(plain_config(TINY, tmp_path)["dataset"], "dataset").load()
    rows = {}
    for stage in ("trial", "tuned"):
        frame = runs[stage].examples.frame()
        test = frame[(frame["split"] == "retain_test") & (frame["role"] == "original")]
        rows[stage] = test["index"].to_numpy()
        assert np.array_equal(np.sort(rows[stage]), scored[stage]["retain_test"])  # all of D'_r's part (< 1,000)
        assert np.array_equal(test["label"].to_numpy(), loaded.test_labels.numpy()[rows[stage]])
    assert len(np.intersect1d(rows["trial"], rows["tuned"])) == 0


def test_outside_tuning_a_job_scores_everything_as_before(jobs):
    runs, scored = jobs
    plain, outside = runs["plain"], runs["outside"]
    assert "scored" not in plain.dataset and "scored" not in outside.dataset
    assert np.array_equal(scored["plain"]["test pool"], np.arange(359))
    for stage in ("plain", "outside"):
        assert np.array_equal(np.union1d(scored[stage]["forget_test"], scored[stage]["retain_test"]), np.arange(359))

    def numbers(outcome):
        return [r for r in outcome.records if r["metric"] not in COSTS]

    assert numbers(outside) == numbers(plain)
    assert outside.examples.frame().equals(plain.examples.frame())


def test_random_sample_scores_d_prime_f_whole_as_it_is_d_f_and_splits_d_prime_r(tmp_path):
    """In the random-sample scenario D'_f is D_f itself (training data): every stage scores it whole."""
    fabric, splits = Fabric(accelerator="cpu", devices=1), {}
    for stage in ("trial", "default"):
        config = plain_config([*TINY, "scenario=random_sample", "experiment=tune", f"tune.stage={stage}"], tmp_path)
        plan = JobPlan(config, [], str(tmp_path))
        bench = ImageBench(fabric, plan, Outcome.begin(fabric, plan))
        split = bench.split(bench.targets[0])
        splits[stage] = {name: bench.data.loaded_positions(subset.pool, subset.indices).numpy()
                         for name, subset in split.items()}
        assert split.forget_test.pool == "train"
    assert np.array_equal(splits["trial"]["forget_test"], splits["default"]["forget_test"])
    assert len(splits["trial"]["forget_test"]) == 144
    assert len(np.intersect1d(splits["trial"]["retain_test"], splits["default"]["retain_test"])) == 0
    assert np.array_equal(np.union1d(splits["trial"]["retain_test"], splits["default"]["retain_test"]),
                          np.arange(359))
