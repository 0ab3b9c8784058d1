"""The report's training curves (unlearnbench.report.read.curves and the `curves_<config>.png` figure) on fabricated
result files with known curves: de-duplication of cached models, values, malformed curves, results without any."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from unlearnbench.report.build import build_report
from unlearnbench.report.read.curves import curve_table, job_curves, parse_curve
from unlearnbench.report.render import figures
from unlearnbench.runtime.errors import UserError

PNG = b"\x89PNG\r\n\x1a\n"
PERMUTATIONS = 50
TRAINING_SEEDS = [0, 1, 2]
UNLEARNING_SEEDS = [10, 11]
FAILED_SEED = 3  # a failed job whose M_o diverged after its first epoch
COLUMNS = ["dataset", "model", "scenario", "folder", "curve", "role", "target", "method", "seed", "epoch", "loss",
           "train_acc", "lr"]
FIGURE = "curves_digits_resnet18_full_class.png"
# Malformed curves written into job (2, 11) beside its good ones (curves[0..2]): each skipped with this reason.
MALFORMED = [("not a curve", "curves[3]: 'not a curve' is not an object"),
             ({"model": "original", "seed": 5, "epoch": [1, 2], "loss": [1.0], "train_acc": [0.1, 0.2],
               "lr": [0.1, 0.1]}, "curves[4]: loss has 1 values for 2 epochs"),
             ({"model": "original", "seed": 5, "epoch": [1, 2], "loss": [1.0, 0.5], "train_acc": [0.1, "0.2"],
               "lr": [0.1, 0.1]}, "curves[5]: train_acc: '0.2' is not a number or null"),
             ({"model": "teacher", "seed": 5, "epoch": [1], "loss": [1.0], "train_acc": [0.1], "lr": [0.1]},
              "curves[6]: model: 'teacher' is not one of original, retrained, unlearned")]


def job_fields(seed_train: int, seed_unlearn: int, dataset: str = "digits") -> dict:
    return {"task": "image_classification", "dataset": dataset, "model": "resnet18", "scenario": "full_class",
            "method": "all", "seed_train": seed_train, "seed_unlearn": seed_unlearn, "seed_eval": seed_unlearn,
            "strategy": "single", "precision": "32-true", "devices": 1}


def record(method: str | None, role: str, value: float) -> dict:
    return {"target": "3", "method": method, "role": role, "metric": "acc", "split": "forget_test", "value": value}


def original(i: int) -> dict:
    """M_o of training seed i: losses spanning a factor of 30 (a log axis)."""
    return {"epoch": [1, 2, 3, 4], "loss": [3.0 + 0.01 * i, 1.0, 0.3, 0.1],
            "train_acc": [0.3 + 0.01 * i, 0.6, 0.8, 0.9], "lr": [0.1, 0.1, 0.01, 0.01]}


def retrained(u: int) -> dict:
    """M_r of unlearning seed u; seed 11's last loss overflowed (written as Infinity)."""
    last = math.inf if u == 11 else 1.0
    return {"epoch": [1, 2, 3, 4], "loss": [2.0 + 0.1 * u, 1.5, 1.2, last], "train_acc": [0.2, 0.4, 0.6, 0.7],
            "lr": [0.05, 0.05, 0.05, 0.005]}


def unlearned(i: int, u: int) -> dict:
    """The finetune run of job (i, u): it starts from M_o of seed i, so each job's differs."""
    return {"epoch": [1, 2], "loss": [0.5 + 0.1 * i + 0.01 * u, 0.4], "train_acc": [0.9, 0.95], "lr": [0.01, 0.001]}


def curve(model: str, seed: int, values: dict, target: str | None = None, method: str | None = None,
          cached: bool = False) -> dict:
    return {"model": model, "target": target, "method": method, "seed": seed, "cached": cached, **values}


def write_result(folder: Path, job: dict, records: list[dict], curves: list | None = None, status: str = "complete",
                 error: str | None = None) -> None:
    folder.mkdir(parents=True)
    content = {"schema": 1, "status": status, "error": error, "job": job, "records": records}
    if curves is not None:
        content["curves"] = curves
    (folder / "result.json").write_text(json.dumps(content))


def grid_records() -> list[dict]:
    return [record(None, "original", 0.9), record(None, "retrained", 0.0), record("finetune", "unlearned", 0.1)]


def job_curve_list(i: int, u: int) -> list:
    """What job (i, u) writes: M_o (cached after its first job), M_r of target 3 (cached after the first training
    seed), the finetune run."""
    return [curve("original", i, original(i), cached=u != UNLEARNING_SEEDS[0]),
            curve("retrained", u, retrained(u), target="3", cached=i != TRAINING_SEEDS[0]),
            curve("unlearned", u, unlearned(i, u), target="3", method="finetune")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """3 training seeds × 2 unlearning seeds, one job with malformed curves, one failed job with a diverged M_o."""
    root = tmp_path_factory.mktemp("curves")
    for i in TRAINING_SEEDS:
        for u in UNLEARNING_SEEDS:
            curves = job_curve_list(i, u) + ([c for c, _ in MALFORMED] if (i, u) == (2, 11) else [])
            write_result(root / "sweep" / f"digits_t{i}_u{u}", job_fields(i, u), grid_records(), curves)
    diverged = {"epoch": [1, 2, 3], "loss": [2.0, None, None], "train_acc": [0.1, None, None], "lr": [0.1] * 3}
    write_result(root / "sweep" / f"digits_t{FAILED_SEED}_failed", job_fields(FAILED_SEED, 10), [],
                 [curve("original", FAILED_SEED, diverged)], status="failed", error="RuntimeError: loss is nan")
    report = build_report([root / "sweep"], root / "report", permutations=PERMUTATIONS)
    return report, root / "report"


def one_curve(table: pd.DataFrame, role: str, seed: int, **match) -> pd.DataFrame:
    """The rows of the one curve of `role` and `seed` that has a row matching `match`."""
    rows = table[(table["role"] == role) & (table["seed"] == seed)]
    for column, value in match.items():
        rows = rows[rows[column] == value]
    assert rows["curve"].nunique() == 1, (role, seed, match)
    return table[table["curve"] == rows["curve"].iloc[0]].sort_values("epoch")


def test_cached_curves_are_kept_once_with_their_first_job(built):
    report, _ = built
    table = report.study.curves
    assert list(table.columns) == COLUMNS
    counts = table.groupby("role")["curve"].nunique().to_dict()
    assert counts == {"original": len(TRAINING_SEEDS) + 1, "retrained": len(UNLEARNING_SEEDS),
                      "unlearned": len(TRAINING_SEEDS) * len(UNLEARNING_SEEDS)}
    assert len(table) == len(TRAINING_SEEDS) * 4 + 3 + len(UNLEARNING_SEEDS) * 4 + 6 * 2
    assert sorted(table["curve"].unique()) == list(range(12))
    first_jobs = {(r.role, r.seed): Path(r.folder).name for r in table[table["role"] != "unlearned"].itertuples()}
    assert first_jobs == {("original", 0): "digits_t0_u10", ("original", 1): "digits_t1_u10",
                          ("original", 2): "digits_t2_u10", ("original", 3): "digits_t3_failed",
                          ("retrained", 10): "digits_t0_u10", ("retrained", 11): "digits_t0_u11"}
    assert set(table["dataset"]) == {"digits"} and set(table["model"]) == {"resnet18"}
    assert list(table["role"].drop_duplicates()) == ["original", "retrained", "unlearned"]


def test_the_values_are_those_written(built):
    table = built[0].study.curves
    for i in TRAINING_SEEDS:
        rows = one_curve(table, "original", i)
        assert rows["epoch"].tolist() == [1, 2, 3, 4]
        for series in ("loss", "train_acc", "lr"):
            assert rows[series].tolist() == pytest.approx(original(i)[series], rel=1e-12)
        assert set(rows["target"]) == {""} and set(rows["method"]) == {""}
    diverged = one_curve(table, "original", FAILED_SEED)
    assert diverged["loss"].iloc[0] == 2.0 and diverged["loss"].iloc[1:].isna().all()
    assert diverged["lr"].tolist() == [0.1] * 3
    steady, overflowed = one_curve(table, "retrained", 10), one_curve(table, "retrained", 11)
    assert steady["loss"].tolist() == pytest.approx([3.0, 1.5, 1.2, 1.0], rel=1e-12)
    assert overflowed["loss"].iloc[:3].tolist() == pytest.approx([3.1, 1.5, 1.2], rel=1e-12)
    assert math.isnan(overflowed["loss"].iloc[3])  # Infinity in the file: a missing value
    assert set(steady["target"]) == {"3"}
    for i in TRAINING_SEEDS:
        for u in UNLEARNING_SEEDS:
            rows = one_curve(table, "unlearned", u, method="finetune", loss=unlearned(i, u)["loss"][0])
            assert rows["epoch"].tolist() == [1, 2] and rows["lr"].tolist() == [0.01, 0.001]
            assert Path(rows["folder"].iloc[0]).name == f"digits_t{i}_u{u}"


def test_curves_csv_holds_the_table(built):
    report, out = built
    written = pd.read_csv(out / "curves.csv", keep_default_na=False, na_values=[""], dtype={"target": str})
    assert list(written.columns) == COLUMNS
    assert len(written) == len(report.study.curves)
    assert written["loss"].tolist() == pytest.approx(report.study.curves["loss"].tolist(), nan_ok=True)
    assert written["seed"].tolist() == report.study.curves["seed"].tolist()


def test_malformed_curves_give_one_warning_naming_the_job_and_the_rest_is_drawn(built):
    report, out = built
    (warning,) = [w for w in report.warnings if "training curve" in w]
    assert warning.startswith("ignored 4 malformed training curves in 1 result file (the other curves are drawn): ")
    for _, reason in MALFORMED:
        assert f"digits_t2_u11: {reason}" in warning
    assert not (report.study.curves["seed"] == 5).any()
    assert one_curve(report.study.curves, "unlearned", 11, loss=unlearned(2, 11)["loss"][0])["folder"].str.endswith(
        "digits_t2_u11").all()  # the malformed job's good curves are kept
    assert all(job["status"] == "complete" for job in report.jobs if "_u" in Path(job["folder"]).name)
    assert f"- {warning}" in (out / "report.md").read_text()


def test_the_figure_is_a_png_listed_in_the_report(built):
    report, out = built
    path = out / "figures" / FIGURE
    assert path.read_bytes()[:8] == PNG
    assert path in report.figures
    assert f"![{path.stem}](figures/{FIGURE})" in (out / "report.md").read_text()
    assert not [w for w in report.warnings if "figures (curves)" in w]


def drawn(study, folder: Path, monkeypatch) -> dict[str, Figure]:
    """{file name: the figure} of every curves figure of `study`."""
    saved = {}
    save = figures._save

    def keep(figure, path, handles=None):
        saved[path.name] = figure
        return save(figure, path, handles)

    monkeypatch.setattr(figures, "_save", keep)
    paths = figures.curves(study, folder)
    assert [p.name for p in paths] == list(saved)
    return saved


def curve_lines(axis) -> list:
    return [line for line in axis.lines if line.get_linestyle() != "None"]


def crosses(axis) -> list[tuple[float, float]]:
    """The (epoch, value) points marked with a cross: the last values before a diverged model's gap."""
    return [(float(x), float(y)) for line in axis.lines if line.get_marker() == "x"
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]


def test_the_figure_has_a_row_per_model_and_a_line_per_curve(built, tmp_path, monkeypatch):
    (figure,) = drawn(built[0].study, tmp_path, monkeypatch).values()
    axes = figure.axes
    assert len(axes) == 9
    rows = [axes[3 * r: 3 * r + 3] for r in range(3)]
    assert [row[0].get_ylabel() for row in rows] == ["M_o: a line per training seed",
                                                     "M_r: a line per target and unlearning seed",
                                                     "methods: a line per run"]
    assert [a.get_title() for a in rows[0]] == ["training loss (1 with missing values)",
                                                "training accuracy (1 with missing values)", "learning rate"]
    assert [len(curve_lines(a)) for row in rows for a in row] == [4] * 3 + [2] * 3 + [6] * 3
    assert crosses(rows[0][0]) == [(1.0, 2.0)] and crosses(rows[0][1]) == [(1.0, 0.1)]  # M_o of the failed job
    assert crosses(rows[1][0]) == [(3.0, 1.2)] and crosses(rows[1][1]) == []  # M_r 11: its last loss overflowed
    assert all(crosses(a) == [] for a in rows[2])
    assert [a.get_yscale() for a in (rows[0][0], rows[1][0], rows[2][0])] == ["log", "linear", "linear"]
    assert rows[1][0].get_title() == "training loss (1 with missing values)"
    assert rows[0][1].get_ylim() == (-0.02, 1.02)
    legend = [t.get_text() for t in rows[0][2].get_legend().get_texts()]
    assert legend == [f"training seed {s}" for s in [*TRAINING_SEEDS, FAILED_SEED]]
    assert [t.get_text() for t in rows[2][2].get_legend().get_texts()] == ["finetune"]
    seed_colours = {line.get_color() for line in curve_lines(rows[0][0])}
    assert len(seed_colours) == 4  # a colour per training seed


def test_many_seeds_draw_thin_lines_and_name_only_the_ends_of_the_colour_map(tmp_path, monkeypatch):
    for i in range(30):
        write_result(tmp_path / "sweep" / f"digits_t{i}", job_fields(i, i), grid_records(),
                     [curve("original", i, original(i))])
    report = build_report([tmp_path / "sweep"], tmp_path / "report", figures=False, permutations=PERMUTATIONS)
    (figure,) = drawn(report.study, tmp_path, monkeypatch).values()
    loss, _, lr = figure.axes
    assert len(curve_lines(loss)) == 30 and {line.get_linewidth() for line in curve_lines(loss)} == {0.7}
    assert [t.get_text() for t in lr.get_legend().get_texts()] == ["training seed 0", "… training seed 29"]
    assert len({tuple(line.get_color()) for line in curve_lines(loss)}) == 30


def test_results_without_curves_draw_no_curves_figure_and_warn_nothing(tmp_path):
    for i in TRAINING_SEEDS:
        for u in UNLEARNING_SEEDS:
            curves = [] if (i, u) == (0, 10) else None  # an empty list, or no key (results before curves)
            write_result(tmp_path / "sweep" / f"digits_t{i}_u{u}", job_fields(i, u), grid_records(), curves)
    report = build_report([tmp_path / "sweep"], tmp_path / "report", permutations=PERMUTATIONS)
    assert report.study.curves.empty and list(report.study.curves.columns) == COLUMNS
    assert report.figures and not [p for p in report.figures if p.name.startswith("curves_")]
    assert not list((tmp_path / "report" / "figures").glob("curves_*"))
    assert not [w for w in report.warnings if "curve" in w]
    assert (tmp_path / "report" / "curves.csv").read_text().strip() == ",".join(COLUMNS)


def test_a_stale_curves_figure_goes_when_the_curves_do(tmp_path):
    write_result(tmp_path / "with" / "digits_t0", job_fields(0, 10), grid_records(), job_curve_list(0, 10))
    write_result(tmp_path / "without" / "digits_t0", job_fields(0, 10), grid_records())
    write_result(tmp_path / "without" / "digits_t1", job_fields(1, 11), grid_records())
    out = tmp_path / "report"
    build_report([tmp_path / "with"], out, permutations=PERMUTATIONS)
    assert (out / "figures" / FIGURE).is_file()
    build_report([tmp_path / "without"], out, permutations=PERMUTATIONS)
    assert not (out / "figures" / FIGURE).exists()


def test_one_job_per_configuration_draws_a_figure_each(tmp_path):
    """No seed spread (no other figure), yet the curves are drawn: one figure per configuration."""
    for dataset in ("digits", "cifar10"):
        write_result(tmp_path / "sweep" / dataset, job_fields(0, 10, dataset), grid_records(),
                     job_curve_list(0, 10))
    report = build_report([tmp_path / "sweep"], tmp_path / "report", permutations=PERMUTATIONS)
    assert not report.study.has_seed_spread and report.study.wants_figures
    assert sorted(p.name for p in report.figures) == ["curves_cifar10_resnet18_full_class.png", FIGURE]
    assert report.study.curves.groupby("dataset")["curve"].nunique().to_dict() == {"cifar10": 3, "digits": 3}


def test_a_curves_field_that_is_not_a_list_costs_only_its_curves(tmp_path):
    write_result(tmp_path / "sweep" / "digits_t0", job_fields(0, 10), grid_records(), "oops")
    write_result(tmp_path / "sweep" / "digits_t1", job_fields(1, 10), grid_records(), job_curve_list(1, 10))
    report = build_report([tmp_path / "sweep"], tmp_path / "report", permutations=PERMUTATIONS)
    assert not report.failed
    assert [w for w in report.warnings if "curve" in w] == [
        "ignored 1 malformed training curve in 1 result file (the other curves are drawn): digits_t0: curves: "
        "'oops' is not a list"]
    assert set(report.study.curves["seed"]) == {1, 10}
    assert (tmp_path / "report" / "figures" / FIGURE).is_file()


def test_equal_identities_with_other_values_are_two_curves():
    """Two jobs whose M_o share a seed but not their values (another learning rate): both kept, in folder order."""
    jobs = [{"folder": f"sweep/job{k}", "dataset": "digits", "curves": [
        curve("original", 0, {**original(0), "lr": [lr] * 4})]} for k, lr in enumerate((0.1, 0.2, 0.1))]
    table, warnings = curve_table(jobs, ["dataset"])
    assert warnings == []
    assert table.groupby("curve")["lr"].first().tolist() == [0.1, 0.2]
    assert table.groupby("curve")["folder"].first().tolist() == ["sweep/job0", "sweep/job1"]


def test_a_well_formed_curve_is_read_with_its_missing_values():
    parsed = parse_curve({"model": "retrained", "target": 3, "method": None, "seed": 7, "epoch": [1, 2],
                          "loss": [1.0, math.nan], "train_acc": [0.5, None], "cached": True, "extra": "ignored"})
    assert parsed == ("retrained", "3", "", 7, (1, 2), (1.0, None), (0.5, None), (None, None))  # no lr: missing


@pytest.mark.parametrize(("bad", "reason"), [
    ({"seed": True}, "seed: True is not an integer"),
    ({"seed": "7"}, "seed: '7' is not an integer"),
    ({"epoch": "1, 2"}, "epoch: '1, 2' is not a list of integers"),
    ({"epoch": [1, 2.5]}, "epoch: [1, 2.5] is not a list of integers"),
    ({"loss": [1.0, True]}, "loss: True is not a number or null"),
    ({"lr": 0.1}, "lr: 0.1 is not a list"),
    ({"target": [3]}, "target: [3] is not a string or an integer or null"),
    ({"method": 4}, "method: 4 is not a string or null"),
])
def test_a_malformed_curve_is_skipped_with_its_reason(bad, reason):
    good = curve("original", 0, {"epoch": [1, 2], "loss": [1.0, 0.5], "train_acc": [0.1, 0.2], "lr": [0.1, 0.1]})
    with pytest.raises(UserError, match=f"^{re.escape(reason)}$"):
        parse_curve({**good, **bad})
    parsed, problems = job_curves({"folder": "x", "curves": [good, {**good, **bad}]})
    assert len(parsed) == 1 and problems == [f"curves[1]: {reason}"]
