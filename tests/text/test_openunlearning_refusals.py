"""`unlearnbench-report --openunlearning` fails like the rest of the tool: an unresolvable config key, a score that is
not a number, a report of original and retrained runs alone, a second import into the same --out, a manifest whose
every row fails, duplicate rows and a write error each give one line as `unlearnbench-report` (in-process, as
test_openunlearning.py runs the console script)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_openunlearning import LOGS, members, tofu_eval, write_manifest, write_run

from unlearnbench import cli
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text import openunlearning
from unlearnbench.tasks.text.openunlearning import import_runs

RUNS = Path(__file__).parent.parent / "data" / "openunlearning"
FORGET01 = RUNS / "saves/eval/tofu_Llama-3.2-1B-Instruct_full/evals_forget01"


def report(monkeypatch, capsys, manifest: Path, out: Path) -> tuple[int, str]:
    """(exit status, stderr) of `unlearnbench-report --openunlearning MANIFEST --out OUT` run in this process."""
    monkeypatch.setattr("sys.argv", ["unlearnbench-report", "--openunlearning", str(manifest), "--out", str(out),
                                     "--no-figures", "--permutations", "5", "--resamples", "20"])
    try:
        cli.report_main()
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
        if isinstance(stop.code, str):
            print(stop.code, file=__import__("sys").stderr)
    return status, capsys.readouterr().err


def job_folders(out: Path) -> list[str]:
    return sorted(f.name for f in out.iterdir() if (f / "result.json").is_file())


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    """A folder with TOFU runs of one seed: `full` (M_o), `retain` (M_r), `npo` and `gd` (two methods)."""
    root = tmp_path_factory.mktemp("ou_pair")
    rng = np.random.default_rng(3)
    write_run(root / "full", tofu_eval(LOGS["full"], members(rng, -0.5)))
    write_run(root / "retain", tofu_eval(LOGS["retain90"], members(rng, 0.0)))
    write_run(root / "npo", tofu_eval(LOGS["full"], members(rng, -0.3)))
    write_run(root / "gd", tofu_eval(LOGS["retain90"], members(rng, -0.1)))
    return root


def test_an_unresolvable_config_key_is_refused_naming_the_run_and_the_key(tmp_path, capsys, monkeypatch):
    """`${hydra:…}` is answered from the run's own hydra.yaml; an unset `${oc.env:…}`, a `${now:…}` (whose value at
    run time no file records: refused even where Hydra's resolvers are registered in this process) and a `${hydra:…}`
    that hydra.yaml lacks are refused, one line each naming the manifest line, the folder and the key."""
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's `now` and `hydra` resolvers, as after any Hydra run in the same process
    monkeypatch.delenv("UNLEARNBENCH_NO_SUCH_VARIABLE", raising=False)
    edits = {"env": ("forget_split: forget01\n", "forget_split: ${oc.env:UNLEARNBENCH_NO_SUCH_VARIABLE}\n"),
             "now": ("forget_split: forget01\n", "forget_split: forget_${now:%H}\n"),
             "hydra": ("forget_split: forget01\n", "forget_split: ${hydra:runtime.no_such_key}\n"),
             "cwd": ("pretrained_model_name_or_path: meta-llama/Llama-3.2-1B-Instruct\n",
                     "pretrained_model_name_or_path: ${hydra:runtime.cwd}/tokenizer\n")}
    for name, (old, new) in edits.items():
        shutil.copytree(FORGET01, tmp_path / name)
        config = tmp_path / name / ".hydra" / "config.yaml"
        text = config.read_text()
        assert text.count(old) == 1
        config.write_text(text.replace(old, new))
    manifest = write_manifest(tmp_path / "m.csv", [{"path": name, "role": "original", "seed_train": seed}
                                                   for seed, name in enumerate(edits)])
    import_runs(manifest, tmp_path / "out")  # (the report lists each failed job's error: its one line)
    results = {f: json.loads((tmp_path / "out" / f / "result.json").read_text()) for f in job_folders(tmp_path / "out")}
    assert [r["status"] for r in results.values()] == ["failed", "failed", "failed", "complete"]
    for result, (number, name) in zip(results.values(), ((2, "env"), (3, "now"), (4, "hydra")), strict=False):
        line = result["error"]
        assert "\n" not in line and line.startswith(f"manifest line {number} ({tmp_path / name}): "), line
        assert "cannot resolve eval.tofu.forget_split ('${forget_split}')" in line, line
    assert "UNLEARNBENCH_NO_SUCH_VARIABLE" in results["002-original-t0"]["error"]
    assert "forget_split is 'forget_${now:%H}'" in results["003-original-t1"]["error"]
    cwd = next(r for r in results.values() if r["status"] == "complete")
    assert cwd["job"]["model"] == "tokenizer" and cwd["records"][0]["target"] == "forget01"
    for result in results.values():  # the errors quote the config; the job fields and records hold no `${`
        assert "${" not in json.dumps([result["job"], result["records"]])


def test_a_score_that_is_not_a_number_costs_only_its_row(pair, tmp_path, capsys, monkeypatch):
    bad = tofu_eval(LOGS["full"], members(np.random.default_rng(4), -0.2))
    bad["forget_Q_A_Prob"]["value_by_index"]["3"]["prob"] = "high"
    write_run(tmp_path / "bad", bad)
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 0},
        {"path": "bad", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0},
        {"path": str(pair / "npo"), "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 1}])
    status, err = report(monkeypatch, capsys, manifest, tmp_path / "out")
    assert status == 0 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "manifest line 3" in line]
    assert str(tmp_path / "bad" / "TOFU_EVAL.json") in line and "forget_Q_A_Prob" in line and "'high'" in line
    statuses = [json.loads((tmp_path / "out" / f / "result.json").read_text())["status"]
                for f in job_folders(tmp_path / "out")]
    assert statuses == ["complete", "failed", "complete"]
    assert (tmp_path / "out" / "report" / "report.md").is_file()


def test_original_and_retrained_runs_alone_get_their_report(pair, tmp_path, capsys, monkeypatch):
    """A first import of M_o and M_r alone: the report shows both, and its leaderboard says there is nothing to
    rank (no unlearned model), instead of failing in the leaderboard."""
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": str(pair / "full"), "role": "original", "seed_train": 0},
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 0}])
    status, err = report(monkeypatch, capsys, manifest, tmp_path / "out")
    assert status == 0 and "Traceback" not in err
    text = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "| (original) |" in text and "| (retrained) |" in text
    (line,) = [line for line in text.splitlines() if line.startswith("Nothing to rank")]
    assert "no unlearned model" in line


def test_a_second_import_into_the_same_out_replaces_the_first(pair, tmp_path, capsys, monkeypatch):
    first = write_manifest(tmp_path / "a.csv", [
        {"path": str(pair / name), "role": role, "method": method, "seed_train": 0, "seed_unlearn": unlearn}
        for name, role, method, unlearn in (("full", "original", "", ""), ("retain", "retrained", "", ""),
                                            ("npo", "unlearned", "npo", 0), ("gd", "unlearned", "gd", 0))])
    second = write_manifest(tmp_path / "b.csv", [
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 1},
        {"path": str(pair / "gd"), "role": "unlearned", "method": "gd", "seed_train": 1, "seed_unlearn": 0}])
    out = tmp_path / "out"
    assert len(import_runs(first, out).folders) == 4 and len(job_folders(out)) == 4
    (out / "report").mkdir()
    (out / "report" / "leaderboard.csv").write_text("the first import's")
    status, err = report(monkeypatch, capsys, second, out)
    assert status == 0 and job_folders(out) == ["002-retrained-t1", "003-unlearned-gd-t1-u0"], err
    assert "Jobs: 2 (2 complete, 0 failed)" in (out / "report" / "report.md").read_text()
    assert "the first import's" not in (out / "report" / "leaderboard.csv").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv", "out"]  # nothing left beside it


def test_an_out_that_holds_something_else_is_refused_and_left_alone(pair, tmp_path, capsys, monkeypatch):
    manifest = write_manifest(tmp_path / "m.csv", [{"path": str(pair / "full"), "role": "original",
                                                    "seed_train": 0}])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    status, err = report(monkeypatch, capsys, manifest, out)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("unlearnbench-report: ") and "notes.txt" in err and str(out) in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    status, err = report(monkeypatch, capsys, manifest, tmp_path / "file")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "not a folder" in err, err


def test_a_manifest_whose_every_row_fails_exits_non_zero_and_writes_nothing(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": "empty", "role": "original", "seed_train": 0},
        {"path": "nowhere", "role": "retrained", "seed_train": 0}])
    status, err = report(monkeypatch, capsys, manifest, tmp_path / "out")
    assert status == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert all(line.startswith("unlearnbench-report: ") for line in lines)
    assert sum("manifest line 2 " in line for line in lines) == sum("manifest line 3 " in line for line in lines) == 1
    assert "none of the 2 runs" in lines[-1] and not (tmp_path / "out").exists()
    assert "imported" not in capsys.readouterr().out


def test_duplicate_rows_are_refused_in_one_line_naming_both(pair, tmp_path, capsys, monkeypatch):
    """The same folder twice, or two folders of the same run (dataset, target, model, role, method and seeds)."""
    shutil.copytree(pair / "npo", tmp_path / "npo_copy")
    same_folder = write_manifest(tmp_path / "a.csv", [
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 0},
        {"path": str(pair / "npo"), "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0},
        {"path": str(pair / "npo") + "/", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 1}])
    same_run = write_manifest(tmp_path / "b.csv", [
        {"path": str(pair / "npo"), "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0},
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 0},
        {"path": "npo_copy", "role": "unlearned", "method": "npo", "seed_train": 0, "seed_unlearn": 0}])
    for manifest, words in ((same_folder, "lines 3 and 4"), (same_run, "lines 2 and 4")):
        status, err = report(monkeypatch, capsys, manifest, tmp_path / "out")
        assert status == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("unlearnbench-report: ") and words in err, err
        assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="lines 2 and 4"):
        import_runs(same_run, tmp_path / "out")


def test_a_write_error_speaks_as_unlearnbench_report_and_keeps_the_former_import(pair, tmp_path, capsys,
                                                                                 monkeypatch):
    manifest = write_manifest(tmp_path / "m.csv", [
        {"path": str(pair / "full"), "role": "original", "seed_train": 0},
        {"path": str(pair / "retain"), "role": "retrained", "seed_train": 0}])
    out = tmp_path / "out"
    import_runs(manifest, out)
    before = job_folders(out)

    def full_disk(path, content):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("unlearnbench.core.result.write_json", full_disk)
    monkeypatch.setattr(openunlearning, "write_json", full_disk, raising=False)
    status, err = report(monkeypatch, capsys, manifest, out)
    (line,) = err.strip().splitlines()
    assert status == 1 and line.startswith("unlearnbench-report: cannot write ") and "No space left" in line
    assert "rerun" not in line and "sweep" not in line
    assert job_folders(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "out"]
