"""Fault injection into jobs and sweeps: a crashing or diverging method among the others, non-finite values, a full
disk, options out of range, unsafe names (interruptions: test_interrupts.py). Each stays one failure, said in one
line; nothing already written is lost or half-written."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import TINY, mounted_tmpfs, plain_config, results, run_cli, values

from unlearnbench.core.job import JobPlan, execute
from unlearnbench.core.result import json_safe, publish
from unlearnbench.runtime.errors import EndSweep

TESTS = Path(__file__).resolve().parent.parent
FAULTY = {"crashing": "faulty.Crashing", "exploding": "faulty.Exploding"}
SCORED = ("finetune", "ssd")  # the methods beside the faulty ones (every method in one job: test_cli.py's demo)


def faulty_config_dir(root: Path, **extra: dict) -> Path:
    """A user config folder adding test-only methods to the `method` group, as a researcher adds their own."""
    folder = root / "user_conf" / "method"
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in FAULTY.items():  # `exploding` with a defaults list: the job composes it with Hydra in full
        defaults = "defaults:\n  - _self_\n" if name == "exploding" else ""
        (folder / f"{name}.yaml").write_text(f"{defaults}_target_: {target}\nname: {name}\n")
    for name, options in extra.items():
        (folder / f"{name}.yaml").write_text("\n".join(f"{k}: {v}" for k, v in options.items()) + "\n")
    return root / "user_conf"


def run_with_faulty(args: list[str], tmp_path: Path, **kwargs) -> subprocess.CompletedProcess:
    os.environ["PYTHONPATH"] = f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    try:
        return run_cli(args, tmp_path, **kwargs)
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]


@pytest.fixture(scope="module")
def faulty_job(tmp_path_factory, shared_cache):
    """A crashing and a diverging method between two others, in one job, through the CLI."""
    root = tmp_path_factory.mktemp("faulty")
    run = run_with_faulty([f"--config-dir={faulty_config_dir(root)}", *TINY, f"paths.cache_dir={shared_cache}",
                           "methods=[finetune,crashing,exploding,ssd]"], root)
    ((_, result),) = results(root / "sweep").items()
    return run, result


@pytest.mark.processes
def test_one_crashing_and_one_diverging_method_leave_the_others_scored(faulty_job):
    _, result = faulty_job
    assert result["status"] == "complete" and result["error"] is None
    failures = {f["method"]: f["error"] for f in result["failures"]}
    assert set(failures) == {"crashing", "exploding"}
    assert failures["crashing"] == "RuntimeError: boom inside the method"
    assert failures["exploding"].startswith("exploding diverged: non-finite")
    for method in SCORED:  # the others ran and scored on every split
        for split in ("forget_test", "retain_test", "forget_train", "retain_train"):
            (accuracy,) = values(result, method=method, metric="acc", split=split)
            assert 0.0 <= accuracy <= 1.0, (method, split)
    science = [r for r in result["records"] if r["method"] == "exploding"
               and r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")]
    assert science and all(r["value"] is None for r in science)  # a diverged model's metrics are null
    assert values(result, method="exploding", metric="time_s")[0] >= 0  # its cost was measured
    assert not any(r["method"] == "crashing" for r in result["records"])


@pytest.mark.processes
def test_method_failures_are_reported_in_one_line_each_and_the_sweep_exits_non_zero(faulty_job):
    run, _ = faulty_job
    assert run.returncode == 1
    assert "Traceback" not in run.stderr + run.stdout
    lines = [line for line in run.stderr.splitlines() if "FAILED" in line]
    assert any("crashing" in line and "boom inside the method" in line for line in lines), run.stderr
    assert any("exploding" in line and "diverged" in line for line in lines), run.stderr


def test_gradient_ascent_at_a_huge_learning_rate_diverges_alone(tmp_path, shared_cache):
    config = plain_config(list(TINY), tmp_path, shared_cache)
    methods = [plain_config([*TINY, "+method=gradient_ascent", "method.lr=1e12", "method.epochs=1"],
                            tmp_path)["method"],
               plain_config([*TINY, "+method=finetune", "method.epochs=1"], tmp_path)["method"]]
    from lightning_fabric import Fabric

    outcome = execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, methods, str(tmp_path)))
    assert outcome.error is None and outcome.status == ("complete", None)
    assert [(f["method"], f["error"].split(":")[0]) for f in outcome.failures] == [("gradient_ascent",
                                                                                    "gradient_ascent diverged")]
    finetuned = [r["value"] for r in outcome.records if r["method"] == "finetune" and r["metric"] == "acc"]
    assert len(finetuned) == 4 and all(0 <= v <= 1 for v in finetuned)


@pytest.mark.processes
def test_a_job_whose_every_method_failed_is_failed_with_the_first_reason(tmp_path, shared_cache):
    run = run_with_faulty([f"--config-dir={faulty_config_dir(tmp_path)}", "+method=crashing", *TINY,
                           f"paths.cache_dir={shared_cache}"], tmp_path)
    ((_, result),) = results(tmp_path / "sweep").items()
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert result["status"] == "failed"
    assert result["error"] == "RuntimeError: boom inside the method (target 3, method crashing)"


def test_non_finite_values_become_null_in_result_json(tmp_path):
    content = {"records": [{"value": math.inf}, {"value": -math.inf}, {"value": math.nan}, {"value": 0.5}],
               "timings": {"a": math.nan}, "nested": [[math.inf, 1.0]]}
    assert json_safe(content) == {"records": [{"value": None}, {"value": None}, {"value": None}, {"value": 0.5}],
                                  "timings": {"a": None}, "nested": [[None, 1.0]]}
    publish(tmp_path / "job" / "result.json", content)
    assert json.loads((tmp_path / "job" / "result.json").read_text())["records"][0]["value"] is None


def test_a_result_that_cannot_be_written_stops_with_one_line_and_leaves_nothing_half_written(tmp_path,
                                                                                            monkeypatch):
    path = tmp_path / "job" / "result.json"
    publish(path, {"status": "complete", "records": []})
    before = path.read_text()

    def full(descriptor: int) -> None:  # the data reaches the disk at fsync: that is where ENOSPC shows
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("unlearnbench.runtime.files.os.fsync", full)
    with pytest.raises(EndSweep) as stopped:
        publish(path, {"status": "complete", "records": [{"value": 1.0}]})
    monkeypatch.undo()
    assert str(stopped.value).startswith(f"cannot write {path}: No space left on device")
    assert path.read_text() == before  # the earlier result stands, whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]  # no temporary file left


@pytest.mark.processes
def test_a_full_disk_stops_the_sweep_with_one_line_and_no_half_written_file(tmp_path, shared_cache):
    with mounted_tmpfs(tmp_path / "disk", "1m") as disk:
        conf = faulty_config_dir(tmp_path, fill_disk={"_target_": "faulty.FillingDisk", "name": "fill_disk",
                                                      "folder": str(disk)})
        run = run_with_faulty([f"--config-dir={conf}", "+method=fill_disk", *TINY,
                               f"hydra.sweep.dir={disk / 'sweep'}", f"paths.cache_dir={shared_cache}"], tmp_path)
        assert run.returncode != 0
        assert "Traceback" not in run.stderr + run.stdout, run.stderr
        (line,) = [x for x in run.stderr.splitlines() if "cannot write" in x]
        # examples.parquet is published first (a complete result always has its examples): either may be the one
        assert re.search(r"/(examples\.parquet|result\.json): No space left on device", line), line
        assert "rerun the same command" in line
        (job,) = [p for p in (disk / "sweep").iterdir() if p.is_dir()]
        assert not (job / "result.json").exists() and not (job / "examples.parquet").exists()
        assert not [p for p in job.iterdir() if p.name.endswith(".tmp")]  # the temporary result was removed


@pytest.mark.processes
def test_options_out_of_range_fail_before_any_job_with_one_line(tmp_path):
    bad = ["train.epochs=0", "seeds.train=-1", "train.batch_size=0", "runtime.threads=0",
           "evaluation.mia_loss_folds=1", "strategy.devices=0", "runtime.matmul_precision=bogus", "train.lr=-0.1"]
    run = run_cli([*TINY, *bad], tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("unlearnbench: invalid config: ")
    for option in bad:
        assert option.split("=")[0] + "=" in line, option
    assert "valid: one of highest, high, medium" in line and "valid: >= 2" in line
    assert not (tmp_path / "sweep").exists()  # nothing started


@pytest.mark.parametrize("args, message", [
    (["+method=finetune", "method.epochs=-1"], "method finetune: method.epochs=-1 is not valid; valid: >= 1"),
    (["experiment=seed_sensitivity", "study.J=0"], "study.J=0 is not valid; valid: >= 1"),
    (["+method=finetune", "method.name=../../escaped"], "method.name='../../escaped' must be letters"),
])
@pytest.mark.processes
def test_bad_method_options_study_sizes_and_names_fail_before_any_job(tmp_path, args, message):
    run = run_cli(args, tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert message in run.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "sweep").exists() and not (tmp_path.parent / "escaped").exists()


@pytest.mark.processes
def test_a_swept_unsafe_name_stays_inside_the_sweep_folder(tmp_path, shared_cache):
    run = run_cli(["+method=retrain", "method.name=retrain,../../escaped", *TINY, f"paths.cache_dir={shared_cache}"],
                  tmp_path)
    assert run.returncode == 1
    folders = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir() and p.name != "report")
    assert len(folders) == 2
    assert all((tmp_path / "sweep") in p.parents for p in tmp_path.parent.rglob("*escaped*"))
    assert "must be letters, digits" in run.stderr


@pytest.mark.processes
def test_an_empty_sweep_is_an_error_not_a_silent_success(tmp_path):
    run = run_cli(["seeds.train=range(0)"], tmp_path)
    assert run.returncode == 1 and "the sweep ran no job" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.processes
def test_a_sweep_folder_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    run = run_cli([f"hydra.sweep.dir={tmp_path / 'a_file' / 'sweep'}"], tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip() == (f"unlearnbench: cannot create the sweep folder {tmp_path / 'a_file' / 'sweep'}: "
                                  f"{tmp_path / 'a_file'} is not a folder; choose another with hydra.sweep.dir=DIR")

