"""`unlearnbench-report --openunlearning`: OpenUnlearning's TOFU_EVAL.json / MUSE_EVAL.json files, built here in its
shapes (src/evals/base.py, src/evals/metrics/memorization.py: value_by_index keyed by string indices, lists for the
perturbed answers, bare NaN) from TOFU's published per-example logs (tests/data/tofu_eval_logs.json: Llama-2-7b on
full and retain90), read into job folders and the seed report."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import hmean, ks_2samp
from sklearn.metrics import roc_auc_score

from unlearnbench import cli
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.openunlearning import import_runs

LOGS = json.loads((Path(__file__).parent.parent / "data" / "tofu_eval_logs.json").read_text())["models"]
TOFU_FQ_FULL_RETAIN90 = 1.834e-21  # TOFU's aggregate_eval_stat.py on these logs (test_text_metrics)


def by_index(values: list) -> dict:
    return {str(i): value for i, value in enumerate(values)}


def probability_log(losses: list) -> dict:
    """OpenUnlearning's `probability`: prob = exp(−avg_loss) per index, lists for several answers."""
    def entry(loss):
        return {"prob": np.exp(-np.asarray(loss)).tolist(), "avg_loss": loss}
    entries = [entry(loss) for loss in losses]
    return {"agg_value": float(np.mean([np.mean(e["prob"]) for e in entries])), "value_by_index": by_index(entries)}


def ou_truth_ratio(correct: list, wrong: list, aggregator: str) -> dict:
    """OpenUnlearning's `truth_ratio` (memorization.py): wrong / (correct + 1e-10) on exp(−mean loss)."""
    ratios = np.exp(-np.mean(wrong, axis=1)) / (np.exp(-np.asarray(correct)) + 1e-10)
    agg = (np.mean(np.minimum(ratios, 1 / (ratios + 1e-10))) if aggregator == "closer_to_1_better"
           else np.mean(np.maximum(0, 1 - ratios)))
    return {"agg_value": float(agg), "value_by_index": by_index([{"score": float(r)} for r in ratios])}


def rouge_log(recalls: list) -> dict:
    entries = [{"rougeL_recall": r, "rougeL_f1": r, "rouge1_recall": r, "input": "q", "ground_truth": "a",
                "generation": "g"} for r in recalls]
    return {"agg_value": float(np.mean(recalls)), "value_by_index": by_index(entries)}


def tofu_eval(model: dict, mia: tuple[list, list] | None = None) -> dict:
    """A TOFU_EVAL.json of one model from TOFU's logs, every key OpenUnlearning's default TOFU suite writes."""
    forget, retain = model["eval_log_forget.json"], model["eval_log.json"]
    logs = {"forget_Q_A_Prob": probability_log(forget["avg_gt_loss"]),
            "forget_Q_A_ROUGE": rouge_log(forget["rougeL_recall"]),
            "forget_Q_A_PARA_Prob": probability_log(forget["avg_paraphrased_loss"]),
            "forget_Q_A_PERT_Prob": probability_log(forget["average_perturb_loss"]),
            "forget_truth_ratio": ou_truth_ratio(forget["avg_paraphrased_loss"], forget["average_perturb_loss"],
                                                 "closer_to_1_better"),
            "forget_quality": {"agg_value": math.nan},  # no retain_logs_path: written as bare NaN
            "extraction_strength": {"agg_value": 0.5, "value_by_index": by_index([{"score": 0.5}] * 300)}}
    for prefix, log in (("retain", retain), ("ra", model["eval_real_author_wo_options.json"]),
                        ("wf", model["eval_real_world_wo_options.json"])):
        correct = log["avg_paraphrased_loss"] if prefix == "retain" else log["avg_gt_loss"]
        logs[f"{prefix}_Q_A_Prob"] = probability_log(log["avg_gt_loss"])
        logs[f"{prefix}_Q_A_PERT_Prob"] = probability_log(log["average_perturb_loss"])
        logs[f"{prefix}_Q_A_ROUGE"] = rouge_log(log["rougeL_recall"])
        logs[f"{prefix}_Truth_Ratio"] = ou_truth_ratio(correct, log["average_perturb_loss"], "true_better")
        if prefix == "retain":
            logs["retain_Q_A_PARA_Prob"] = probability_log(log["avg_paraphrased_loss"])
        else:
            true = np.exp(-np.asarray(log["avg_gt_loss"]))
            wrong = np.exp(-np.asarray(log["average_perturb_loss"])).sum(1)
            normalised = true / (true + wrong + 1e-10)
            logs[f"{prefix}_Q_A_Prob_normalised"] = {"agg_value": float(normalised.mean()), "value_by_index":
                                                     by_index([{"prob": float(p)} for p in normalised])}
    names = ["retain_Q_A_Prob", "retain_Q_A_ROUGE", "retain_Truth_Ratio", *(f"{p}_{m}" for p in ("ra", "wf") for m in
             ("Q_A_Prob_normalised", "Q_A_ROUGE", "Truth_Ratio"))]
    logs["model_utility"] = {"agg_value": float(hmean([logs[n]["agg_value"] for n in names]))}
    if mia is not None:
        members, others = mia
        auc = roc_auc_score([0] * len(members) + [1] * len(others), members + others)
        logs["mia_min_k"] = {"forget": {"agg_value": float(np.mean(members)),
                                        "value_by_index": by_index([{"score": s} for s in members])},
                             "holdout": {"agg_value": float(np.mean(others)),
                                         "value_by_index": by_index([{"score": s} for s in others])},
                             "auc": auc, "agg_value": auc}
    return logs


def shifted(model: dict, amount: float, rng: np.random.Generator) -> dict:
    """TOFU's logs of `model` with every loss moved by `amount` plus noise: a model between two published ones."""
    def move(value):
        if isinstance(value, list):
            return [move(v) for v in value]
        return max(1e-4, value + amount + 0.05 * rng.standard_normal())
    return {name: {key: (values if key in ("rougeL_recall", "truth_ratio") else move(values))
                   for key, values in log.items()} for name, log in model.items()}


def write_run(folder: Path, logs: dict, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "TOFU_EVAL.json").write_text(json.dumps(dict(sorted(logs.items())), indent=4))  # NaN as bare NaN
    summary = {k: v["agg_value"] for k, v in logs.items() if v.get("agg_value") is not None}
    (folder / "TOFU_SUMMARY.json").write_text(json.dumps(summary, indent=4))
    if config is not None:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "config.yaml").write_text(
            "model:\n  model_args:\n    pretrained_model_name_or_path: saves/unlearn/run\n    torch_dtype: bfloat16\n"
            "  tokenizer_args:\n    pretrained_model_name_or_path: meta-llama/Llama-2-7b-chat-hf\n"
            "forget_split: forget10\nseed: 0\n")
    return folder


def write_manifest(path: Path, rows: list[dict]) -> Path:
    columns = ["path", "role", "method", "seed_train", "seed_unlearn", "seed_eval"]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows([{c: row.get(c, "") for c in columns} for row in rows])
    return path


def members(rng: np.random.Generator, shift: float) -> tuple[list, list]:
    return (rng.normal(1.0 + shift, 0.5, 300).tolist(), rng.normal(2.0, 0.5, 300).tolist())


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """Two training seeds, each with its original, its retrained and two methods × two unlearning seeds."""
    root = tmp_path_factory.mktemp("ou")
    rng = np.random.default_rng(0)
    rows, logs = [], {}
    for seed in (0, 1):
        full = LOGS["full"] if seed == 0 else shifted(LOGS["full"], 0.02, rng)
        retain = LOGS["retain90"] if seed == 0 else shifted(LOGS["retain90"], 0.02, rng)
        for role, model, shift in (("original", full, -0.8), ("retrained", retain, 0.0)):
            logs[(role, seed)] = tofu_eval(model, members(rng, shift))
            rows.append({"path": write_run(root / f"{role}{seed}", logs[(role, seed)], config={}).name,
                         "role": role, "seed_train": seed})
        for method, amount in (("npo", 0.5), ("grad_diff", 2.0)):
            for unlearn in (0, 1):
                run = tofu_eval(shifted(LOGS["full"], amount, rng), members(rng, -0.3))
                logs[(method, seed, unlearn)] = run
                folder = write_run(root / f"{method}{seed}{unlearn}", run, config={})
                rows.append({"path": folder.name, "role": "unlearned", "method": method, "seed_train": seed,
                             "seed_unlearn": unlearn})
    manifest = write_manifest(root / "manifest.csv", rows)
    out = root / "imported"
    imported = import_runs(manifest, out)
    return {"root": root, "out": out, "imported": imported, "logs": logs, "rows": rows}


def result_of(out: Path, prefix: str) -> dict:
    (folder,) = [f for f in out.iterdir() if f.name.startswith(prefix)]
    return json.loads((folder / "result.json").read_text())


def record(result: dict, metric: str, split: str | None = "forget") -> float:
    (value,) = [r["value"] for r in result["records"] if r["metric"] == metric and r["split"] == split]
    return value


def tofu_forget_quality(unlearned: dict, retained: dict) -> float:
    """aggregate_eval_stat.py's get_forget_quality (true/false ratios, its direction)."""
    def ratios(log):
        return np.exp(np.array(log["average_perturb_loss"]).mean(-1) - np.array(log["avg_paraphrased_loss"]))
    return ks_2samp(ratios(unlearned), ratios(retained)).pvalue


def test_the_importer_gives_tofus_forget_quality_for_full_against_retain90(study):
    original = result_of(study["out"], "002-original")
    assert original["status"] == "complete" and original["job"]["seed_train"] == 0
    quality = record(original, "forget_quality")
    forget = "eval_log_forget.json"
    assert quality == pytest.approx(tofu_forget_quality(LOGS["full"][forget], LOGS["retain90"][forget]), rel=1e-6)
    assert quality == pytest.approx(TOFU_FQ_FULL_RETAIN90, rel=1e-3)
    assert record(result_of(study["out"], "003-retrained"), "forget_quality") == 1.0


def test_records_equal_the_agg_values_of_the_files(study):
    """Every aggregate is OpenUnlearning's, 1e-10 guards included: the records equal the file's agg_values."""
    logs = study["logs"][("original", 0)]
    original = result_of(study["out"], "002-original")
    pairs = {("prob", "forget"): "forget_Q_A_Prob", ("rouge_l_recall", "forget"): "forget_Q_A_ROUGE",
             ("truth_ratio", "forget"): "forget_truth_ratio", ("extraction_strength", "forget"): "extraction_strength",
             ("prob", "retain"): "retain_Q_A_Prob", ("truth_ratio", "retain"): "retain_Truth_Ratio",
             ("prob", "general_authors"): "ra_Q_A_Prob_normalised", ("truth_ratio", "general_facts"):
             "wf_Truth_Ratio", ("model_utility", None): "model_utility", ("mia_min_k_auc", "forget"): "mia_min_k"}
    for (metric, split), key in pairs.items():
        assert record(original, metric, split) == pytest.approx(logs[key]["agg_value"], rel=1e-12, abs=1e-15), key
    assert original["catalogue"]["derived"][0]["name"] == "forget_quality_first"
    assert original["source"]["summary"]["model_utility"] == logs["model_utility"]["agg_value"]
    assert original["job"]["strategy"] == "openunlearning" and original["job"]["dataset"] == "tofu"
    assert original["job"]["model"] == "Llama-2-7b-chat-hf" and original["job"]["precision"] == "bfloat16"


def test_each_seed_is_judged_against_its_own_retrained_run(study):
    logs = study["logs"]
    for seed in (0, 1):
        result = result_of(study["out"], f"{7 + 6 * seed:03d}-unlearned-grad_diff-t{seed}-u1")
        mine = logs[("grad_diff", seed, 1)]
        gold = logs[("retrained", seed)]
        scores = [[e["score"] for e in log["forget_truth_ratio"]["value_by_index"].values()] for log in (mine, gold)]
        assert record(result, "forget_quality") == pytest.approx(ks_2samp(*scores).pvalue, rel=1e-9)
        auc, gold_auc = mine["mia_min_k"]["auc"], gold["mia_min_k"]["auc"]
        privleak = ((1 - auc) - (1 - gold_auc)) / ((1 - gold_auc) + 1e-10) * 100  # privacy.py's formula
        assert record(result, "privleak") == pytest.approx(privleak, rel=1e-9)
        examples = pd.read_parquet(study["out"] / result_folder(study["out"], result) / "examples.parquet")
        assert set(examples["role"]) == {"unlearned", "retrained"}
        assert len(examples[(examples["role"] == "retrained") & (examples["split"] == "forget")]) == 300


def result_folder(out: Path, result: dict) -> str:
    return next(f.name for f in out.iterdir() if (f / "result.json").is_file()
                and json.loads((f / "result.json").read_text())["source"] == result["source"])


def test_the_report_of_the_imported_runs_has_the_leaderboard_and_the_first_retain_model(study):
    from unlearnbench.report.build import build_report

    built = build_report([study["out"]], study["out"] / "report", figures=False, forget_permutations=20,
                         resamples=50)
    assert not built.failed
    board = pd.read_csv(study["out"] / "report" / "leaderboard.csv")
    assert set(board["method"]) == {"npo", "grad_diff"}
    summary = pd.read_csv(study["out"] / "report" / "summary.csv").set_index(["role", "method", "metric"])
    logs = study["logs"]

    def ratios(log: dict) -> list:
        return [e["score"] for e in log["forget_truth_ratio"]["value_by_index"].values()]

    first = [ks_2samp(ratios(logs[("npo", seed, unlearn)]), ratios(logs[("retrained", 0)])).pvalue
             for seed in (0, 1) for unlearn in (0, 1)]  # every run against seed 0's retain model
    own = [ks_2samp(ratios(logs[("npo", seed, unlearn)]), ratios(logs[("retrained", seed)])).pvalue
           for seed in (0, 1) for unlearn in (0, 1)]
    assert summary.loc[("unlearned", "npo", "forget_quality_first"), "mean"] == pytest.approx(np.mean(first))
    assert summary.loc[("unlearned", "npo", "forget_quality"), "mean"] == pytest.approx(np.mean(own))
    assert summary.loc[("unlearned", "npo", "forget_quality"), "n"] == 4
    quality = pd.read_csv(study["out"] / "report" / "forget_quality.csv")
    assert {"A", "B"} <= set(quality["design"]) and set(quality["method"]) == {"npo", "grad_diff"}


def test_bad_runs_give_one_line_each_and_the_others_go_on(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(1)
    good = write_run(tmp_path / "retain", tofu_eval(LOGS["retain90"], members(rng, 0.0)))
    write_run(tmp_path / "full", tofu_eval(LOGS["full"], members(rng, -0.5)))
    fewer = tofu_eval(LOGS["full"])
    fewer["forget_truth_ratio"]["value_by_index"].pop("7")
    write_run(tmp_path / "fewer", fewer)
    (tmp_path / "empty").mkdir()
    shutil.copytree(tmp_path / "full", tmp_path / "full_copy")  # one folder on two rows is refused whole
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": good.name, "role": "retrained", "seed_train": 0},
        {"path": "full", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0},
        {"path": "fewer", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 1},
        {"path": "empty", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 2},
        {"path": "nowhere", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 3},
        {"path": "full", "role": "teacher", "seed_train": 0},
        {"path": "full", "role": "unlearned", "method": "npo", "seed_train": "x", "seed_unlearn": 4},
        {"path": "full_copy", "role": "unlearned", "method": "npo", "seed_train": 5, "seed_unlearn": 0}])
    out = tmp_path / "out"
    monkeypatch.setattr("sys.argv", ["unlearnbench-report", "--openunlearning", str(manifest), "--out", str(out),
                                     "--no-figures", "--permutations", "5", "--resamples", "20"])
    cli.report_main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "manifest line" in line]
    assert len(lines) == 6, err  # five failed runs in the report's list, one run imported without FQ
    expected = {4: "forget indices differ from its retrained run's",
                5: "holds none of TOFU_EVAL.json, MUSE_EVAL.json, LMEval_SUMMARY.json or LMEval_EVAL.json",
                6: "is not a folder",
                7: "'role' column of the manifest must be one of original, retrained, unlearned; got 'teacher' instead",
                8: "'seed_train' column must hold an integer; got 'x' instead",
                9: "no readable retrained run with seed_train 5"}
    for number, words in expected.items():
        assert sum(f"manifest line {number} " in line and words in line for line in lines) == 1, (number, err)
    statuses = {f.name: json.loads((f / "result.json").read_text())["status"] for f in out.iterdir()
                if (f / "result.json").is_file()}
    assert sorted(statuses.values()).count("complete") == 3 and len(statuses) == 8
    assert (out / "report" / "report.md").is_file()


def test_a_manifest_without_its_columns_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,role,seed_train\nx,original,0\n")
    with pytest.raises(UserError, match="lacks method, seed_unlearn"):
        import_runs(manifest, tmp_path / "out")
    monkeypatch.setattr("sys.argv", ["unlearnbench-report", "--openunlearning", str(manifest), "--out",
                                     str(tmp_path / "out")])
    with pytest.raises(SystemExit) as stop:
        cli.report_main()
    assert stop.value.code == 2 and not (tmp_path / "out").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must have the columns path, role, method, seed_train, seed_unlearn" in err[0]
    monkeypatch.setattr("sys.argv", ["unlearnbench-report", "--openunlearning", str(manifest)])
    with pytest.raises(SystemExit):
        cli.report_main()
    assert "needs --out DIR" in capsys.readouterr().err


def test_muse_files_give_muses_records(tmp_path):
    """A MUSE_EVAL.json: VerbMem and KnowMem as ROUGE-L F1 means, privleak against the retrained run."""
    rng = np.random.default_rng(2)

    def muse_eval(verbmem: float, shift: float) -> dict:
        members_, others = members(rng, shift)
        auc = roc_auc_score([0] * 300 + [1] * 300, members_ + others)
        rouge = {key: {"agg_value": value, "value_by_index": by_index([{"rougeL_f1": value}] * 10)}
                 for key, value in (("forget_verbmem_ROUGE", verbmem), ("forget_knowmem_ROUGE", 0.4),
                                    ("retain_knowmem_ROUGE", 0.6))}
        mia = {part: {"value_by_index": by_index([{"score": s} for s in scores])}
               for part, scores in (("forget", members_), ("holdout", others))}
        return {**rouge, "mia_min_k": {**mia, "auc": auc, "agg_value": auc},
                "mia_loss": {**mia, "auc": auc, "agg_value": auc}}

    logs = {"retrained": muse_eval(0.2, 0.0), "unlearned": muse_eval(0.3, -0.2)}
    for role, content in logs.items():
        (tmp_path / role).mkdir()
        (tmp_path / role / "MUSE_EVAL.json").write_text(json.dumps(content))
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": "retrained", "role": "retrained", "seed_train": 0},
        {"path": "unlearned", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0}])
    imported = import_runs(manifest, tmp_path / "out")
    assert imported.lines == []
    result = result_of(tmp_path / "out", "003-unlearned")
    assert result["job"]["dataset"] == "muse_news" and result["job"]["scenario"] == "forget_corpus"
    assert record(result, "verbmem_rouge") == pytest.approx(0.3)
    assert record(result, "knowmem_rouge", "retain") == pytest.approx(0.6)
    auc, gold = logs["unlearned"]["mia_min_k"]["auc"], logs["retrained"]["mia_min_k"]["auc"]
    assert record(result, "privleak") == pytest.approx(((1 - auc) - (1 - gold)) / ((1 - gold) + 1e-10) * 100)
    examples = pd.read_parquet(next((tmp_path / "out").glob("003-*")) / "examples.parquet")
    assert set(examples["split"]) == {"forget", "holdout"} and len(examples) == 2 * 600
