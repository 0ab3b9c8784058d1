"""Selection and judgement on different examples in the text task (core/validation.py): a tuning's trials score one
part of each set outside training, its held-out judgement the other. TOFU-format data: the holdout set (the
membership attacks' non-members, privleak), the forget, retain and general sets (all trained on) whole; MUSE: the
PrivLeak holdout texts; WMDP: MMLU's general questions, never the hazard questions or the built-in general ones
(trained on). A job outside tuning scores everything, and a tuning's job trains the same models (the same cache
identity)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import plain_config, run_in_process
from lightning_fabric import Fabric
from test_corpus_files import parquet, wmdp_folder

from unlearnbench.core.components import locate
from unlearnbench.core.outcome import Outcome
from unlearnbench.core.plan import JobPlan
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.benchmarks.muse import MuseExamples, MuseOutputs
from unlearnbench.tasks.text.evaluate import metrics

ONE_THREAD = ["runtime.threads=1", "runtime.print_table=false"]
# greedy answers of 4 tokens, not 32 (about a third of an evaluation; every stage the same, and no part of a set is
# chosen by what a model generates); 6 entities and 4 records in each general set, not 20 and 20 (a third of the
# examples to score; the 2 holdout entities kept), test_text_during's M_o and M_r
TEXT = ["dataset=fictitious", "model=causal_lm", "scenario=forget_entities", "model.max_new_tokens=4",
        "dataset.entities=6", "dataset.general=4", *ONE_THREAD]
MUSE = ["dataset=muse_fictitious", "model=causal_lm", "scenario=forget_corpus", "dataset.articles=8", *ONE_THREAD]
# `plain` as experiment=tofu composes it (M_o and M_r from the suite's cache); the tuning's stages as its sweeper sets
# them
STAGES = {"plain": ["experiment=tofu"], "trial": ["experiment=tune", "tune.stage=trial"],
          "default": ["experiment=tune", "tune.stage=default"]}
WHOLE = ("forget", "retain", "general_authors", "general_facts")
HOLDOUT = 20  # fictitious's 2 holdout entities × 10 records


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, shared_cache):
    """The outcome of a tiny text job of each stage, with `text_retrain` (M_r itself: nothing to unlearn)."""
    runs = {stage: run_in_process([*TEXT, *overrides], tmp_path_factory.mktemp(stage), ["text_retrain"],
                                  shared_cache) for stage, overrides in STAGES.items()}
    for outcome in runs.values():
        assert outcome.error is None and not outcome.failures, (outcome.error, outcome.failures)
    return runs


def holdout_rows(outcome) -> np.ndarray:
    frame = outcome.examples.frame()
    return np.sort(frame[(frame["split"] == "holdout") & (frame["role"] == "original")]["index"].to_numpy())


def test_the_trials_and_the_heldout_judgement_score_disjoint_halves_of_the_holdout_set(jobs):
    trial, default = holdout_rows(jobs["trial"]), holdout_rows(jobs["default"])
    assert len(trial) == len(default) == HOLDOUT // 2 and len(np.intersect1d(trial, default)) == 0
    assert np.array_equal(np.union1d(trial, default), holdout_rows(jobs["plain"]))
    assert np.array_equal(holdout_rows(jobs["plain"]), np.arange(HOLDOUT))  # outside tuning: every record
    assert jobs["trial"].dataset["scored"] == {"holdout": {"part": "trials", "examples": 10, "of": HOLDOUT}}
    assert jobs["default"].dataset["scored"]["holdout"]["part"] == "heldout" and "scored" not in jobs["plain"].dataset


def test_the_attacks_and_privleak_take_their_non_members_from_the_jobs_part(jobs):
    for stage, outcome in jobs.items():
        frame = outcome.examples.frame()
        scores = {split: rows["mia_min_k"] for split, rows in frame[frame["role"] == "original"].groupby("split")}
        auc = metrics.mia_auc(scores["forget"], scores["holdout"])
        recorded = [r["value"] for r in outcome.records
                    if (r["role"], r["metric"], r["split"]) == ("original", "mia_min_k_auc", "forget")]
        assert recorded == [pytest.approx(auc)], stage
    holdout = {stage: {(r["role"], r["metric"]): r["value"] for r in outcome.records if r["split"] == "holdout"}
               for stage, outcome in jobs.items()}
    assert holdout["trial"] != holdout["default"]  # other records, other numbers


def test_the_forget_retain_and_general_sets_are_scored_whole_by_every_stage(jobs):
    def whole(outcome) -> dict:
        return {(r["role"], r["method"], r["metric"], r["split"]): r["value"] for r in outcome.records
                if r["split"] in WHOLE and not r["metric"].startswith("mia_") and r["metric"] != "privleak"
                and r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")}

    plain = whole(jobs["plain"])
    assert {split for *_, split in plain} == set(WHOLE) and ("original", None, "forget_quality", "forget") in plain
    assert whole(jobs["trial"]) == whole(jobs["default"]) == plain
    utility = {stage: [r["value"] for r in outcome.records if r["metric"] == "model_utility"]
               for stage, outcome in jobs.items()}
    assert utility["trial"] == utility["default"] == utility["plain"]
    frames = {stage: outcome.examples.frame() for stage, outcome in jobs.items()}
    kept = {stage: frame[frame["split"].isin(["forget", "retain"])].drop(columns="mia_reference")
            .reset_index(drop=True) for stage, frame in frames.items()}
    assert kept["trial"].equals(kept["plain"]) and kept["default"].equals(kept["plain"])


def bench(overrides: list[str], folder):
    """A text job's bench as the job builds it (data, tokenizer, splits; no model trained), and its outcome."""
    config = plain_config(overrides, folder)
    plan, fabric = JobPlan(config, [], str(folder)), Fabric(accelerator="cpu", devices=1)
    outcome = Outcome.begin(fabric, plan)
    return locate(config["task"]["bench"])(fabric, plan, outcome), outcome


def test_muses_privleak_holdout_texts_are_split_and_every_other_probe_is_whole(tmp_path):
    built = {stage: bench([*MUSE, *overrides], tmp_path) for stage, overrides in
             (("plain", ["experiment=muse"]), ("trial", STAGES["trial"]), ("tuned", ["experiment=tune",
                                                                                      "tune.stage=tuned"]))}
    probes = {stage: b.data.probes for stage, (b, _) in built.items()}
    whole = probes["plain"]["privleak_holdout"]
    trial, tuned = probes["trial"]["privleak_holdout"], probes["tuned"]["privleak_holdout"]
    assert len(trial) == len(tuned) == 4 and not [text for text in trial if text in tuned]
    assert sorted(map(str, trial + tuned)) == sorted(map(str, whole))
    for stage in ("trial", "tuned"):
        assert {k: v for k, v in probes[stage].items() if k != "privleak_holdout"} == {
            k: v for k, v in probes["plain"].items() if k != "privleak_holdout"}
        rows = built[stage][0].probe_rows["privleak_holdout"]
        assert [whole[row] for row in rows] == probes[stage]["privleak_holdout"]
        assert built[stage][0].identity == built["plain"][0].identity  # the same tokenizer, models and cache keys
        assert len(built[stage][0].evaluator(8).privleak["holdout"]) == 4  # what the attack reads
    assert built["trial"][1].dataset["scored"] == {"privleak_holdout": {"part": "trials", "examples": 4, "of": 8}}


def test_muses_examples_index_the_holdout_texts_in_the_whole_set():
    n, rows = 3, np.array([1, 4, 6])
    zeros = {"forget": np.zeros(n), "holdout": np.zeros(n)}
    outputs = MuseOutputs(np.zeros(n), np.zeros(n), {}, zeros, {"forget": np.ones(n), "holdout": np.ones(n)}, zeros)
    table = MuseExamples()
    table.add_model("forget", "original", None, outputs, {"privleak_holdout": rows}, outputs)
    frame = table.frame()
    assert frame[frame["split"] == "holdout"]["index"].tolist() == rows.tolist()
    assert frame[frame["split"] == "forget"]["index"].tolist() == [0, 1, 2]


def test_wmdps_mmlu_questions_are_split_and_its_hazard_and_built_in_questions_whole(tmp_path):
    root = wmdp_folder(tmp_path / "wmdp")
    mmlu = [{"question": f"What is {i} + {i}?", "subject": "elementary_mathematics",
             "choices": [str(2 * i + j) for j in range(4)], "answer": 0} for i in range(7)]
    parquet(tmp_path / "mmlu" / "elementary_mathematics" / "test-00000-of-00001.parquet", mmlu)
    files = ["experiment=tune", "dataset=wmdp", "model=causal_lm", "scenario=forget_corpus", f"dataset.root={root}",
             *ONE_THREAD]
    questions = {}
    for stage in ("trial", "tuned"):
        built, outcome = bench([*files, f"dataset.general={tmp_path / 'mmlu'}", f"tune.stage={stage}"], tmp_path)
        questions[stage] = built.evaluator(8).questions
        assert outcome.dataset["scored"]["general"]["examples"] == (4 if stage == "trial" else 3)  # round(3.5): 4
    assert len(questions["trial"]["forget"]) == 6 and questions["trial"]["forget"] == questions["tuned"]["forget"]
    general = [q["question"] for stage in ("trial", "tuned") for q in questions[stage]["general"]]
    assert sorted(general) == sorted(q["question"] for q in mmlu)  # disjoint parts that cover the set
    built_in, outcome = bench([*files, "tune.stage=trial"], tmp_path)
    assert len(built_in.data.probes["general"]) == 40 and "scored" not in outcome.dataset  # trained on: whole


def test_a_holdout_set_too_small_for_the_fraction_is_one_line_naming_it(tmp_path):
    with pytest.raises(UserError, match=r"^the 'tune.validation_fraction' option must leave the trials and the "
                                        r"held-out judgement one example each of the set 'holdout' \(20 examples\), "
                                        r"from 0.025 to below 0.975; got 0.01 instead$"):
        bench([*TEXT, *STAGES["trial"], "tune.validation_fraction=0.01"], tmp_path)
