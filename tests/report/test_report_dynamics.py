"""The report's side of unlearning dynamics (issue 58): records with a `step` on fabricated result files. They never
move a final statistic (every CSV, report.md's tables, the figures and the console table are those of the same sweep
without them); dynamics.csv, dynamics_by_seed.csv and dynamics_best.csv hold the values computed here
independently; the figures are drawn; the catalogue's forgetting–utility plane is carried and merged."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from unlearnbench.core.catalogue import Catalogue, Metric, with_core
from unlearnbench.core.files import SchemaError
from unlearnbench.report.build import build_report
from unlearnbench.report.read.collect import load_results
from unlearnbench.report.render.console import job_table
from unlearnbench.runtime.errors import UserError

PNG = b"\x89PNG\r\n\x1a\n"
TRAINING_SEEDS = [0, 1, 2]
UNLEARNING = 2  # unlearning seeds per training seed: u = 10·i + j
METHODS = ["finetune", "neggrad"]
STEPS = [0, 4, 8, 12]
# (metric, split) recorded finally and along the steps: the image task's Δacc and acc rows
ROWS = [("delta_acc", "forget_train"), ("delta_acc", "retain_test"), ("delta_acc", "forget_test"),
        ("acc", "forget_test"), ("acc", "retain_test")]
HEADLINE = [("acc", "forget_test"), ("acc", "retain_test"), ("delta_acc", "forget_test"),
            ("delta_acc", "retain_test"), ("delta_acc", "forget_train")]  # the image catalogue's headline roles
CONFIG = "digits_resnet18_full_class"
SMALL = {"permutations": 50, "forget_permutations": 20, "resamples": 100}
RNG = np.random.default_rng(58)
FINAL = {(role, method, metric, split, i, j): float(RNG.uniform(0, 1))
         for role, method in [("original", None), ("retrained", None), *(("unlearned", m) for m in METHODS)]
         for metric, split in ROWS for i in TRAINING_SEEDS for j in range(UNLEARNING)}
ALONG = {(method, metric, split, step, i, j): float(RNG.uniform(-0.5, 0.5) if metric == "delta_acc"
                                                    else RNG.uniform(0, 1))
         for method in METHODS for metric, split in ROWS for step in STEPS for i in TRAINING_SEEDS
         for j in range(UNLEARNING)}


def catalogue() -> dict:
    from unlearnbench.tasks.image.catalogue import CATALOGUE

    return with_core(CATALOGUE).holding({metric for metric, _ in ROWS}).as_dict()


def job_fields(i: int, u: int) -> dict:
    return {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
            "method": "all", "seed_train": i, "seed_unlearn": u, "seed_eval": u, "strategy": "single",
            "precision": "32-true", "devices": 1}


def record(method: str | None, role: str, metric: str, split: str, value: float, **extra) -> dict:
    return {"target": "3", "method": method, "role": role, "metric": metric, "split": split, "value": value, **extra}


def final_records(i: int, j: int) -> list[dict]:
    return [record(method, role, metric, split, value)
            for (role, method, metric, split, si, sj), value in FINAL.items() if (si, sj) == (i, j)]


def step_records(i: int, j: int) -> list[dict]:
    """The records along the steps of job (i, j), and two a report must leave alone: M_o's at step 0 (a step record
    of another role) and one whose step is no integer."""
    along = [record(method, "unlearned", metric, split, value, step=step, epoch=step / 8)
             for (method, metric, split, step, si, sj), value in ALONG.items() if (si, sj) == (i, j)]
    return [*along, record(None, "original", "acc", "forget_test", 7.0, step=0, epoch=0.0)]


def write_result(folder: Path, job: dict, records: list[dict], status: str = "complete") -> dict:
    folder.mkdir(parents=True)
    content = {"schema": 2, "status": status, "error": None if status == "complete" else "RuntimeError: boom",
               "job": job, "records": records, "catalogue": catalogue()}
    (folder / "result.json").write_text(json.dumps(content))
    return content


def write_sweep(root: Path, steps: bool) -> None:
    """3 training seeds × 2 unlearning seeds of two methods, target 3; a failed job; with `steps`, every job's
    records along the steps interleaved with its final ones."""
    for i in TRAINING_SEEDS:
        for j in range(UNLEARNING):
            records = final_records(i, j)
            if steps:
                along = step_records(i, j)
                records = [r for pair in itertools.zip_longest(records, along) for r in pair if r is not None]
            write_result(root / "sweep" / f"digits_t{i}_u{10 * i + j}", job_fields(i, 10 * i + j), records)
    failed = [record("finetune", "unlearned", "acc", "forget_test", 100.0),
              *([record("finetune", "unlearned", "acc", "forget_test", 50.0, step=4)] if steps else [])]
    write_result(root / "sweep" / "digits_t9_failed", job_fields(9, 90), failed, status="failed")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """(report without step records, report with them), each built from the relative folder `sweep` (so that the
    files name the same folders)."""
    import os

    built = []
    for steps in (False, True):
        root = tmp_path_factory.mktemp("with_steps" if steps else "without_steps")
        write_sweep(root, steps)
        here = Path.cwd()
        os.chdir(root)
        try:
            built.append((build_report([Path("sweep")], Path("report"), **SMALL), root / "report"))
        finally:
            os.chdir(here)
    return built


NEW = re.compile(r"^(dynamics|dynamics_by_seed|dynamics_best)\.csv$|^figures/(dynamics|plane)_")


def without_dynamics(markdown: str) -> list[str]:
    """report.md without its Dynamics section and the new figures' lines."""
    sections = re.split(r"(?m)^(?=## )", markdown)
    kept = [s for s in sections if not s.startswith("## Dynamics")]
    return re.sub(r"!\[(dynamics|plane)_[^\n]*\n\n", "", "".join(kept)).splitlines()


def test_step_records_move_no_file_of_the_final_report(reports):
    (plain, plain_out), (stepped, stepped_out) = reports
    files = {p.relative_to(plain_out).as_posix() for p in plain_out.rglob("*") if p.is_file()}
    new = {p.relative_to(stepped_out).as_posix() for p in stepped_out.rglob("*") if p.is_file()} - files
    assert {n for n in new if not NEW.search(n)} == set()
    assert {f"figures/dynamics_{CONFIG}_{m}_{s}.png" for m, s in HEADLINE} | {f"figures/plane_{CONFIG}.png"} <= new
    assert {"dynamics.csv", "dynamics_by_seed.csv", "dynamics_best.csv"} <= files  # empty in the plain report
    assert pd.read_csv(plain_out / "dynamics.csv").empty and plain.study.dynamics.empty
    assert len(files) > 20
    for name in sorted(files - {"report.md", "results.parquet"}):
        if NEW.search(name):
            continue
        assert (plain_out / name).read_bytes() == (stepped_out / name).read_bytes(), name
    pd.testing.assert_frame_equal(pd.read_parquet(plain_out / "results.parquet"),
                                  pd.read_parquet(stepped_out / "results.parquet"))
    plain_md, stepped_md = ((out / "report.md").read_text() for out in (plain_out, stepped_out))
    assert "## Dynamics" not in plain_md and "## Dynamics" in stepped_md
    assert without_dynamics(plain_md) == without_dynamics(stepped_md)
    assert plain.warnings == [w for w in stepped.warnings if "records[" not in w]


def test_a_malformed_step_is_ignored_with_a_warning_and_other_roles_steps_stay_out(tmp_path):
    records = [*final_records(0, 0), record("finetune", "unlearned", "acc", "forget_test", 0.5, step=-1),
               record("finetune", "unlearned", "acc", "forget_test", 0.5, step="3"),
               record(None, "original", "acc", "forget_test", 7.0, step=0)]
    write_result(tmp_path / "sweep" / "job", job_fields(0, 0), records)
    frame, jobs = load_results([tmp_path / "sweep"])
    assert len(frame) == len(final_records(0, 0)) and frame["value"].max() < 1
    assert [row["role"] for row in jobs[0]["steps"]] == ["original"]
    first = len(final_records(0, 0))
    assert jobs[0]["problems"] == [f"records[{first}].step: '-1' is not an integer ≥ 0; the record is ignored",
                                   f"records[{first + 1}].step: '3' is not an integer ≥ 0; the record is ignored"]
    report = build_report([tmp_path / "sweep"], tmp_path / "report", **SMALL)
    assert report.study.dynamics.empty  # M_o's step record is no method's
    assert any("records[" in w and "is not an integer ≥ 0" in w for w in report.warnings)


def test_the_console_table_ignores_step_records():
    job = job_fields(0, 0)
    plain = {"job": job, "records": final_records(0, 0), "catalogue": catalogue()}
    stepped = {**plain, "records": [*step_records(0, 0), *final_records(0, 0), *step_records(0, 0)]}
    assert job_table(stepped) == job_table(plain)


def per_seed_means(method: str, metric: str, split: str, step: int) -> list[float]:
    return [float(np.mean([ALONG[method, metric, split, step, i, j] for j in range(UNLEARNING)]))
            for i in TRAINING_SEEDS]


def reference_mean(role: str, metric: str, split: str) -> float:
    return float(np.mean([np.mean([FINAL[role, None, metric, split, i, j] for j in range(UNLEARNING)])
                          for i in TRAINING_SEEDS]))


def test_dynamics_csv_holds_the_seed_means_and_t_intervals(reports):
    _, (report, out) = reports
    table = pd.read_csv(out / "dynamics.csv", keep_default_na=False, na_values=[""])
    assert list(table.columns) == ["dataset", "model", "scenario", "target", "method", "metric", "split", "step",
                                   "epoch", "mean", "low", "high", "I", "n", "original_mean", "retrained_mean"]
    assert len(table) == len(METHODS) * len(ROWS) * len(STEPS)
    metrics, splits = (list(dict.fromkeys(column)) for column in zip(*ROWS, strict=True))  # as the jobs wrote them
    rows = sorted(ROWS, key=lambda row: (metrics.index(row[0]), splits.index(row[1])))
    assert list(table[["method", "metric", "split", "step"]].itertuples(index=False, name=None)) == [
        (m, metric, split, step) for m in METHODS for metric, split in rows for step in STEPS]
    for row in table.itertuples():
        seeds = per_seed_means(row.method, row.metric, row.split, row.step)
        mean = float(np.mean(seeds))
        low, high = stats.t.interval(0.95, len(seeds) - 1, loc=mean, scale=stats.sem(seeds))
        assert row.mean == pytest.approx(mean, rel=1e-12)
        assert (row.low, row.high) == pytest.approx((low, high), rel=1e-9)
        assert (row.I, row.n, row.epoch) == (3, 6, pytest.approx(row.step / 8))
        assert row.original_mean == pytest.approx(reference_mean("original", row.metric, row.split), rel=1e-12)
        assert row.retrained_mean == pytest.approx(reference_mean("retrained", row.metric, row.split), rel=1e-12)
        assert row.target == 3 and row.dataset == "digits"
    by_seed = report.study.dynamics_by_seed
    assert len(by_seed) == len(table) * len(TRAINING_SEEDS) and set(by_seed["n"]) == {UNLEARNING}
    chosen = by_seed[(by_seed["method"] == "neggrad") & (by_seed["metric"] == "acc") & (by_seed["step"] == 8)
                     & (by_seed["split"] == "retain_test")]
    assert chosen["mean"].tolist() == pytest.approx(per_seed_means("neggrad", "acc", "retain_test", 8), rel=1e-12)


def best_step(means: dict[int, float], goal: float) -> int:
    return min(means, key=lambda step: (abs(means[step] - goal), step))


def test_best_steps_and_their_spread_over_training_seeds(reports):
    _, (_, out) = reports
    best = pd.read_csv(out / "dynamics_best.csv", keep_default_na=False, na_values=[""])
    assert len(best) == len(METHODS) * len(HEADLINE)
    markdown = (out / "report.md").read_text()
    for row in best.itertuples():
        goal = reference_mean("retrained", row.metric, row.split) if row.metric == "acc" else 0.0
        means = {step: float(np.mean(per_seed_means(row.method, row.metric, row.split, step))) for step in STEPS}
        expected = best_step(means, goal)
        seeds = [best_step({step: per_seed_means(row.method, row.metric, row.split, step)[k] for step in STEPS},
                           goal) for k in range(len(TRAINING_SEEDS))]
        assert (row.goal, row.best_step, row.best_mean) == (pytest.approx(goal, rel=1e-12), expected,
                                                            pytest.approx(means[expected], rel=1e-12))
        assert (row.seed_best_min, row.seed_best_median, row.seed_best_max) == (min(seeds), np.median(seeds),
                                                                                 max(seeds))
        assert (row.last_step, row.last_mean) == (STEPS[-1], pytest.approx(means[STEPS[-1]], rel=1e-12))
        assert (row.steps, row.I, row.best_epoch) == (len(STEPS), 3, pytest.approx(expected / 8))
    section = markdown.split("## Dynamics", 1)[1].split("\n## ", 1)[0]
    assert "optimistic" in section and "dynamics.csv" in section
    table_lines = [line for line in section.splitlines() if line.startswith("| digits")]
    assert len(table_lines) == len(best)
    first = best.iloc[0]
    assert table_lines[0].startswith(f"| digits · resnet18 · full_class — target 3 | {first.method} | ")
    assert f"| {first.best_step} ({first.best_epoch:.3g} ep.) |" in table_lines[0]


def test_the_plane_paths_follow_each_training_seed(reports):
    _, (report, out) = reports
    paths = report.study.dynamics_paths
    assert len(paths) == len(METHODS) * len(TRAINING_SEEDS) * len(STEPS)
    for row in paths.itertuples():
        k = TRAINING_SEEDS.index(row.seed_train)
        assert row.forgetting == pytest.approx(per_seed_means(row.method, "delta_acc", "forget_train", row.step)[k])
        assert row.utility == pytest.approx(per_seed_means(row.method, "delta_acc", "retain_test", row.step)[k])
    for name in [f"dynamics_{CONFIG}_acc_forget_test.png", f"plane_{CONFIG}.png"]:
        assert (out / "figures" / name).read_bytes().startswith(PNG)
        assert f"figures/{name}" in (out / "report.md").read_text()


def test_the_plane_is_carried_merged_in_any_order_and_checked():
    from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
    from unlearnbench.tasks.ranking.catalogue import CATALOGUE as RANKING
    from unlearnbench.tasks.text.benchmarks import muse, tofu
    from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT

    assert IMAGE.plane == ("delta_acc:forget_train", "delta_acc:retain_test") and RANKING.plane is None
    assert TEXT.selected(tofu.SELECTION).plane == ("forget_quality:forget", "model_utility")
    assert TEXT.selected(muse.SELECTION).plane is None  # MUSE records neither axis
    for declared in (IMAGE, TEXT):
        assert all(declared.metric(metric) is not None and (split in declared.splits or split == "")
                   for metric, split in declared.plane_axes())
    assert Catalogue.from_dict(IMAGE.as_dict()).plane == IMAGE.plane
    old = {k: v for k, v in IMAGE.as_dict().items() if k != "plane"}  # a result from before planes
    assert Catalogue.from_dict(old).plane is None
    assert IMAGE.holding({"delta_acc"}).plane == IMAGE.plane and IMAGE.holding({"acc"}).plane is None
    assert with_core(IMAGE).plane == IMAGE.plane
    other = Catalogue((Metric("x", "x", 0.0), Metric("y", "y", 0.0)), plane=("x", "y"))
    for order in itertools.permutations([IMAGE, other, RANKING]):
        assert Catalogue.union(order).plane == ("delta_acc:forget_train", "delta_acc:retain_test")
    assert Catalogue.union([RANKING, other]).plane == ("x", "y")
    for wrong in (["x"], ["x", 3], "x:y", ["x", ""]):
        with pytest.raises(SchemaError, match="not a metric catalogue"):
            Catalogue.from_dict({**old, "plane": wrong})
    with pytest.raises(UserError, match="the 'plane' option"):
        Catalogue(plane=("only one",))
