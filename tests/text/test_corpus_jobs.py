"""experiment=muse and experiment=wmdp as presets (their M_o and M_r apart on the benchmark's forget metric, every
record of a method, IdkDPO and RMU on pretraining chunks), and Leak@k on the evaluation seed for MUSE and TOFU: off
by default, the same numbers for the same seeds, other samples for another evaluation seed, the other records
untouched. The tiny models live in the suite's shared cache. MUSE's M_o trains 40 epochs, not the preset's 80: its
forget texts still memorised far past the assertions' margins (verbmem ROUGE 0.72 against M_r's 0.25, privleak
-100), for 9 CPU-s of training instead of 22."""

from __future__ import annotations

import pytest
from helpers import run_in_process

from unlearnbench.report.compute.forget_quality import read_examples
from unlearnbench.tasks.text.catalogue import CATALOGUE
from unlearnbench.tasks.text.evaluate import metrics

pytestmark = pytest.mark.slow  # eight whole jobs of the MUSE, WMDP and TOFU presets: make test runs them

ONE_THREAD = ["runtime.threads=1", "runtime.print_table=false"]
MUSE = ["experiment=muse", "dataset.articles=8", "train.epochs=40", *ONE_THREAD]  # this file's own M_o and M_r
WMDP = ["experiment=wmdp", *ONE_THREAD]  # test_text_during's models, from the cache
# test_text_during's models (6 entities of the built-in data, 4 records in each general set), from the cache: a
# third of the examples to score; every job of the Leak@k comparison without the GradNorm attack and with greedy and
# sampled answers of 8 tokens, not 32 (what the records compared cost)
TOFU = ["experiment=tofu", "dataset.entities=6", "dataset.general=4", "evaluation.gradnorm=false",
        "model.max_new_tokens=8", *ONE_THREAD]
SAMPLED = ("leak_at_k", "max_rouge_at_k")  # the records of sampled generations
# MUSE's Leak@k at TOFU's temperature here, 1.5: 8 questions make a leak a multiple of 1/8, and at 1.0 the
# 40-epoch models' samples leak the same counts for evaluation seeds 0 and 1 (at 1.5 two models of three differ)
SAMPLING = ["evaluation.sampling.k=3", "evaluation.sampling.temperature=1.5"]


def table(outcome) -> dict:
    assert outcome.error is None and not outcome.failures, (outcome.error, outcome.failures)
    return {(r["role"], r["method"], r["metric"], r["split"]): r["value"] for r in outcome.records
            if r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")}


@pytest.fixture(scope="module")
def muse(tmp_path_factory, shared_cache):
    folder = tmp_path_factory.mktemp("muse")
    plain = run_in_process(MUSE, folder / "plain", ["idk_dpo", "rmu"], shared_cache)
    runs = {None: table(plain), "examples": plain.examples.frame()}
    for seeds, overrides in ((0, []), ("0 again", []), (1, ["seeds.eval=1"])):
        runs[seeds] = table(run_in_process([*MUSE, *SAMPLING, *overrides], folder / str(seeds), ["rmu"],
                                           shared_cache))
    return runs


def test_muses_original_and_retrained_models_are_apart_and_every_method_is_scored(muse):
    values = muse[None]
    assert values[("original", None, "verbmem_rouge", "forget")] - values[("retrained", None, "verbmem_rouge",
                                                                            "forget")] >= 0.1
    assert values[("original", None, "privleak", "forget")] < -50  # M_o's forget texts told from unseen ones
    assert values[("retrained", None, "privleak", "forget")] == 0.0
    metrics = {("verbmem_rouge", "forget"), ("knowmem_rouge", "forget"), ("knowmem_rouge", "retain"),
               ("privleak", "forget"), ("mia_min_k_auc", "forget"), ("extraction_strength", "forget")}
    for method in ("idk_dpo", "rmu"):
        assert {(m, s) for role, name, m, s in values if name == method} == metrics
    assert not any(metric in SAMPLED for _, _, metric, _ in values)  # off by default


def test_muses_privleak_texts_are_the_per_example_rows_the_report_scores(muse, tmp_path):
    frame = muse["examples"]
    path = tmp_path / "examples.parquet"
    frame.to_parquet(path)
    rows = read_examples(path, CATALOGUE.per_example)
    counts = rows.fillna({"method": "-"}).groupby(["role", "method", "split"]).size()
    assert set(counts.index) == {(role, method, split) for role, method in (("retrained", "-"), ("unlearned",
                                 "idk_dpo"), ("unlearned", "rmu")) for split in ("forget", "retain", "holdout")}
    assert (counts == 8).all()  # 8 articles in each PrivLeak set
    original = frame[(frame["role"] == "original") & (frame["split"] == "forget")]
    held = frame[(frame["role"] == "original") & (frame["split"] == "holdout")]
    assert original["loss"].mean() < held["loss"].mean()  # M_o's members are likelier than unseen texts
    assert metrics.mia_auc(original["mia_min_k"], held["mia_min_k"]) == pytest.approx(
        muse[None][("original", None, "mia_min_k_auc", "forget")])


def test_leak_at_k_follows_the_evaluation_seed_and_leaves_every_other_record_alone(muse):
    sampled, again, other = muse[0], muse["0 again"], muse[1]
    leaks = {key: value for key, value in sampled.items() if key[2] == "leak_at_k"}
    assert {(role, method) for role, method, _, _ in leaks} == {("original", None), ("retrained", None),
                                                               ("unlearned", "rmu")}
    assert all(0 <= value <= 1 for value in leaks.values())
    graded = {(role, method, split) for role, method, metric, split in sampled if metric == "max_rouge_at_k"}
    assert graded == {(role, method, split) for role, method, _, split in leaks}
    assert sampled == again
    plain = {k: v for k, v in muse[None].items() if k[1] != "idk_dpo"}
    assert {k: v for k, v in sampled.items() if k[2] not in SAMPLED} == plain
    assert {k: v for k, v in other.items() if k[2] not in SAMPLED} == plain
    samples = [key for key in sampled if key[2] in SAMPLED]  # other samples: another leak or best ROUGE somewhere
    assert [other[key] for key in samples] != [sampled[key] for key in samples]


def test_wmdps_original_knows_the_hazard_answers_and_its_retrained_model_guesses(tmp_path, shared_cache):
    values = table(run_in_process(WMDP, tmp_path, ["npo"], shared_cache))
    forget = {role: values[(role, None, "mc_accuracy", "forget")] for role in ("original", "retrained")}
    assert forget["original"] - forget["retrained"] >= 0.1
    assert forget["retrained"] <= 0.5  # 40 questions of 4 choices, never trained on: near chance
    assert values[("original", None, "mc_accuracy", "general")] >= 0.5
    assert {(m, s) for role, name, m, s in values if name == "npo"} == {("mc_accuracy", "forget"),
                                                                        ("mc_accuracy", "general")}


def test_leak_at_k_on_tofus_forget_questions(tmp_path, shared_cache):
    plain = table(run_in_process(TOFU, tmp_path / "plain", ["grad_ascent"], shared_cache))
    runs = [table(run_in_process([*TOFU, "evaluation.sampling.k=2", "evaluation.sampling.temperature=1.5",
                                  f"seeds.eval={seed}"], tmp_path / str(seed), ["grad_ascent"], shared_cache))
            for seed in (0, 1)]
    for values in runs:
        assert {k: v for k, v in values.items() if k[2] not in SAMPLED} == plain
        assert sum(k[2] == "max_rouge_at_k" for k in values) == 3
    leaks = [{k: v for k, v in values.items() if k[2] == "leak_at_k"} for values in runs]
    assert len(leaks[0]) == 3 and leaks[0] != leaks[1]
    assert all(0 <= value <= 1 for value in leaks[0].values())
