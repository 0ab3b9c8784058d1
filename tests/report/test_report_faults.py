"""The reporter on damaged input and a failing disk: files that are not results become failed jobs with a reason,
non-finite values stay out of the statistics, methods that failed alone are listed, and a report file that cannot be
written stops the build with one line and leaves no partial or temporary file behind."""

from __future__ import annotations

import errno
import importlib
import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import mounted_tmpfs, run_cli

from unlearnbench.report.build import build_report
from unlearnbench.runtime.files import WriteError, atomic_path, write_atomically

ENOSPC = os.strerror(errno.ENOSPC)  # "No space left on device"
PERMUTATIONS = 50  # the null's percentile is not under test here: fewer permutations, a faster build
# The valid grid: training seeds 0, 1 × two unlearning seeds each (s_u = 2i + j). Method alpha's Δacc D'_f holds one
# Infinity; beta's acc D'_f one NaN; gamma's Δacc D'_r one 1e400 (which JSON parsers read as inf).
ALPHA = {(0, 0): 1.0, (0, 1): 2.0, (1, 2): 3.0, (1, 3): math.inf}
BETA = {(0, 0): math.nan, (0, 1): 0.5, (1, 2): 0.5, (1, 3): 0.5}
OVERFLOW = 123456.0  # written as 1e400 in job (1, 2)
FAILURE = {"target": "3", "method": "beta", "error": "RuntimeError: beta diverged (loss nan)\nat step 3"}


def job_fields(seed_train: int, seed_unlearn: int) -> dict:
    return {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
            "method": "all", "seed_train": seed_train, "seed_unlearn": seed_unlearn, "seed_eval": seed_unlearn,
            "strategy": "single", "precision": "32-true", "devices": 1}


def record(method: str | None, role: str, metric: str, split: str | None, value: float | None) -> dict:
    return {"target": "3", "method": method, "role": role, "metric": metric, "split": split, "value": value}


def valid_result(i: int, u: int) -> dict:
    gamma = OVERFLOW if (i, u) == (1, 2) else 0.1
    records = [record(None, "original", "acc", "forget_test", 0.9),
               record(None, "retrained", "acc", "forget_test", 0.0),
               record("alpha", "unlearned", "delta_acc", "forget_test", ALPHA[i, u]),
               record("alpha", "unlearned", "acc", "forget_test", 0.05),
               record("beta", "unlearned", "acc", "forget_test", BETA[i, u]),
               record("gamma", "unlearned", "delta_acc", "retain_test", gamma)]
    return {"schema": 1, "status": "complete", "error": None, "job": job_fields(i, u), "records": records}


def write_text(folder: Path, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(text)


def write_json(folder: Path, content) -> None:
    write_text(folder, json.dumps(content).replace(str(OVERFLOW), "1e400"))  # (json.dumps writes Infinity, NaN)


def bad_record(**change) -> dict:
    return {**valid_result(0, 0), "records": [{**record("alpha", "unlearned", "acc", "forget_test", 0.5), **change}]}


def without(key: str) -> dict:
    return {k: v for k, v in record("alpha", "unlearned", "acc", "forget_test", 0.5).items() if k != key}


DEEP = 100_000
# folder → (content: a JSON-able object, or raw text), the status and the reason the report must give
BAD = {
    "records_not_a_list": ({**valid_result(0, 0), "records": "notalist"}, "invalid",
                           "records: 'notalist' is not a list"),
    "records_of_numbers": ({**valid_result(0, 0), "records": [1, 2]}, "invalid", "records[0]: 1 is not an object"),
    "job_a_string": ({**valid_result(0, 0), "job": "x"}, "invalid", "job: 'x' is not an object"),
    "job_without_seed": ({**valid_result(0, 0), "job": {"dataset": "digits"}}, "invalid",
                         "job.seed_train: None is not an integer"),
    "seed_a_string": ({**valid_result(0, 0), "job": {**job_fields(0, 0), "seed_unlearn": "1"}}, "invalid",
                      "job.seed_unlearn: '1' is not an integer or null"),
    "seed_beyond_int64": ({**valid_result(0, 0), "job": {**job_fields(0, 0), "seed_train": 2**70}}, "invalid",
                          "job.seed_train: 1180591620717411303424 is not an integer"),
    "job_field_a_list": ({**valid_result(0, 0), "job": {**job_fields(0, 0), "model": [1, 2]}}, "invalid",
                         "job.model: [1, 2] is not a string, number, boolean or null"),
    "job_field_reserved": ({**valid_result(0, 0), "job": {**job_fields(0, 0), "status": "complete"}}, "invalid",
                           "job.status: a name the reporter keeps for its own column, not a job field"),
    "status_unknown": ({**valid_result(0, 0), "status": "running"}, "invalid",
                       "status: 'running' is not complete or failed"),
    "record_without_value": ({**valid_result(0, 0), "records": [without("value")]}, "invalid",
                             "records[0]: no 'value'"),
    "record_without_metric": ({**valid_result(0, 0), "records": [without("metric")]}, "invalid",
                              "records[0]: no 'metric'"),
    "record_value_a_string": (bad_record(value="0.5"), "invalid", "records[0].value: '0.5' is not a number or null"),
    "record_value_a_boolean": (bad_record(value=True), "invalid", "records[0].value: True is not a number or null"),
    "record_unknown_role": (bad_record(role="student"), "invalid",
                            "records[0].role: 'student' is not one of original, retrained, unlearned"),
    "record_target_a_list": (bad_record(target=[3]), "invalid",
                             "records[0].target: [3] is not a string or an integer"),
    "record_round_a_float": (bad_record(round=1.5), "invalid", "records[0].round: 1.5 is not an integer or null"),
    "record_metric_a_number": (bad_record(metric=7), "invalid", "records[0].metric: 7 is not a string"),
    "numerics_a_string": ({**valid_result(0, 0), "numerics": "cpu"}, "invalid",
                          "numerics: 'cpu' is not an object or null"),
    "numerics_id_a_list": ({**valid_result(0, 0), "numerics": {"id": ["a"]}}, "invalid",
                           "numerics.id: ['a'] is not a string"),
    "not_an_object": ([1, 2], "invalid", "the file: [1, 2] is not a JSON object"),
    "nested_lists": ("[" * DEEP + "]" * DEEP, "invalid", "nested too deeply to be a result"),
    "nested_records": ('{"status": "complete", "records": ' + "[" * DEEP + "]" * DEEP + "}", "invalid",
                       "nested too deeply to be a result"),
    "lone_surrogate": (json.dumps(bad_record(metric="\ud800")), "invalid", "lone surrogate"),
    "not_json": ("{not json", "unreadable", "Expecting property name enclosed in double quotes"),
    "truncated": (json.dumps(valid_result(0, 0))[:50], "unreadable", "result.json: "),
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """The valid grid (one job with a failed method, one with a malformed `failures` list) beside every bad file."""
    folder = tmp_path_factory.mktemp("faults") / "sweep"
    for i, u in ALPHA:
        content = valid_result(i, u)
        if (i, u) == (0, 1):
            content["failures"] = [FAILURE]
        if (i, u) == (1, 3):
            content["failures"] = [{"target": "3", "method": "beta"}]  # no error: the list is ignored
        write_json(folder / f"digits_t{i}_u{u}", content)
    for name, (content, _, _) in BAD.items():
        write_text(folder / name, content) if isinstance(content, str) else write_json(folder / name, content)
    (folder / "a_folder" / "result.json").mkdir(parents=True)  # not a file
    write_json(folder / "config_error", {"status": "failed", "error": "UserError: unknown dataset x", "records": [],
                                         "job": {"task": None, "config_error": "unknown dataset x"}})
    (folder / "oversized").mkdir()
    with open(folder / "oversized" / "result.json", "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB that take no disk, refused without being read
    return folder


@pytest.fixture(scope="module")
def built(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("faults_report") / "report"
    return build_report([sweep], out, permutations=PERMUTATIONS), out


def failed_by_folder(report) -> dict[str, dict]:
    return {Path(job["folder"]).name: job for job in report.failed}


def test_each_malformed_file_is_a_failed_job_with_its_reason(built):
    report, out = built
    failed = failed_by_folder(report)
    assert set(failed) == {*BAD, "a_folder", "oversized", "config_error"}
    assert failed["config_error"]["status"] == "failed"  # a failed job without seeds: its own error is shown
    assert failed["config_error"]["error"] == "UserError: unknown dataset x"
    for name, (_, status, reason) in BAD.items():
        assert failed[name]["status"] == status, name
        assert failed[name]["error"].startswith("result.json: ") and reason in failed[name]["error"], name
        assert "\n" not in failed[name]["error"], name
    assert "Is a directory" in failed["a_folder"]["error"]
    assert failed["oversized"]["error"] == ("result.json: 300 MiB, larger than a result can be (at most 256 MiB): "
                                            "not read")
    text = (out / "report.md").read_text()
    listed = text[text.index(f"## Failed jobs ({len(failed)})"):]
    for name, (_, status, reason) in BAD.items():
        line = next(line for line in listed.splitlines() if f"{name}` ({status}): result.json: " in line)
        assert reason in line, name


def test_the_report_covers_the_valid_jobs(built):
    report, out = built
    assert len(report.jobs) == len(ALPHA) + len(BAD) + 3
    assert sum(job["status"] == "complete" for job in report.jobs) == len(ALPHA)
    summary = pd.read_csv(out / "summary.csv")
    original = summary[(summary["role"] == "original") & (summary["metric"] == "acc")].iloc[0]
    assert (original["mean"], original["n"], original["seeds_train"]) == (0.9, 4, 2)
    results = pd.read_csv(out / "results.csv")
    assert set(results["folder"].map(lambda f: Path(f).name)) == {f"digits_t{i}_u{u}" for i, u in ALPHA}
    assert len(pd.read_parquet(out / "results.parquet")) == len(results) == 6 * len(ALPHA)
    text = (out / "report.md").read_text()
    assert "## digits · resnet18 · full_class — target 3" in text
    assert f"{len(BAD) + 3} of {len(report.jobs)} jobs did not complete" in text


def test_non_finite_values_are_missing_and_counted_in_one_warning(built):
    report, out = built
    summary = pd.read_csv(out / "summary.csv")

    def row(method: str, metric: str) -> pd.Series:
        return summary[(summary["method"] == method) & (summary["metric"] == metric)].iloc[0]

    alpha, beta, gamma = row("alpha", "delta_acc"), row("beta", "acc"), row("gamma", "delta_acc")
    assert (alpha["mean"], alpha["n"]) == (2.0, 3)  # 1, 2, 3: the Infinity left out
    assert (beta["mean"], beta["n"]) == (0.5, 3)  # the NaN left out
    assert (gamma["mean"], gamma["n"]) == (pytest.approx(0.1), 3)  # 1e400 (inf) left out
    for name in ("summary.csv", "table.csv", "seed_variance.csv"):
        numbers = pd.read_csv(out / name).select_dtypes("number").to_numpy()
        assert not (abs(numbers) == math.inf).any(), name
    results = pd.read_csv(out / "results.csv")
    assert results["value"].isna().sum() == 3
    warnings = [w for w in report.warnings if "non-finite" in w]
    assert warnings == ["3 non-finite values (Infinity or NaN) in 3 jobs treated as missing (left out of every "
                        "statistic): digits_t0_u0 (acc); digits_t1_u2 (delta_acc); digits_t1_u3 (delta_acc)"]
    assert f"- {warnings[0]}" in (out / "report.md").read_text()


def test_failed_methods_are_listed_after_the_failed_jobs(built):
    report, out = built
    text = (out / "report.md").read_text()
    assert text.index("## Failed jobs") < text.index("## Failed methods (1)")
    section = text[text.index("## Failed methods (1)"):]
    folder = next(job["folder"] for job in report.jobs if job["folder"].endswith("digits_t0_u1"))
    assert f"- `{folder}`: target 3, method beta: RuntimeError: beta diverged (loss nan)" in section
    assert "at step 3" not in section  # the first line only
    assert "1 method run failed or diverged in jobs whose other methods completed" in text
    assert ("ignored malformed parts of 1 result file(s): digits_t1_u3: failures[0].error: None is not a string"
            in text)
    statuses = {Path(job["folder"]).name: job["status"] for job in report.jobs}
    assert statuses["digits_t0_u1"] == statuses["digits_t1_u3"] == "complete"


@pytest.mark.processes
def test_console_script_reports_the_bad_files_without_a_traceback(sweep, tmp_path):
    run = run_cli([str(sweep), "--out", str(tmp_path / "report"), "--no-figures"], tmp_path,
                  program="unlearnbench-report")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert f"report: {tmp_path / 'report'}" in run.stdout
    for name, (_, _, reason) in BAD.items():
        line = next(line for line in run.stderr.splitlines() if line.startswith(f"FAILED {name}: "))
        assert reason in line, name
    assert "## Failed methods (1)" in (tmp_path / "report" / "report.md").read_text()
    assert len(pd.read_csv(tmp_path / "report" / "summary.csv")) > 0


# ------------------------------------------------------------------------------------------- a failing disk


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """A small valid sweep and its report (with figures), built where writing works."""
    root = tmp_path_factory.mktemp("reference")
    for i, u in ALPHA:
        write_json(root / "sweep" / f"digits_t{i}_u{u}", valid_result(i, u))
    build_report([root / "sweep"], root / "report", permutations=PERMUTATIONS)
    return root / "sweep", root / "report"


def leftovers(out: Path) -> list[str]:
    """Temporary or hidden files a write left behind."""
    return [str(p) for p in out.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


def assert_whole(out: Path, reference: Path) -> None:
    """Every report file present is the complete file a working build writes (the parquet file: same table)."""
    for path in (p for p in out.rglob("*") if p.is_file()):
        expected = reference / path.relative_to(out)
        if path.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(expected))
        else:
            assert path.read_bytes() == expected.read_bytes(), path


def fail_midway(original, name: str, writes_itself: bool):
    """A writer method that, for (the temporary file of) the file `name`, writes a part of it and then finds the disk
    full. Its file is its first argument, or the object itself (`Path.write_text`) where `writes_itself`."""

    def writer(self, *args, **kwargs):
        path = Path(self if writes_itself else args[0])
        if path.name.startswith(f".{name}."):
            path.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, ENOSPC)
        return original(self, *args, **kwargs)

    return writer


FAILING = {  # the file that cannot be written → (module, class, its writer method to break, draw figures?)
    "results.parquet": ("pandas", "DataFrame", "to_parquet", False),
    "summary.csv": ("pandas", "DataFrame", "to_csv", False),
    "report.md": ("pathlib", "Path", "write_text", False),
    "figures/variance_digits_resnet18_full_class.png": ("matplotlib.figure", "Figure", "savefig", True),
}


@pytest.mark.parametrize("name", list(FAILING))
def test_a_full_disk_stops_the_build_with_one_line_and_leaves_no_part(name, reference, tmp_path, monkeypatch):
    sweep, expected = reference
    module, owner, method, figures = FAILING[name]
    owner = getattr(importlib.import_module(module), owner)
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    (out / name).write_bytes(b"an earlier build's file\n")
    monkeypatch.setattr(owner, method, fail_midway(getattr(owner, method), Path(name).name, owner is Path))
    with pytest.raises(WriteError) as caught:
        build_report([sweep], out, figures=figures, permutations=PERMUTATIONS)
    assert str(caught.value) == f"cannot write {out / name}: {ENOSPC}"
    assert caught.value.errno == errno.ENOSPC
    assert (out / name).read_bytes() == b"an earlier build's file\n"  # the old file, untouched
    assert leftovers(out) == []
    (out / name).unlink()
    assert_whole(out, expected)


@pytest.fixture(params=[("120k", True), ("16k", False)], ids=["figures", "tables"])
def tiny_disk(request, tmp_path):
    """(a tmpfs too small for the report (root only): a real full disk, whether figures are drawn). 120 KiB fill up
    at a figure, 16 KiB at a table."""
    size, figures = request.param
    with mounted_tmpfs(tmp_path / "tiny", size) as folder:
        yield folder, figures


@pytest.mark.processes
def test_a_real_full_disk_stops_the_build_with_one_line_and_leaves_no_part(reference, tiny_disk):
    sweep, expected = reference
    folder, figures = tiny_disk
    out = folder / "report"
    with pytest.raises(WriteError, match=rf"^cannot write {re.escape(str(out))}/\S+: {ENOSPC}$") as caught:
        build_report([sweep], out, figures=figures, permutations=PERMUTATIONS)
    assert ("figures/" in str(caught.value)) == figures
    assert caught.value.errno == errno.ENOSPC
    assert leftovers(out) == []
    assert_whole(out, expected)
    assert not (out / "report.md").exists()


def test_an_unwritable_report_folder_is_one_line(reference, tmp_path):
    sweep, _ = reference
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError, match=r"^cannot create folder .*/file/report: Not a directory$"):
        build_report([sweep], tmp_path / "file" / "report", figures=False)


def test_a_read_only_report_folder_is_one_line(reference, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    sweep, _ = reference
    out = tmp_path / "report"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(WriteError, match=rf"^cannot write {re.escape(str(out))}/results.csv: Permission denied$"):
            build_report([sweep], out, figures=False)
        assert list(out.iterdir()) == []
    finally:
        out.chmod(0o755)


def test_atomic_path_renames_on_success_and_removes_the_temporary_file_on_failure(tmp_path):
    path = tmp_path / "file.txt"
    write_atomically(path, "first")
    assert path.read_text() == "first"
    with pytest.raises(WriteError, match=rf"^cannot write {re.escape(str(path))}: {ENOSPC}$"), \
            atomic_path(path) as temporary:
        temporary.write_text("part")
        raise OSError(errno.ENOSPC, ENOSPC)
    with pytest.raises(KeyError), atomic_path(path) as temporary:  # not a write failure: raised as it is
        temporary.write_text("part")
        raise KeyError("bug")
    assert path.read_text() == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
    with pytest.raises(WriteError, match=r"^cannot write .*/missing/file.txt: No such file or directory$"):
        write_atomically(tmp_path / "missing" / "file.txt", "text")
