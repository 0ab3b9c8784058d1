"""Use from Python (unlearnbench.api): the docs' notebook-sized example run from a folder outside the
repository, `run_sweep`'s resume, failures and refusals, and `load_report`."""

from __future__ import annotations

import ast
import functools
import json
import shutil
import signal
import subprocess
import sys

import pandas as pd
import pytest
from helpers import FORKING, REPO, TINY, default_sigint, run_example, user_environment

import unlearnbench
from unlearnbench import SweepError, load_report, run_sweep
from unlearnbench.runtime.errors import UserError

EXAMPLE = REPO / "docs" / "examples" / "python" / "quick_study.py"
# The example's own overrides, to call run_sweep again on its folder, and what the test adds to them: the tiny digits
# setting (the docs' default recipe trains nine models at full width; test_report_sweep.py's killed sweep has the same
# jobs' tiny models in the suite's cache), unlearning batches of 512 as that sweep's (the methods' `batch_size`
# follows the scenario's: fewer steps, half the fine-tuning time, the models unchanged) and a 10-split null for the
# forget quality (its 100 splits are most of the report's time; no assertion reads them).
EXAMPLE_OVERRIDES = ["experiment=seed_sensitivity", "study.I=3", "study.J=2", "methods=[ssd,finetune]",
                     "hydra/launcher=local"]
OVERRIDES = [*EXAMPLE_OVERRIDES, *TINY, "scenario.batch_size=512", "report.permutations=10"]


@pytest.fixture
def forked(monkeypatch):
    """run_sweep's `python -m unlearnbench` forked from the tests' fork server (helpers.forked_popen); the Ctrl-C test
    starts real interpreters."""
    monkeypatch.setattr(unlearnbench.api, "subprocess", FORKING)


def tiny(source: str) -> str:
    """The example's source, its `run_sweep` overrides (checked to be `EXAMPLE_OVERRIDES`) followed by TINY's."""
    (call,) = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
               and getattr(node.func, "id", None) == "run_sweep"]
    assert ast.literal_eval(call.args[0]) == EXAMPLE_OVERRIDES, "the example's overrides changed: update the test"
    listed = ast.get_source_segment(source, call.args[0])
    return source.replace(listed, json.dumps(OVERRIDES))


@pytest.fixture(scope="module")
def example(tmp_path_factory, shared_cache):
    """The docs' example run as a script in a folder of its own (helpers.run_example), on tiny models (`tiny`); its
    models in the suite's cache (as a user's UNLEARNBENCH_CACHE_DIR would put them elsewhere)."""
    folder = tmp_path_factory.mktemp("notebook")
    run = run_example(tiny(EXAMPLE.read_text()), folder,
                      {**user_environment(), "UNLEARNBENCH_CACHE_DIR": str(shared_cache)})
    return folder, run


@pytest.mark.processes
def test_the_python_example_runs_from_a_folder_outside_the_repository(example):
    folder, run = example
    assert run.returncode == 0, run.stderr[-3000:]
    assert REPO not in folder.parents
    sweep = folder / "runs" / "quick_study"
    assert len(list(sweep.glob("*/result.json"))) == 3 * 2  # I × J, both methods in each job
    lines = run.stdout.splitlines()
    # the first table: mean and std per method and training seed
    assert lines[0].split() == ["mean", "std"] and lines[1].split() == ["method", "seed_train"]
    # the variance table: the training seed's and the unlearning seed's shares of forget accuracy's variance
    header = lines.index(next(line for line in lines if line.split() == ["method", "sigma_t2", "sigma_u2", "icc"]))
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[header + 1:header + 3]}
    assert set(rows) == {"ssd", "finetune"}
    assert rows["ssd"][1] == 0.0  # SSD's model does not depend on the unlearning seed
    assert all(v >= 0 for v in rows["ssd"] + rows["finetune"] if v == v)
    assert lines[-1] == f"{len(list((sweep / 'report' / 'figures').glob('*.png')))} figures in " \
                        f"runs/quick_study/report/figures"


@pytest.mark.processes
@pytest.mark.usefixtures("forked")
def test_run_sweep_resumes_a_finished_sweep_and_returns_its_records(example, monkeypatch):
    folder, _ = example
    monkeypatch.chdir(folder)
    sweep = folder / "runs" / "quick_study"
    written = {p: p.stat().st_mtime_ns for p in sweep.glob("*/result.json")}
    # its report rebuilt without figures (no assertion reads them; the example's figures stay in the folder)
    records = run_sweep([*OVERRIDES, "report.figures=false"], sweep_dir="runs/quick_study", quiet=True)
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("*/result.json")} == written  # no job ran again
    assert records.attrs == {"sweep_dir": "runs/quick_study", "failed": []}
    saved = pd.read_parquet(sweep / "report" / "results.parquet")
    key = ["folder", "target", "method", "role", "metric", "split"]
    pd.testing.assert_frame_equal(records.sort_values(key).reset_index(drop=True)[saved.columns],
                                  saved.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert set(records.method.dropna()) == {"ssd", "finetune"} and set(records.status) == {"complete"}
    assert sorted(records.seed_train.unique()) == [0, 1, 2] and records.seed_unlearn.nunique() == 6


@pytest.mark.processes
def test_load_report_reads_every_table_from_the_sweep_or_the_report_folder(example):
    folder, _ = example
    sweep = folder / "runs" / "quick_study"
    report = load_report(sweep)
    assert report.folder == sweep / "report" and load_report(sweep / "report").folder == sweep / "report"
    assert set(report.tables) == set(unlearnbench.api.TABLES)
    assert report.seed_variance is report.tables["seed_variance"]
    pd.testing.assert_frame_equal(report.seed_variance, pd.read_csv(sweep / "report" / "seed_variance.csv"))
    assert report.results.seed_train.dtype.kind == "i"  # from the parquet file, its types kept
    assert report.markdown == (sweep / "report" / "report.md").read_text()
    assert report.figures and all(p.suffix == ".png" and p.parent == sweep / "report" / "figures"
                                  for p in report.figures)
    with pytest.raises(AttributeError, match="a report has no table 'variance'; its tables: results, summary"):
        _ = report.variance


@pytest.mark.processes
def test_load_report_rebuilds_on_request_and_names_a_missing_report(example, tmp_path, monkeypatch):
    """The rebuilt report is built as the example's was (its 10-split null for the forget quality) and without
    figures, which nothing here reads."""
    import unlearnbench.report.build

    monkeypatch.setattr(unlearnbench.report.build, "build_report",
                        functools.partial(unlearnbench.report.build.build_report, figures=False,
                                          forget_permutations=10))
    folder, _ = example
    copy = tmp_path / "copy"
    shutil.copytree(folder / "runs" / "quick_study", copy, ignore=shutil.ignore_patterns("report"))
    with pytest.raises(FileNotFoundError, match=r"holds no report .*load_report\(.*rebuild=True\) or "
                                                r"unlearnbench-report"):
        load_report(copy)
    rebuilt = load_report(copy, rebuild=True)
    original = load_report(folder / "runs" / "quick_study")
    pd.testing.assert_frame_equal(rebuilt.seed_variance, original.seed_variance)
    (copy / "report" / "curves.csv").unlink()
    assert load_report(copy).curves.empty and not original.curves.empty  # a table the report lacks: empty
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_report(tmp_path / "nowhere")
    with pytest.raises(UserError, match="is a report folder; rebuild=True needs the sweep folder"):
        load_report(copy / "report", rebuild=True)


def test_run_sweep_refuses_what_the_command_line_would_not_take_as_overrides(tmp_path):
    with pytest.raises(UserError, match=r"^the 'overrides' option of run_sweep must be a list of strings"):
        run_sweep("+method=ssd")
    with pytest.raises(UserError, match=r"^the 'overrides' option of run_sweep must be key=value overrides only "
                                        r"\(.*\); got '--cfg' instead$"):
        run_sweep(["--cfg", "job"])
    with pytest.raises(UserError, match="the sweep folder is given twice"):
        run_sweep([f"hydra.sweep.dir={tmp_path}"], sweep_dir=tmp_path)


@pytest.mark.processes
@pytest.mark.usefixtures("forked")
def test_a_refused_command_line_raises_its_own_one_line_reason(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SweepError, match=r"^unlearnbench: invalid config: train\.epochs=0 is not valid; valid: >= 1"):
        run_sweep(["train.epochs=0"], sweep_dir="sweep", quiet=True)
    assert not list(tmp_path.glob("sweep/*/result.json"))


@pytest.mark.processes
@pytest.mark.usefixtures("forked")
def test_a_refused_command_line_raises_on_a_sweep_that_has_results_already(example, monkeypatch):
    folder, _ = example
    monkeypatch.chdir(folder)
    with pytest.raises(SweepError, match=r"^unlearnbench: invalid config: train\.epochs=0"):
        run_sweep([*OVERRIDES, "train.epochs=0"], sweep_dir="runs/quick_study", quiet=True)


@pytest.mark.processes
@pytest.mark.usefixtures("forked")
def test_a_sweep_with_a_failed_job_returns_the_records_there_are_and_warns(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match=r"1 of 1 jobs of sweep did not complete .*FAILED .*unknown class "
                                         r"'nonesuch'"):
        records = run_sweep(["+method=finetune", "scenario.targets=[nonesuch]"], sweep_dir="sweep")
    assert records.empty and {"status", "value", "metric"} <= set(records.columns)  # it failed before any record
    assert len(records.attrs["failed"]) == 1
    assert "unknown class 'nonesuch' for dataset digits" in capsys.readouterr().out  # echoed, not quiet


INTERRUPTED = """
from unlearnbench import run_sweep
run_sweep(["+method=finetune", "seeds.train=range(4)", "runtime.threads=1"], sweep_dir="sweep")
"""


@pytest.mark.processes
def test_ctrl_c_stops_the_sweep_and_raises_keyboard_interrupt(tmp_path):
    """As in a notebook: SIGINT reaches the Python process only, which stops the sweep's process and raises."""
    import psutil

    caller = subprocess.Popen([sys.executable, "-c", INTERRUPTED], cwd=tmp_path, env=user_environment(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        for line in caller.stdout:
            if "original model (training seed 0): started" in line:
                break
        sweep_processes = psutil.Process(caller.pid).children(recursive=True)
        assert sweep_processes
        caller.send_signal(signal.SIGINT)
        rest, errors = caller.communicate(timeout=120)
    finally:
        caller.kill()
    assert caller.returncode != 0 and "KeyboardInterrupt" in errors
    assert "unlearnbench: interrupted; finished jobs are kept" in rest  # the sweep's own last line, echoed
    _, alive = psutil.wait_procs(sweep_processes, timeout=30)
    assert not alive
    assert not list(tmp_path.glob("sweep/*/result.json.*"))  # nothing half-written


@pytest.mark.processes
@pytest.mark.usefixtures("forked")
def test_run_sweep_finds_a_package_in_the_current_folder_and_config_dir_adds_configs(tmp_path, monkeypatch):
    """The sweep's process imports from the current folder (as `python -m` does): a notebook's own package next to
    it needs no PYTHONPATH; where it is absent the message says that the folder was searched."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "mine.yaml").write_text("_target_: minepkg.mine.Mine\nname: mine\nbogus: 1\n")
    with pytest.raises(SweepError, match=rf"cannot import _target_ minepkg\.mine\.Mine: .*the current folder, "
                                         rf"{tmp_path}, is searched too"):
        run_sweep(["+method=mine"], sweep_dir="sweep", config_dir="conf", quiet=True)
    (tmp_path / "minepkg").mkdir()
    (tmp_path / "minepkg" / "mine.py").write_text(
        "from unlearnbench.tasks.image.methods.base import Method\n\n\n"
        "class Mine(Method):\n    def unlearn(self, model, task):\n        return model\n")
    # found and imported: its signature is checked (before any job), which needs the class itself
    with pytest.raises(SweepError, match=r"^unlearnbench: method mine: unknown option bogus; valid options: name$"):
        run_sweep(["+method=mine"], sweep_dir="sweep", config_dir="conf", quiet=True)
