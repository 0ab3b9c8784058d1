"""`unlearnbench-report --openunlearning` on run folders as OpenUnlearning's Hydra leaves them
(tests/data/openunlearning, built by its build.py from OpenUnlearning's own eval experiment configs at d3d7cf9):
`.hydra/config.yaml` unresolved (`forget_split: ${forget_split}`, `data_split: ${data_split}`, `wmdp_${data_split}`,
`work_dir: ${hydra:runtime.cwd}`), `overrides.yaml`, `hydra.yaml`, and the eval files, LMEval's included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import ks_2samp

from unlearnbench.tasks.text.openunlearning import config_value, import_runs, read_evaluation

RUNS = Path(__file__).parent.parent / "data" / "openunlearning"
TOFU = "saves/eval/tofu_Llama-3.2-1B-Instruct_full/evals_{}"
RETAIN90 = "saves/eval/tofu_Llama-3.2-1B-Instruct_retain90"
NPO = "saves/unlearn/tofu_Llama-3.2-1B-Instruct_forget10_NPO/evals"
MUSE = "saves/eval/muse_Llama-2-7b-hf_{}_target"
MUSE_RETRAIN = "saves/eval/muse_Llama-2-7b-hf_News_retrain"
WMDP = "saves/eval/wmdp_zephyr-7b-beta_target"
RMU = "saves/unlearn/wmdp_zephyr-7b-beta_RMU/evals"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict:
    """The fixture's manifest (ten runs: TOFU forget01/05/10 with a retain90 and an NPO run, MUSE News and Books
    with News' retrain model, WMDP cyber's target and RMU runs) imported once."""
    out = tmp_path_factory.mktemp("ou_runs") / "study"
    done = import_runs(RUNS / "manifest.csv", out)
    results = {}
    for folder in done.folders:
        result = json.loads((folder / "result.json").read_text())
        results[result["source"]["path"][len(str(RUNS)) + 1:]] = result
    return {"out": out, "imported": done, "results": results}


def record(result: dict, metric: str, split: str | None = "forget") -> float:
    (value,) = [r["value"] for r in result["records"] if r["metric"] == metric and r["split"] == split]
    return value


def test_the_fixture_is_what_hydra_saves_unresolved():
    """The fixture's configs hold OpenUnlearning's interpolations, as Hydra saves them (a resolved copy would test
    nothing)."""
    tofu = (RUNS / TOFU.format("forget01") / ".hydra" / "config.yaml").read_text()
    assert "    forget_split: ${forget_split}\n" in tofu and "\nforget_split: forget01\n" in tofu
    assert "work_dir: ${hydra:runtime.cwd}" in tofu
    assert "    data_split: ${data_split}\n" in (RUNS / MUSE.format("Books") / ".hydra" / "config.yaml").read_text()
    assert "    - wmdp_${data_split}\n" in (RUNS / WMDP / ".hydra" / "config.yaml").read_text()
    overrides = yaml.safe_load((RUNS / TOFU.format("forget01") / ".hydra" / "overrides.yaml").read_text())
    assert "experiment=eval/tofu/default.yaml" in overrides and "forget_split=forget01" in overrides
    hydra = yaml.safe_load((RUNS / WMDP / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert hydra["runtime"]["choices"]["experiment"] == "eval/wmdp/default.yaml" and hydra["job"]["name"] == "eval"


def test_config_value_gives_the_real_split_of_every_run():
    run = read_evaluation(RUNS / TOFU.format("forget05"))
    assert config_value(run.config, "eval.tofu.forget_split") == "forget05"
    assert config_value(run.config, "eval.tofu.holdout_split") == "holdout05"
    assert config_value(read_evaluation(RUNS / MUSE.format("Books")).config, "eval.muse.data_split") == "Books"
    assert config_value(read_evaluation(RUNS / WMDP).config, "eval.lm_eval.tasks") == ["wmdp_cyber", "mmlu"]
    assert config_value(read_evaluation(RUNS / MUSE.format("News")).config,
                        "model.model_args.pretrained_model_name_or_path") == "muse-bench/MUSE-News_target"
    assert config_value(run.config, "no.such.key", default="absent") == "absent"


def test_targets_and_datasets_are_named_by_the_real_splits(imported):
    results = imported["results"]
    assert len(results) == 10 and all(r["status"] == "complete" for r in results.values())
    named = {path: (r["job"]["dataset"], r["records"][0]["target"], r["job"]["model"]) for path, r in results.items()}
    for split in ("forget01", "forget05", "forget10"):
        assert named[TOFU.format(split)] == ("tofu", split, "Llama-3.2-1B-Instruct")
    assert named[NPO] == named[RETAIN90] == ("tofu", "forget10", "Llama-3.2-1B-Instruct")
    assert named[MUSE.format("News")] == named[MUSE_RETRAIN] == ("muse_news", "forget", "Llama-2-7b-hf")
    assert named[MUSE.format("Books")] == ("muse_books", "forget", "Llama-2-7b-hf")
    assert named[WMDP] == named[RMU] == ("wmdp_cyber", "forget", "zephyr-7b-beta")
    assert results[WMDP]["job"]["scenario"] == "forget_corpus" and results[WMDP]["job"]["precision"] == "bfloat16"
    assert results[WMDP]["source"]["config"] == str(RUNS / WMDP / ".hydra" / "config.yaml")
    for folder in imported["imported"].folders:  # no literal interpolation anywhere in what was written
        assert "${" not in (folder / "result.json").read_text()


def test_wmdp_runs_give_mc_accuracy_from_lm_evals_files(imported):
    """mc_accuracy on forget (wmdp_cyber/acc) and general (mmlu/acc, the size-weighted mean of its subtasks, as
    lm-eval's mmlu group aggregates): the summary's values, which the per-sample accuracies give too."""
    for path in (WMDP, RMU):
        result = imported["results"][path]
        summary = json.loads((RUNS / path / "LMEval_SUMMARY.json").read_text())
        samples = json.loads((RUNS / path / "LMEval_EVAL.json").read_text())
        assert record(result, "mc_accuracy") == summary["wmdp_cyber/acc"]
        assert record(result, "mc_accuracy", "general") == summary["mmlu/acc"]
        pooled = [s["acc"] for subtask in samples["mmlu"].values() for s in subtask]
        assert record(result, "mc_accuracy", "general") == pytest.approx(np.mean(pooled), abs=1e-12)
        assert record(result, "mc_accuracy") == pytest.approx(
            np.mean([s["acc"] for s in samples["wmdp_cyber"]["wmdp_cyber"]]), abs=1e-12)
        assert {(r["metric"], r["split"]) for r in result["records"]} == {("mc_accuracy", "forget"),
                                                                          ("mc_accuracy", "general")}
        assert [m["name"] for m in result["catalogue"]["metrics"]] == ["mc_accuracy"]
    assert imported["results"][RMU]["records"][0]["method"] == "RMU"


def test_wmdp_accuracy_comes_from_the_samples_without_a_summary(tmp_path):
    folder = tmp_path / "wmdp"
    shutil.copytree(RUNS / WMDP, folder)
    (folder / "LMEval_SUMMARY.json").unlink()
    (tmp_path / "m.csv").write_text("path,role,method,seed_train,seed_unlearn\nwmdp,original,,0,\n")
    import_runs(tmp_path / "m.csv", tmp_path / "out")
    (result_path,) = (tmp_path / "out").glob("*/result.json")
    result = json.loads(result_path.read_text())
    summary = json.loads((RUNS / WMDP / "LMEval_SUMMARY.json").read_text())
    assert record(result, "mc_accuracy") == pytest.approx(summary["wmdp_cyber/acc"], abs=1e-12)
    assert record(result, "mc_accuracy", "general") == pytest.approx(summary["mmlu/acc"], abs=1e-12)


def test_each_run_meets_the_retrained_run_of_its_own_split(imported):
    """forget10's runs meet retain90; forget01 and forget05, evaluated on other examples, meet none (they are not
    judged against forget10's retain model), and MUSE Books none of News' retrain model."""
    results, lines = imported["results"], imported["imported"].lines

    def ratios(path: str) -> list:
        logs = json.loads((RUNS / path / "TOFU_EVAL.json").read_text())
        return [e["score"] for e in logs["forget_truth_ratio"]["value_by_index"].values()]

    for path in (NPO, TOFU.format("forget10")):
        assert record(results[path], "forget_quality") == pytest.approx(
            ks_2samp(ratios(path), ratios(RETAIN90)).pvalue, rel=1e-12)
    assert "privleak" in {r["metric"] for r in results[MUSE.format("News")]["records"]}
    for path in (TOFU.format("forget01"), TOFU.format("forget05"), MUSE.format("Books")):
        assert not {"forget_quality", "privleak"} & {r["metric"] for r in results[path]["records"]}
        assert sum(path in line and "no readable retrained run" in line for line in lines) == 1, lines
    assert len(lines) == 3  # WMDP's runs, which no metric compares with a retrained model, have no such line


def test_the_report_of_tofu_muse_and_wmdp_runs_on_one_seed(imported):
    """One seed, configurations with one method or none: the report is built, shows M_o and M_r, and says that
    there is nothing to rank."""
    from unlearnbench.report.build import build_report

    built = build_report([imported["out"]], imported["out"] / "report", figures=False, forget_permutations=5,
                         resamples=20)
    assert not built.failed and len(built.jobs) == 10
    text = (imported["out"] / "report" / "report.md").read_text()
    assert "## Leaderboard" in text and "Nothing to rank" in text
    summary = pd.read_csv(imported["out"] / "report" / "summary.csv")
    news = summary[summary["dataset"] == "muse_news"]
    assert set(news["role"]) == {"original", "retrained"}
    assert set(summary[summary["dataset"] == "wmdp_cyber"]["role"]) == {"original", "unlearned"}
    assert pd.read_csv(imported["out"] / "report" / "leaderboard.csv").empty


def test_a_checkpoints_evaluation_reads_its_unlearning_runs_config(tmp_path):
    """An unlearning run evaluates at its checkpoints into <run>/checkpoint-<step>/evals (src/trainer/base.py); the
    run's .hydra/ is in <run>: its forget split names the target."""
    evals = tmp_path / "saves" / "unlearn" / "npo" / "checkpoint-5" / "evals"
    shutil.copytree(RUNS / NPO, evals)
    shutil.move(evals / ".hydra", tmp_path / "saves" / "unlearn" / "npo" / ".hydra")
    run = read_evaluation(evals)
    assert run.benchmark.target(run) == "forget10"
    assert run.config.path == tmp_path / "saves" / "unlearn" / "npo" / ".hydra" / "config.yaml"
    shutil.move(tmp_path / "saves" / "unlearn" / "npo" / ".hydra", tmp_path / ".hydra")  # another run's: not read
    assert read_evaluation(evals).config is None
