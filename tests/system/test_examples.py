"""Per-example outputs (examples.parquet), the forget seed, and the report's forgetting-quality tables built from
them (the formulas themselves: tests/report/test_forgetting.py)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import shutil
import sys
import unittest.mock
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import REPO, TINY, drawing_only, results, run_cli, run_in_process, script

from unlearnbench.report import build
from unlearnbench.tasks.image.metrics.examples import ImageExamples, confidence_and_loss

pytestmark = pytest.mark.usefixtures("one_thread")
# gradient ascent: an unlearned pool of its own that is not M_r, at a tenth of fine-tuning's cost (5 steps on D_f)
METHODS = "methods=[gradient_ascent,ssd,retrain]"
# a quarter of digits to train on (450 images): every M_o and M_r 4× cheaper; M_o of seed 0 is test_image_during.py's
QUARTER = [*TINY, "dataset.test_fraction=0.75"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, shared_cache) -> Path:
    """experiment=forget_quality at its smallest: A(0) and A(1) with 3 unlearning seeds each, B with 3 training
    seeds (the third is B's own job): 7 jobs on one forget set, on a quarter of digits. Its own report a quick one
    (QUICK_REPORT: no figures): `make forget-quality`'s report of it draws the forgetting-quality figure (tested
    below)."""
    tmp = tmp_path_factory.mktemp("forget_quality")
    done = run_cli(["experiment=forget_quality", "study.I=2", "study.J=3", "study.B=3", METHODS, *QUARTER,
                    f"paths.cache_dir={shared_cache}"], tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "sweep"


def examples_of(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "examples.parquet")


def test_conf_is_the_logit_scaled_confidence_and_finite_at_logit_gaps_of_1000():
    logits = torch.tensor([[1000.0, 0.0, 0.0], [0.0, 1000.0, -1000.0], [2.0, 1.0, 0.5]])
    labels = torch.tensor([0, 0, 2])
    conf, loss = confidence_and_loss(logits, labels)
    assert np.isfinite(conf).all() and np.isfinite(loss).all()
    assert conf[0] == pytest.approx(1000 - math.log(2), abs=1e-9)
    assert conf[1] == pytest.approx(-1000.0, abs=1e-9) and loss[1] == pytest.approx(1000.0, abs=1e-9)
    p = np.exp([2.0, 1.0, 0.5]) / np.exp([2.0, 1.0, 0.5]).sum()
    assert conf[2] == pytest.approx(math.log(p[2]) - math.log(p[0] + p[1]), abs=1e-12)
    assert loss[2] == pytest.approx(-math.log(p[2]), abs=1e-12)


@pytest.mark.processes
def test_every_job_holds_the_same_examples_and_one_forget_set(sweep):
    folders = sorted(p.parent for p in sweep.glob("*/result.json"))
    assert len(folders) == 7
    chosen = set()
    for folder in folders:
        rows = examples_of(folder)
        assert list(rows.columns) == ["target", "role", "method", "split", "index", "label", "conf", "loss", "pred"]
        models = {(role, method if isinstance(method, str) else None) for role, method in
                  zip(rows["role"], rows["method"], strict=True)}
        assert models == {("original", None), ("retrained", None), ("unlearned", "gradient_ascent"),
                          ("unlearned", "ssd"), ("unlearned", "retrain")}
        retrained = rows[rows["role"] == "retrained"]
        chosen.add(tuple(tuple(retrained[retrained["split"] == s]["index"]) for s in
                         ("forget_train", "retain_train", "retain_test")))
        assert np.isfinite(rows["conf"]).all()
        result = json.loads((folder / "result.json").read_text())
        assert result["job"]["seed_forget"] == 0
    assert len(chosen) == 1  # other training and unlearning seeds, one D_f and the same samples of D_r and D'_r
    forget, retain, test = next(iter(chosen))
    assert len(forget) == 45 and len(retain) == 405 and len(test) == 1000  # 10% of 450; all of D_r; 1,000 of 1,347
    assert not set(forget) & set(retain)


@pytest.mark.processes
def test_the_report_scores_each_pool_and_the_gold_standard_as_constructed(sweep):
    quality = pd.read_csv(sweep / "report" / "forget_quality.csv")
    pools = set(zip(quality["design"], quality["seed_train"].fillna(-1).astype(int), strict=True))
    assert pools == {("A", 0), ("A", 1), ("B", -1)}
    assert (quality["n_models"] == 3).all() and (quality["epsilon_cap"] == 1).all()  # ⌈ln 2⌉
    gold = quality[quality["method"] == "retrain"]
    assert (gold["forget_quality"] == 1.0).all() and (gold["score"] == 1.0).all()  # M_u = M_r: ε = 0 everywhere
    assert quality["forget_quality"].between(0, 1).all() and quality["lira_auc"].between(0, 1).all()
    assert set(quality["method"]) == {"gradient_ascent", "ssd", "retrain"}
    by_example = pd.read_csv(sweep / "report" / "forget_quality_by_example.csv")
    assert len(by_example) == 45 * len(quality) and by_example["epsilon"].between(0, 50).all()
    assert (by_example[by_example["method"] == "retrain"]["epsilon"] == 0).all()
    report = (sweep / "report" / "report.md").read_text()
    assert "Forgetting quality per example" in report  # its figure: the `make forget-quality` test's report


@pytest.mark.processes
def test_a_damaged_examples_file_fails_its_job_with_a_reason_and_another_forget_set_is_left_out(sweep, tmp_path):
    from unlearnbench.report.build import build_report

    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("report"))
    folders = sorted(p.parent for p in copy.glob("*/result.json"))
    damaged, moved = folders[1], folders[2]
    (damaged / "examples.parquet").write_bytes((damaged / "examples.parquet").read_bytes()[:500])
    rows = examples_of(moved)
    rows.loc[rows["split"] == "forget_train", "index"] += 1  # another D_f
    rows.to_parquet(moved / "examples.parquet", index=False)
    built = build_report([copy], copy / "report", figures=False, forget_permutations=5)
    failed = {Path(job["folder"]).name: job["error"] for job in built.failed}
    assert list(failed) == [damaged.name] and failed[damaged.name].startswith("examples.parquet: ")
    assert any(moved.name in w and "forget set differs" in w for w in built.warnings)
    quality = pd.read_csv(copy / "report" / "forget_quality.csv")
    pools = quality.groupby(["design", quality["seed_train"].fillna(-1).astype(int)])["n_models"].unique()
    assert {pool: list(n) for pool, n in pools.items()} == {("A", 1): [3], ("B", -1): [3]}  # A(0) kept one job


def test_examples_are_published_whole_or_not_at_all(tmp_path, monkeypatch):
    table = ImageExamples(per_split=10, fingerprint="x")
    table.columns = {"target": ["3"], "role": ["original"], "method": [None], "split": ["forget_train"],
                     "index": [np.array([4])], "label": [np.array([3])], "conf": [np.array([1.5])],
                     "loss": [np.array([0.2])], "pred": [np.array([3])]}
    path = tmp_path / "examples.parquet"
    table.write(path)
    before = path.read_bytes()

    def crash(self, target, **kwargs):
        Path(target).write_bytes(b"PAR1 half a file")
        raise RuntimeError("killed while writing")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", crash)
    with pytest.raises(RuntimeError):
        table.write(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["examples.parquet"]
    path.unlink()
    with pytest.raises(RuntimeError):
        table.write(path)
    assert not list(tmp_path.iterdir())


def records_of(outcome) -> list[tuple]:
    costs = {"time_s", "memory_gib", "utilisation_pct"}
    return [(r["target"], r["method"], r["role"], r["metric"], r["split"], r["value"]) for r in outcome.records
            if r["metric"] not in costs]


def test_the_forget_seed_defaults_to_the_unlearning_seed_and_examples_leave_the_records_alone(tmp_path, shared_cache):
    # gradient ascent: a method that draws from its generator (its batch order) after the examples of M_o and M_r
    # are computed, at a tenth of fine-tuning's cost
    base = [*QUARTER, "scenario=random_sample", "seeds.train=0"]
    default = run_in_process([*base, "seeds.unlearn=1"], tmp_path, ["gradient_ascent"], shared_cache)
    assert default.error is None and len(default.examples)
    explicit = run_in_process([*base, "seeds.unlearn=1", "seeds.forget=1", "evaluation.examples=false"], tmp_path,
                              ["gradient_ascent"], shared_cache)
    assert explicit.examples is None
    assert records_of(explicit) == records_of(default)
    other = run_in_process([*base, "seeds.unlearn=1", "seeds.forget=2"], tmp_path, ["gradient_ascent"], shared_cache)
    def forget_set(outcome) -> list[int]:
        return outcome.examples.chosen["0.1"]["forget_train"].tolist()

    assert forget_set(other) != forget_set(default) and len(forget_set(other)) == len(forget_set(default))
    again = run_in_process([*base, "seeds.unlearn=5", "seeds.forget=1"], tmp_path, ["gradient_ascent"], shared_cache)
    assert forget_set(again) == forget_set(default)  # another unlearning seed, the same forget seed: one D_f


@pytest.mark.processes
def test_results_carry_the_forget_seed(sweep):
    fields = {name: result["job"] for name, result in results(sweep).items()}
    assert {job["seed_forget"] for job in fields.values()} == {0}
    assert {(job["seed_train"], job["seed_unlearn"]) for job in fields.values()} == {
        (0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6)}


def fabricated_sweep(rng: np.random.Generator, forget: int = 20) -> tuple[list[dict], dict, pd.DataFrame]:
    """Jobs of training seeds 0 and 1 (four unlearning seeds each) and 2, 3 (one each), without training: `det`
    gives one M_u per original model (its conf depends on the training seed alone), `retrain` is M_r itself, and
    one more job of training seed 1 holds another forget set."""
    jobs, examples, records = [], {}, []
    cells = [(0, j) for j in range(4)] + [(1, 4 + j) for j in range(4)] + [(2, 8), (3, 9), (1, 10)]
    for train, unlearn in cells:
        folder = f"/sweep/digits_t{train}_u{unlearn}"
        jobs.append({"folder": folder, "status": "complete", "dataset": "digits", "model": "resnet18",
                     "scenario": "random_sample", "seed_train": train, "seed_unlearn": unlearn, "seed_eval": unlearn})
        index = np.arange(forget) + (1 if unlearn == 10 else 0)
        retrained = rng.normal(0, 1, forget)
        models = {("retrained", None): retrained, ("unlearned", "retrain"): retrained,
                  ("unlearned", "det"): np.random.default_rng(train).normal(3, 1, forget)}
        examples[folder] = pd.DataFrame([{"target": "0.1", "role": role, "method": method, "split": "forget_train",
                                          "index": int(i), "label": int(i) % 10, "conf": float(c)}
                                         for (role, method), conf in models.items()
                                         for i, c in zip(index, conf, strict=True)])
        for (role, method) in models:
            for split in ("retain_train", "retain_test"):
                records.append({"folder": folder, "status": "complete", "target": "0.1", "role": role,
                                "method": method, "metric": "acc", "split": split, "value": 0.9})
    return jobs, examples, pd.DataFrame(records)


def test_a_point_pool_scores_at_the_cap_in_A_and_a_foreign_forget_set_is_left_out():
    from unlearnbench.report.compute.forget_quality import forget_quality
    from unlearnbench.report.render.words import joined, text

    jobs, examples, frame = fabricated_sweep(np.random.default_rng(0))
    found = forget_quality(jobs, examples, frame, ["dataset", "model", "scenario"], permutations=20)
    quality = found.quality.set_index(["method", "design", found.quality["seed_train"].fillna(-1)])
    assert set(quality.index) == {(m, d, s) for m in ("det", "retrain") for d, s in (("A", 0), ("A", 1), ("B", -1))}
    assert quality.loc[("det", "A", 1), "n_models"] == 4 and quality.loc[("det", "B", -1), "n_models"] == 4
    for seed in (0, 1):
        point = quality.loc[("det", "A", seed)]
        assert point["forget_quality"] == 0.0 and "point" in joined(point["note"]) and point["distinguishable"]
    assert "point" not in joined(quality.loc[("det", "B", -1), "note"])
    assert (found.by_example[(found.by_example["method"] == "det") & (found.by_example["design"] == "A")]
            ["epsilon"] == 50).all()
    gold = quality.xs("retrain")
    assert (gold["forget_quality"] == 1.0).all() and (gold["score"] == 1.0).all()
    left_out = [text(note) for note in found.left_out]
    assert len(left_out) == 1 and "digits_t1_u10" in left_out[0] and "1 of 11 jobs" in left_out[0]
    across = found.across.set_index("method")
    assert across.loc["det", "designs_A"] == 2 and across.loc["det", "forget_quality_A_mean"] == 0.0
    assert across.loc["det", "forget_quality_B"] == quality.loc[("det", "B", -1), "forget_quality"]


def test_a_pool_that_cannot_be_scored_is_a_warning_and_the_others_are_scored():
    from unlearnbench.report.compute.forget_quality import forget_quality
    from unlearnbench.report.render.words import text

    jobs, examples, frame = fabricated_sweep(np.random.default_rng(1))
    rows = examples["/sweep/digits_t0_u0"]
    rows.loc[rows["method"] == "det", "conf"] = 1e12  # finite, but no logit-scaled confidence
    found = forget_quality(jobs, examples, frame, ["dataset", "model", "scenario"], permutations=5)
    problems = [w for w in map(text, found.left_out) if "not scored" in w]
    assert len(problems) == 2 and all("method det" in w and "1e+09" in w for w in problems)  # A(0) and B
    assert {("det", "A", 1), ("retrain", "A", 0), ("retrain", "B", None)} <= {
        (r.method, r.design, None if pd.isna(r.seed_train) else int(r.seed_train)) for r in found.quality.itertuples()}


@pytest.mark.processes
def test_make_forget_quality_writes_the_docs_table_and_figure_from_the_sweep(sweep, tmp_path):
    """`make forget-quality`'s command on this module's sweep (`--reuse`, a copy of it), into a copy of the page."""
    table_script = script(REPO / "scripts" / "forget_quality_table.py")
    begin, end = table_script.BEGIN, table_script.END
    shutil.copytree(sweep, tmp_path / "sweep", ignore=shutil.ignore_patterns("report"))
    (tmp_path / "docs").mkdir()
    shutil.copyfile(REPO / "docs" / "forget-quality.md", tmp_path / "docs" / "forget-quality.md")
    argv = ["forget_quality_table.py", "--docs", "--docs-dir", str(tmp_path / "docs"), "--reuse", "--minutes", "3.2",
            "--out", str(tmp_path / "sweep")]
    printed = io.StringIO()
    quick = functools.partial(build.build_report, forget_permutations=10)  # as the sweep's own (QUICK_REPORT)
    # the one figure the script copies is drawn; the report's others are not (two thirds of its time)
    with contextlib.redirect_stdout(printed), unittest.mock.patch.object(sys, "argv", argv), \
            unittest.mock.patch.object(build, "build_report", quick), drawing_only("forget_quality"):
        table_script.main()
    before, after = ((folder / "forget-quality.md").read_text() for folder in (REPO / "docs", tmp_path / "docs"))
    block = after[after.index(begin):after.index(end) + len(end)]
    assert after.replace(block, "") == before.replace(before[before.index(begin):before.index(end) + len(end)], "")
    lead = " ".join(block.split("\n\n")[0].split())
    assert "2 pools A(i) of N = 3 unlearning seeds, pool B of N = 3 training seeds" in lead
    assert "regenerated by `make forget-quality`. The sweep took 3 minutes there." in lead
    lines = [line for line in block.splitlines() if line.startswith("|")]
    assert lines[0] == "| " + " | ".join(table_script.HEADER) + " |" and len(lines) == 2 + 3
    assert "\n".join(lines) in printed.getvalue()  # the table it printed
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in lines[2:]}
    assert set(rows) == {"gradient_ascent", "ssd", "retrain"}
    gold = rows["retrain"]
    assert gold[1] == "1.000 ± 0.000 [1.000, 1.000]" and gold[2] == "1.000" and gold[4] == "1.000 / 1.000"
    figure = tmp_path / "sweep" / "report" / "figures" / "forget_quality_digits_resnet18_random_sample.png"
    assert (tmp_path / "docs" / "forget_quality.png").read_bytes() == figure.read_bytes()
    assert f"updated in {tmp_path / 'docs'}: forget-quality.md, forget_quality.png" in printed.getvalue()
