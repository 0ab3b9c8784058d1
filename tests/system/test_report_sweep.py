"""The reporter end to end: `unlearnbench-report` on constructed result files with known answers, and on a real
seed-sensitivity sweep (killed midway, reported, resumed, reported again)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from pathlib import Path

import forkserver
import pandas as pd
import pytest
from helpers import TINY, results, run_cli

from unlearnbench.report.compute import stats

PNG = b"\x89PNG\r\n\x1a\n"
REPORT_FILES = ["results.parquet", "results.csv", "summary.csv", "table.csv", "seed_variance.csv",
                "seed_variance_by_seed.csv", "seed_variance_eval.csv", "wasserstein.csv", "wasserstein_by_seed.csv",
                "rank_stability.csv", "rank_stability_by_seed.csv", "seed_plan.csv", "report.md"]

# The constructed study: digits · resnet18 · full_class, target 3, I = 3 training seeds × J = 2 unlearning seeds
# (s_u = 2i + j). Method alpha: Δacc D'_f = GRID[i][j] (the hand-computed grid of test_report_stats), acc D'_f 0.05;
# method beta: Δacc D'_f constant within a training seed (a deterministic method), acc D'_f 0.5; M_r: acc D'_f 0.
GRID = [[1.0, 3.0], [4.0, 6.0], [7.0, 11.0]]
BETA = [0.1, 0.2, 0.3]


def write_result(folder: Path, job: dict, records: list[dict], status: str = "complete",
                 error: str | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"schema": 1, "status": status, "error": error, "job": job,
                                                     "records": records}))


def job_fields(dataset: str, seed_train: int, seed_unlearn: int, **extra) -> dict:
    return {"task": "image_classification", "dataset": dataset, "model": "resnet18", "scenario": "full_class",
            "method": "all", "seed_train": seed_train, "seed_unlearn": seed_unlearn, "seed_eval": seed_unlearn,
            "strategy": "single", "precision": "32-true", "devices": 1, **extra}


def record(method: str | None, role: str, metric: str, split: str | None, value: float, **extra) -> dict:
    return {"target": "3", "method": method, "role": role, "metric": metric, "split": split, "value": value, **extra}


@pytest.fixture(scope="module")
def constructed(tmp_path_factory):
    """Two sweep folders: A holds training seeds 0 and 1, B training seed 2, a failed job, an unreadable file and an
    unbalanced ranking study with per-round NDCG@10."""
    root = tmp_path_factory.mktemp("constructed")
    first, second = root / "sweep_a", root / "sweep_b"
    for i in range(3):
        for j in range(2):
            u = 2 * i + j
            records = [record(None, "original", "acc", "forget_test", 0.9),
                       record(None, "retrained", "acc", "forget_test", 0.0),
                       record("alpha", "unlearned", "acc", "forget_test", 0.05),
                       record("alpha", "unlearned", "delta_acc", "forget_test", GRID[i][j]),
                       record("beta", "unlearned", "acc", "forget_test", 0.5),
                       record("beta", "unlearned", "delta_acc", "forget_test", BETA[i]),
                       record("beta", "unlearned", "time_s", None, None)]  # not measurable: null
            write_result((first if i < 2 else second) / f"digits_t{i}_u{u}", job_fields("digits", i, u), records)
    write_result(second / "digits_t2_u99", job_fields("digits", 2, 99),
                 [record("alpha", "unlearned", "delta_acc", "forget_test", 1000.0)], status="failed",
                 error="RuntimeError: boom\nmore detail")
    (second / "broken").mkdir()
    (second / "broken" / "result.json").write_text("{not json")
    for i, unlearning in [(0, [0, 1]), (1, [2])]:  # unbalanced: 2 and 1 unlearning seeds
        for u in unlearning:
            rounds = [{"target": "0", "method": "fedremove", "role": "unlearned", "metric": "ndcg@10",
                       "split": None, "round": r, "value": 0.1 * r + 0.01 * i + 0.001 * u} for r in range(4)]
            job = job_fields("mq2007", i, u, task="ranking", model="linear", scenario="clients")
            write_result(second / f"mq2007_t{i}_u{u}", job, rounds)
    run = run_cli([str(first), str(second)], root, program="unlearnbench-report")
    again = run_cli([str(first), str(second), "--out", str(root / "again")], root, program="unlearnbench-report")
    return root, first / "report", run, again


def rows(frame: pd.DataFrame, **match) -> pd.DataFrame:
    for key, value in match.items():
        frame = frame[frame[key].isna()] if value is None else frame[frame[key] == value]
    return frame


@pytest.mark.processes
def test_constructed_report_writes_every_file_and_names_failed_jobs(constructed):
    _, report, run, _ = constructed
    assert run.returncode == 0, run.stderr
    assert f"report: {report}" in run.stdout
    assert "FAILED digits_t2_u99: RuntimeError: boom" in run.stderr and "FAILED broken" in run.stderr
    for name in REPORT_FILES:
        assert (report / name).is_file() and (report / name).stat().st_size > 0, name
    table = pd.read_csv(report / "results.csv")
    assert len(table) == 6 * 7 + 1 + 3 * 4  # every record of every readable job, the failed one's included
    assert len(pd.read_parquet(report / "results.parquet")) == len(table)
    assert {"seed_train", "seed_unlearn", "seed_eval", "status", "job_method", "folder", "round"} <= set(table)
    assert set(table["status"]) == {"complete", "failed"}


@pytest.mark.processes
def test_summary_holds_mean_std_n_across_seeds(constructed):
    _, report, _, _ = constructed
    summary = pd.read_csv(report / "summary.csv")
    alpha = rows(summary, dataset="digits", method="alpha", metric="delta_acc", split="forget_test").iloc[0]
    values = [v for row in GRID for v in row]  # the failed job's 1000 is not among them
    assert alpha["mean"] == pytest.approx(sum(values) / 6)
    assert alpha["std"] == pytest.approx(pd.Series(values).std())
    assert (alpha["n"], alpha["seeds_train"], alpha["seeds_unlearn"], alpha["target"]) == (6, 3, 6, 3)
    original = rows(summary, role="original", metric="acc").iloc[0]
    assert (original["mean"], original["n"]) == (0.9, 6) and math.isnan(original["method"])
    timing = rows(summary, method="beta", metric="time_s").iloc[0]
    assert timing["n"] == 0 and math.isnan(timing["mean"])
    ndcg = rows(summary, dataset="mq2007", metric="ndcg@10").sort_values("round")
    assert list(ndcg["round"]) == [0, 1, 2, 3] and list(ndcg["n"]) == [3, 3, 3, 3]
    assert ndcg["mean"].iloc[3] == pytest.approx((0.3 + 0.000 + 0.3 + 0.001 + 0.31 + 0.002) / 3)


@pytest.mark.processes
def test_table_averages_over_unlearning_seeds_first(constructed):
    _, report, _, _ = constructed
    table = pd.read_csv(report / "table.csv")
    alpha = rows(table, method="alpha", metric="delta_acc").iloc[0]
    per_seed = pd.Series([sum(r) / 2 for r in GRID])  # 2, 5, 9
    assert alpha["mean"] == pytest.approx(per_seed.mean())
    assert alpha["std"] == pytest.approx(per_seed.std())
    assert (alpha["I"], alpha["n"]) == (3, 6)


@pytest.mark.processes
def test_seed_variance_matches_the_hand_computed_grid(constructed):
    _, report, _, _ = constructed
    variance = pd.read_csv(report / "seed_variance.csv")
    alpha = rows(variance, method="alpha", metric="delta_acc").iloc[0]
    assert (alpha["I"], alpha["J"], alpha["n"], bool(alpha["balanced"])) == (3, 2, 6, True)
    assert alpha["msw"] == pytest.approx(4.0) and alpha["msb"] == pytest.approx(222 / 9)
    assert alpha["sigma_u2"] == pytest.approx(4.0) and alpha["sigma_t2"] == pytest.approx(31 / 3)
    assert alpha["icc"] == pytest.approx(31 / 43) and alpha["total"] == pytest.approx(43 / 3)
    assert alpha["sigma_t2_low"] <= alpha["sigma_t2"] <= alpha["sigma_t2_high"]
    assert "fewer than 10 training seeds" in alpha["warnings"]
    beta = rows(variance, method="beta", metric="delta_acc").iloc[0]
    assert beta["sigma_u2"] == 0.0 and beta["sigma_u2_low"] == 0.0 and beta["sigma_u2_high"] == 0.0
    assert beta["sigma_t2"] == pytest.approx(0.01)  # the variance of 0.1, 0.2, 0.3
    ndcg = rows(variance, dataset="mq2007").iloc[0]  # the last round only; unbalanced
    assert not ndcg["balanced"] and (ndcg["J_min"], ndcg["J_max"], ndcg["n"]) == (1, 2, 3)
    assert ndcg["J"] == pytest.approx((3 - 5 / 3) / 1)
    assert "unbalanced grid" in ndcg["warnings"]


@pytest.mark.processes
def test_wasserstein_rows_compare_each_training_seed_with_the_multi_seed_design(constructed):
    _, report, _, _ = constructed
    by_seed = rows(pd.read_csv(report / "wasserstein_by_seed.csv"), method="alpha", metric="delta_acc")
    design_b = [row[0] for row in GRID]  # the smallest unlearning seed of each training seed
    others = [design_b[:i] + design_b[i + 1:] for i in range(3)]  # B without seed i: no shared job
    assert list(by_seed["seed_train"]) == [0, 1, 2]
    assert by_seed["w2"].iloc[0] == pytest.approx(math.sqrt(12.5))  # [1, 3] against [4, 7], by hand
    assert list(by_seed["w2"]) == pytest.approx([stats.w2(row, b) for row, b in zip(GRID, others, strict=True)])
    assert list(by_seed["null_95"]) == pytest.approx([stats.w2_null(row, b) for row, b in zip(GRID, others,
                                                                                             strict=True)])
    assert set(by_seed["n_A"]) == {2} and set(by_seed["n_B"]) == {2}
    summary = rows(pd.read_csv(report / "wasserstein.csv"), method="alpha", metric="delta_acc").iloc[0]
    assert (summary["I"], summary["J"], summary["designs_A"]) == (3, 2, 3)
    assert summary["w2_mean"] == pytest.approx(by_seed["w2"].mean())
    assert (summary["w2_min"], summary["w2_max"]) == pytest.approx((by_seed["w2"].min(), by_seed["w2"].max()))
    assert summary["null_95_mean"] == pytest.approx(by_seed["null_95"].mean())
    assert rows(pd.read_csv(report / "wasserstein.csv"), dataset="mq2007").empty  # 2 training seeds: B₋ᵢ too small


@pytest.mark.processes
def test_per_seed_variances_ranks_and_seed_plan_of_the_constructed_grid(constructed):
    _, report, _, _ = constructed
    by_seed = rows(pd.read_csv(report / "seed_variance_by_seed.csv"), metric="delta_acc")
    alpha = rows(by_seed, method="alpha")
    assert list(alpha["var"]) == pytest.approx([2.0, 2.0, 8.0])  # [1, 3], [4, 6], [7, 11]
    assert list(rows(by_seed, method="beta")["var"]) == [0.0, 0.0, 0.0]
    variance = rows(pd.read_csv(report / "seed_variance.csv"), method="beta", metric="delta_acc").iloc[0]
    assert (variance["deterministic_seeds"], variance["seeds_with_spread"]) == (3, 3)
    assert math.isnan(variance["homogeneity_p"])  # J = 2: the Brown–Forsythe test is undefined
    assert (variance["sigma_u2_chi2_low"], variance["sigma_u2_chi2_high"]) == (0.0, 0.0)  # so the χ² interval stays
    ranks = pd.read_csv(report / "rank_stability.csv")
    forget = rows(ranks, dataset="digits", metric="delta_acc", split="forget_test").iloc[0]
    # |Δacc D'_f| per training seed: alpha 2, 5, 9; beta 0.1, 0.2, 0.3: beta is best on every seed
    assert (forget["best_all"], forget["p_best_changes"], forget["tau_mean"], forget["I"]) == ("beta", 0.0, 1.0, 3)
    assert forget["p_low"] == 0.0 and 0.5 < forget["p_high"] < 0.6  # Wilson's interval for 0 of 3
    plans = pd.read_csv(report / "seed_plan.csv")
    beta = rows(plans, method="beta", metric="delta_acc").iloc[0]
    assert beta["point_note"].startswith("no training or unlearning time")  # its time_s is null
    assert "How many seeds to run" in (report / "report.md").read_text()
    assert set(plans["target_se"]) == {0.01}  # the default; `--target-se` sets it
    root = report.parent.parent
    finer = run_cli([str(root / "sweep_a"), "--out", str(root / "finer"), "--target-se", "0.05", "--no-figures"], root,
                    program="unlearnbench-report")
    assert finer.returncode == 0, finer.stderr
    assert set(pd.read_csv(root / "finer" / "seed_plan.csv")["target_se"]) == {0.05}
    assert "whose mean has a standard error ≤ 0.05" in (root / "finer" / "report.md").read_text()
    bad = run_cli([str(root / "sweep_a"), "--target-se", "-1"], root, program="unlearnbench-report")
    assert bad.returncode == 2 and "must be a positive number" in bad.stderr


@pytest.mark.processes
def test_report_md_marks_the_best_method_warns_and_lists_failed_jobs(constructed):
    _, report, _, _ = constructed
    text = (report / "report.md").read_text()
    assert "## digits · resnet18 · full_class — target 3" in text
    section = text[text.index("## digits · resnet18 · full_class — target 3"):].splitlines()
    main = next(line for line in section if line.startswith("| beta |"))
    assert "**0.2 ± 0.1**" in main  # Δacc D'_f closest to 0: beta
    alpha = next(line for line in section if line.startswith("| alpha |"))
    assert "**0.05 ± 0**" in alpha  # acc D'_f closest to the retrained model's 0: alpha
    assert "fewer than 10 training seeds (I = " in text
    assert "unbalanced grid" in text
    failed = text[text.index("## Failed jobs (2)"):]
    assert "digits_t2_u99" in failed and "RuntimeError: boom" in failed and "broken" in failed
    assert "](figures/designs_digits_resnet18_full_class_acc_forget_test.png)" in text


@pytest.mark.processes
def test_figures_are_png_files(constructed):
    _, report, _, _ = constructed
    names = {p.name for p in (report / "figures").glob("*.png")}
    assert {"designs_digits_resnet18_full_class_acc_forget_test.png",
            "designs_digits_resnet18_full_class_delta_acc_forget_test.png",
            "wasserstein_digits_resnet18_full_class.png", "variance_digits_resnet18_full_class.png",
            "trajectory_mq2007_linear_clients_ndcg-10_0.png", "seed_study_digits_resnet18_full_class_3.png",
            "ranks_digits_resnet18_full_class.png"} <= names
    for path in (report / "figures").glob("*.png"):
        content = path.read_bytes()
        assert content.startswith(PNG) and len(content) > 5000, path.name


@pytest.mark.processes
def test_report_is_reproducible(constructed):
    root, report, _, again = constructed
    assert again.returncode == 0, again.stderr
    figures = [f"figures/{p.name}" for p in (report / "figures").glob("*.png")]
    for name in [*(n for n in REPORT_FILES if n != "results.parquet"), *figures]:
        assert (root / "again" / name).read_bytes() == (report / name).read_bytes(), name


# ------------------------------------------------------------------------------------- a real, killed sweep

# Unlearning batches of 512 (the methods' `batch_size` follows the scenario's): fewer steps, half the fine-tuning time.
# Both methods in each job: six jobs (test_api.py's example runs the same ones, its models in the suite's cache too).
SWEEP = ["experiment=seed_sensitivity", "study.I=3", "study.J=2", "methods=[ssd,finetune]", "scenario.batch_size=512",
         *TINY, "report.figures=true"]


def complete_results(folder: Path) -> int:
    count = 0
    for path in folder.glob("*/result.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            count += json.loads(path.read_text())["status"] == "complete"
    return count


@pytest.fixture(scope="module")
def real(tmp_path_factory, shared_cache):
    """3 training × 2 unlearning seeds on digits, each job running ssd and finetune (3 training seeds: the fewest the
    W2 tables take): started, killed once a job has finished, reported, then run again into the same folder to
    completion (the models in the suite's cache)."""
    tmp_path = tmp_path_factory.mktemp("real")
    sweep = tmp_path / "sweep"
    args = [*SWEEP, f"hydra.sweep.dir={sweep}", f"paths.cache_dir={shared_cache}",
            f"paths.data_dir={tmp_path / 'data'}"]
    process = forkserver.Forked(forkserver.server(), "unlearnbench", args, tmp_path,
                                {**os.environ, "PYTHONWARNINGS": "ignore"})
    deadline = time.monotonic() + 300
    try:
        while complete_results(sweep) < 1 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.kill()
        process.communicate()
    finished = complete_results(sweep)
    partial = run_cli([str(sweep), "--out", str(tmp_path / "partial"), "--no-figures", "--permutations", "10"],
                      tmp_path, program="unlearnbench-report")  # its tables alone are read (QUICK_REPORT's report)
    resumed = run_cli([*SWEEP, f"paths.cache_dir={shared_cache}"], tmp_path)
    return tmp_path, sweep, finished, partial, resumed


@pytest.mark.processes
def test_killed_sweep_reports_its_finished_jobs(real):
    tmp_path, _, finished, partial, _ = real
    assert 1 <= finished < 6
    assert partial.returncode == 0, partial.stderr
    table = pd.read_csv(tmp_path / "partial" / "results.csv")
    assert table["folder"].nunique() == finished and set(table["status"]) == {"complete"}
    assert "Jobs: " + str(finished) in (tmp_path / "partial" / "report.md").read_text()


@pytest.mark.processes
def test_running_the_sweep_again_completes_it_and_the_report_covers_every_job(real):
    _, sweep, finished, _, resumed = real
    assert resumed.returncode == 0, resumed.stderr
    output = resumed.stdout + resumed.stderr
    assert output.count("already complete, skipped") == finished
    jobs = results(sweep)
    assert len(jobs) == 6 and all(r["status"] == "complete" for r in jobs.values())
    seeds = {(r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in jobs.values()}
    assert seeds == {(i, 2 * i + j) for i in range(3) for j in range(2)}  # s_u = i·J + j: six distinct seeds
    table = pd.read_csv(sweep / "report" / "results.csv")
    assert table["folder"].nunique() == 6
    assert f"report: {sweep / 'report'}" in resumed.stdout


@pytest.mark.processes
def test_real_sweep_report_files_and_statistics(real):
    _, sweep, _, _, _ = real
    report = sweep / "report"
    for name in REPORT_FILES:
        assert (report / name).stat().st_size > 0, name
    variance = pd.read_csv(report / "seed_variance.csv")
    unlearned = variance[variance["role"] == "unlearned"]
    assert set(unlearned["method"]) == {"ssd", "finetune"}
    measured = unlearned[~unlearned["metric"].isin(["time_s", "memory_gib", "utilisation_pct"])]
    assert set(measured["I"]) == {3} and set(measured["J"]) == {2.0}  # (a cost can be null: a too-short call)
    # SSD is deterministic given M_o, and full-class splits do not depend on the unlearning seed: the unlearned
    # model's own metrics do not vary with the unlearning seed. (Comparisons against M_r, e.g. Δacc, do: M_r is
    # trained with the unlearning seed.)
    ssd = unlearned[(unlearned["method"] == "ssd") & unlearned["metric"].isin(["acc", "loss"])]
    assert len(ssd) == 8 and (ssd["sigma_u2"] == 0.0).all() and (ssd["sigma_u2_high"] == 0.0).all()
    retrained = variance[(variance["role"] == "retrained") & (variance["metric"] == "acc")]
    assert (retrained["sigma_u2"] > 0).any()
    wasserstein = pd.read_csv(report / "wasserstein.csv")
    assert set(wasserstein[wasserstein["role"] == "unlearned"]["method"]) == {"ssd", "finetune"}
    complete = wasserstein[~wasserstein["metric"].isin(["time_s", "memory_gib", "utilisation_pct"])]
    assert set(complete["I"]) == {3} and set(complete["designs_A"]) == {3}  # (costs may be null: see above)
    by_seed = pd.read_csv(report / "wasserstein_by_seed.csv")
    assert len(by_seed) == wasserstein["designs_A"].sum() and len(by_seed) >= 3 * len(complete)
    summary = pd.read_csv(report / "summary.csv")
    acc = summary[(summary["method"] == "finetune") & (summary["metric"] == "acc")
                  & (summary["split"] == "retain_test")].iloc[0]
    assert acc["n"] == 6 and 0.5 < acc["mean"] <= 1
    text = (report / "report.md").read_text()
    # I = 3 among the metrics' counts of training seeds (a cost left null by a too-short call may add I = 1 or 2)
    assert re.search(r"fewer than 10 training seeds \(I = (\d, )*3(, \d)*\)", text) and "## Failed jobs (0)" in text
    figures = sorted((report / "figures").glob("*.png"))
    assert {p.name.split("_")[0] for p in figures} == {"designs", "wasserstein", "variance", "seed", "ranks", "forget",
                                                       "curves"}
    for path in figures:
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5000


# ------------------------------------------------------------------------------- the seed_sensitivity preset


def test_seed_sensitivity_preset_nests_distinct_unlearning_seeds():
    from helpers import compose_config
    from omegaconf import OmegaConf

    cfg = compose_config(["experiment=seed_sensitivity", "study.J=4", "seeds.train=2", "study.repeat=1"],
                         return_hydra_config=True)
    assert (cfg.seeds.train, cfg.seeds.unlearn, cfg.seeds.eval) == (2, 9, 9)  # s_u = i·J + j
    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)
    assert params == {"seeds.train": "range(5)", "study.repeat": "range(4)"}  # I = 5 by default
    nine = []  # one composition, each (i, j) set on a copy of it: what `seeds.train=i study.repeat=j` would set
    for i in range(3):
        for j in range(3):
            grid = compose_config(["experiment=seed_sensitivity", "study.I=3", "study.J=3"])
            OmegaConf.update(grid, "seeds.train", i)
            OmegaConf.update(grid, "study.repeat", j)
            nine.append(grid.seeds.unlearn)
    assert len(set(nine)) == 9
    with pytest.raises(Exception, match=r"study\.repeat. option of experiment=seed_sensitivity must be in "
                                        r"0\.\.study\.J-1 = 0\.\.4"):
        OmegaConf.to_container(compose_config(["experiment=seed_sensitivity", "study.repeat=5"]), resolve=True)
    plain = compose_config([])
    assert plain.study is None and plain.seeds.unlearn == plain.seeds.train
    assert compose_config(["+method=finetune"]).method.name == "finetune"


def test_report_of_an_empty_folder_or_only_failed_jobs(tmp_path):
    from unlearnbench.report.build import build_report

    empty = build_report([tmp_path], tmp_path / "report")
    assert (empty.jobs, empty.failed, empty.figures) == ([], [], [])
    assert "No complete job with records was found." in (tmp_path / "report" / "report.md").read_text()
    write_result(tmp_path / "job", job_fields("digits", 0, 0), [], status="failed", error="ValueError: no")
    failed = build_report([tmp_path], tmp_path / "report")
    assert [job["error"] for job in failed.failed] == ["ValueError: no"]
    assert "## Failed jobs (1)" in (tmp_path / "report" / "report.md").read_text()
    assert pd.read_csv(tmp_path / "report" / "summary.csv").empty


def test_job_table_shows_the_main_columns_a_job_has_and_the_last_round():
    from unlearnbench.report.render.console import job_table

    job = {"dataset": "synthetic_letor", "model": "linear_ranker", "scenario": "model_poisoning", "seed_train": 0,
           "seed_unlearn": 0, "seed_eval": 0}
    records = [{"target": "0,1,2", "method": None, "role": "original", "metric": "ndcg@10", "split": None,
                "round": r, "value": v} for r, v in ((0, 0.2), (2, 0.1), (1, 0.9))]
    records += [{"target": "0,1,2", "method": "fedremove", "role": "unlearned", "metric": m, "split": None,
                 "value": v} for m, v in (("ndcg@10", 0.125), ("time_s", 2.0), ("unlisted", 7.0))]
    numerics = {"id": "0123456789ab", "device": "cpu", "cpu": "AMD EPYC", "cpu_capability": "AVX2", "threads": 2,
                "torch": "2.14.1", "precision": "32-true", "world_size": 1}
    title, machine, _, header, rule, original, method = job_table(
        {"job": job, "records": records, "numerics": numerics}).splitlines()
    assert title.startswith("synthetic_letor · linear_ranker")
    assert machine == "on AMD EPYC (AVX2), 2 threads, torch 2.14.1, precision 32-true"
    assert header.split() == ["target", "0,1,2", "NDCG@10", "time", "s"]  # no image or unlisted column
    assert set(rule) == {"-", " "} and len(rule) == len(header)
    assert original.split() == ["(original)", "0.100", "–"]  # the last round, not the last record
    assert method.split() == ["fedremove", "0.125", "2.000"]
