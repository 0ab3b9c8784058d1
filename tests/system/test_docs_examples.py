"""The Extending page's worked example, run as a user runs it: the files of docs/examples/extending/ (a method, a
dataset, a scenario and a metric in the user's own package, each with its YAML in the user's config folder) copied
into a folder outside the repository, and the page's commands run there through the console script."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import forkserver
import numpy as np
import pandas as pd
import pytest
from helpers import QUICK_REPORT, REPO, user_environment, with_defaults

pytestmark = pytest.mark.processes  # every test here starts processes: the console script, ranks or a cluster

EXAMPLE = REPO / "docs" / "examples" / "extending"
BIN = Path(sys.executable).parent
# the page's command, with the test's one thread and 3 training epochs, not the dataset's 8 (M_o and each M_r in 3/8
# of the time: no assertion reads how well a model learned)
TOGETHER = ["--config-dir", "conf", "+method=noisy", "dataset=npz_digits", "scenario=class_sample",
            "scenario.targets=[3]", "+metric=margin", "runtime.threads=1", "train.epochs=3", "train.milestones=[2]"]
SPLITS = ("forget_train", "retain_train", "forget_test", "retain_test")


def environment(pythonpath: bool) -> dict:
    """The user's shell: no unlearnbench variables of the test run, the package found only through PYTHONPATH=."""
    env = user_environment()
    return {**env, "PYTHONPATH": "."} if pythonpath else env


def unlearnbench(project: Path, args: list[str], pythonpath: bool = True,
                 fork: bool = True) -> subprocess.CompletedProcess:
    """The console script in the project folder: forked from the test's fork server (forkserver.py: the same
    process without the imports), or with `fork=False` the installed script as the user's shell starts it."""
    if fork:
        return forkserver.run("unlearnbench", args, project, environment(pythonpath), timeout=600)
    return subprocess.run([str(BIN / "unlearnbench"), *args], cwd=project, env=environment(pythonpath),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The example project in a temporary folder (outside the repository), its data made by its own script."""
    folder = tmp_path_factory.mktemp("myproject")
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    assert REPO not in folder.parents
    made = subprocess.run([sys.executable, "make_npz.py"], cwd=folder, env=environment(False), capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return folder


@pytest.fixture(scope="module")
def together(project) -> tuple[subprocess.CompletedProcess, dict, pd.DataFrame]:
    """The page's "all three together" command."""
    run = unlearnbench(project, [*TOGETHER, "hydra.sweep.dir=sweep"], fork=False)
    (path,) = (project / "sweep").glob("*/result.json")
    return run, json.loads(path.read_text()), pd.read_parquet(path.parent / "examples.parquet")


def test_method_dataset_scenario_and_metric_of_ones_own_run_together(project, together):
    run, result, examples = together
    assert run.returncode == 0, run.stderr
    assert result["status"] == "complete" and not result["failures"]
    assert (result["job"]["dataset"], result["job"]["scenario"], result["job"]["method"]) == \
        ("npz_digits", "class_sample", "noisy")
    with np.load(project / "data" / "npz_digits" / "train.npz") as train:
        labels = train["labels"]
    assert result["dataset"]["train"] == len(labels) and result["dataset"]["classes"] == 10
    # D_f: ceil(half) of class 3's training images, and only class 3's
    forget = examples[(examples.role == "original") & (examples.split == "forget_train")]
    assert len(forget) == math.ceil(0.5 * (labels == 3).sum()) and set(forget.label) == {3}
    assert len(set(forget["index"])) == len(forget) and set(labels[forget["index"]]) == {3}
    unlearned = {(r["metric"], r["split"]) for r in result["records"] if r["method"] == "noisy"}
    assert {("acc", "forget_test"), ("acc", "retain_test"), ("delta_acc", "forget_train"),
            ("layer_distance", None)} <= unlearned
    values = [r["value"] for r in result["records"] if r["method"] == "noisy" and r["metric"] == "acc"]
    assert values and all(0 <= v <= 1 for v in values)
    assert [c["model"] for c in result["curves"] if c["method"] == "noisy"] == ["unlearned"]  # its training curve


def test_a_metric_of_ones_own_is_recorded_declared_and_ranked(project, together, tmp_path, monkeypatch):
    """The margin metric: its function (checked on logits worked out by hand), its records for every model on every
    split, its declaration in result.json, its label and best value in the report, and the leaderboard naming it."""
    monkeypatch.syspath_prepend(str(project))
    import torch
    from mypkg.margin import Margin

    from unlearnbench.core.catalogue import RETRAINED
    from unlearnbench.report.build import build_report

    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    assert Margin()(logits, torch.tensor([0, 2])) == pytest.approx(((2 - 1) + (1 - 3)) / 2)
    assert math.isnan(Margin()(logits[:0], torch.tensor([], dtype=torch.long)))
    _, result, _ = together
    margins = {(r["role"], r["split"]): r["value"] for r in result["records"] if r["metric"] == "margin"}
    assert set(margins) == {(role, split) for role in ("original", "retrained", "unlearned") for split in SPLITS}
    assert all(math.isfinite(value) for value in margins.values())
    (declared,) = [m for m in result["catalogue"]["metrics"] if m["name"] == "margin"]
    assert (declared["label"], declared["ideal"], declared["headline"]) == ("margin", RETRAINED, ["forget_train"])
    # a second method to rank (M_o, M_r cached): gradient ascent, 5 steps on D_f where fine-tuning takes 5 epochs;
    # its sweep's own report a quick one (the test builds its own)
    other = unlearnbench(project, with_defaults([*(a for a in TOGETHER if a != "+method=noisy"),
                                                 "+method=gradient_ascent", "hydra.sweep.dir=second"], QUICK_REPORT))
    assert other.returncode == 0, other.stderr
    report = build_report([project / "sweep", project / "second"], tmp_path / "report", figures=False,
                          leaderboard_metrics=["margin:forget_train"])
    board = pd.read_csv(tmp_path / "report" / "leaderboard.csv")
    assert set(board["metric"]) == {"margin"} and set(board["method"]) == {"noisy", "gradient_ascent"}
    summary = report.study.summary
    row = summary[(summary["metric"] == "margin") & (summary["split"] == "forget_train")]
    assert set(row["role"]) == {"original", "retrained", "unlearned"}
    assert "margin D_f" in (tmp_path / "report" / "report.md").read_text()


def test_a_metric_of_another_task_is_refused_in_one_line(project):
    run = unlearnbench(project, ["--config-dir", "conf", "experiment=tofu", "+method=grad_ascent", "+metric=margin",
                                 "hydra.sweep.dir=othertask"])
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert ("the 'evaluation.metrics.margin' option of dataset fictitious must be a metric of the text task; got "
            "mypkg.margin.Margin, a metric of the image task instead") in run.stderr


def test_the_forget_set_is_drawn_from_the_seed(project, together):
    """A different forget-set seed draws another half of class 3 (the scenario's generator is the seed's)."""
    examples = together[2]
    again = unlearnbench(project, with_defaults([*TOGETHER, "seeds.forget=1", "hydra.sweep.dir=other"], QUICK_REPORT))
    assert again.returncode == 0, again.stderr
    (path,) = (project / "other").glob("*/examples.parquet")
    other = pd.read_parquet(path)
    first = set(examples[(examples.role == "original") & (examples.split == "forget_train")]["index"])
    second = set(other[(other.role == "original") & (other.split == "forget_train")]["index"])
    assert len(first) == len(second) and first != second


def test_an_option_out_of_its_declared_range_is_one_line(project):
    run = unlearnbench(project, ["--config-dir", "conf", "+method=noisy", "method.sigma=0", "hydra.sweep.dir=bad"])
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "method noisy: method.sigma=0 is not valid; valid: > 0" in run.stderr  # as the page says
    scenario = unlearnbench(project, [*TOGETHER, "scenario.fraction=1.5", "hydra.sweep.dir=bad2"])
    assert scenario.returncode == 1 and "Traceback" not in scenario.stderr
    assert "scenario class_sample: scenario.fraction=1.5 is not valid; valid: in (0, 1)" in scenario.stderr


def test_without_pythonpath_the_message_says_how_to_make_the_package_importable(project):
    run = unlearnbench(project, ["--config-dir", "conf", "+method=noisy", "hydra.sweep.dir=nopath"], pythonpath=False)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    line = next(line for line in run.stderr.splitlines() if "cannot import _target_ mypkg.noisy.NoisyFineTune" in line)
    assert f"the current folder, {project}, is not searched" in line
    assert "pip install -e DIR" in line and "PYTHONPATH=." in line


def test_missing_dataset_files_name_the_file_and_the_script(project, tmp_path):
    run = unlearnbench(project, ["--config-dir", "conf", "dataset=npz_digits", "+method=finetune",
                                 f"paths.data_dir={tmp_path}", "hydra.sweep.dir=nodata"])
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert f"dataset npz_digits: missing {tmp_path / 'npz_digits' / 'train.npz'}" in run.stderr
    assert "write them with numpy.savez (see make_npz.py)" in run.stderr


def test_the_projects_pyproject_builds_a_wheel_holding_the_package(project, tmp_path):
    """`pip install -e .`, as the page offers instead of PYTHONPATH: its pyproject.toml packages mypkg."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(tmp_path), "."], cwd=project, capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("mypkg-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"mypkg/__init__.py", "mypkg/noisy.py", "mypkg/npz_images.py", "mypkg/class_sample.py",
            "mypkg/margin.py"} <= names
