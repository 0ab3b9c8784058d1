"""`make study` (scripts/seed_study.py) on a small design: two sweeps, one report over both, the seed-study figure
and the table docs/seed-study.md shows; and the `methods=[…]` option it relies on."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import unittest.mock
from pathlib import Path
from types import SimpleNamespace

import forkserver
import pandas as pd
import pytest
from helpers import TINY, results, run_cli

from unlearnbench.core.errors import UserError
from unlearnbench.core.job import chosen

REPO = Path(__file__).resolve().parents[2]


def study_script():
    spec = importlib.util.spec_from_file_location("seed_study", REPO / "scripts" / "seed_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study(tmp_path_factory, shared_cache):
    """The script on 3 training × 2 unlearning seeds, its `main` in this process and its two sweeps forked from the
    test's fork server (forkserver.py: the console-script commands it runs, without an interpreter's imports each).
    Its sweeps run under the basic launcher (a later `hydra/launcher` wins over the script's `local`): the launcher
    does not change a job's records (test_launcher.py), and on a busy machine two workers' start-up would cost more
    than their parallelism wins."""
    root = tmp_path_factory.mktemp("study")
    script = study_script()

    def forked(command: list[str], check: bool) -> subprocess.CompletedProcess:
        assert command[0] == str(Path(sys.executable).parent / "unlearnbench") and check, command
        done = forkserver.run("unlearnbench", command[1:], root, dict(os.environ), timeout=900)
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done

    script.subprocess = SimpleNamespace(run=forked)
    # report.figures=false: the sweeps' own reports; the study's report draws its figure
    argv = ["seed_study.py", "--out", str(root / "study"), "--train-seeds", "3", "--unlearn-seeds", "2", "--methods",
            "ssd,finetune", f"paths.cache_dir={shared_cache}", f"paths.data_dir={root / 'data'}",
            "report.target_se=0.02", *TINY, "hydra/launcher=basic", "report.figures=false"]
    printed, returncode, reason = io.StringIO(), 0, ""
    with contextlib.chdir(root), contextlib.redirect_stdout(printed), unittest.mock.patch.object(sys, "argv", argv):
        try:
            script.main()
        except SystemExit as stop:  # the script's own refusal or failure
            returncode, reason = stop.code if isinstance(stop.code, int) else 1, str(stop.code)
        except subprocess.CalledProcessError as failed:  # a sweep's
            returncode, reason = failed.returncode, failed.stderr
    return root / "study", SimpleNamespace(returncode=returncode, stdout=printed.getvalue(), stderr=reason)


@pytest.mark.processes
def test_the_study_runs_both_designs_and_reports_them_together(study):
    folder, run = study
    assert run.returncode == 0, run.stderr[-3000:]
    single, multi = results(folder / "single"), results(folder / "multi")
    assert sorted((r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in single.values()) == [(0, 0), (0, 1)]
    assert sorted((r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in multi.values()) == [(1, 1), (2, 2)]
    for result in [*single.values(), *multi.values()]:  # methods=[…]: exactly those two, in one job
        assert {r["method"] for r in result["records"] if r["role"] == "unlearned"} == {"ssd", "finetune"}
    report = folder / "report"
    assert (report / "figures" / "seed_study_digits_resnet18_full_class_3.png").stat().st_size > 0
    by_seed = pd.read_csv(report / "wasserstein_by_seed.csv")
    assert set(by_seed["seed_train"]) == {0} and set(by_seed["n_B"]) == {2}  # A(0) against B without seed 0


@pytest.mark.processes
def test_the_printed_table_shows_ssd_constant_across_unlearning_seeds(study):
    _, run = study
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in run.stdout.splitlines() if line.startswith("| ") and not line.startswith("| method")}
    assert set(rows) == {"ssd", "finetune"}
    assert rows["ssd"][2] == "0" and rows["ssd"][6] == "0"  # its own accuracies do not depend on the unlearning seed
    plans = pd.read_csv(study[0] / "report" / "seed_plan.csv")
    ssd = plans[(plans["method"] == "ssd") & (plans["metric"] == "acc") & (plans["split"] == "forget_test")]
    assert ssd["note"].str.contains("extra unlearning seeds buy nothing").all()
    # each sweep's own report (the end-of-sweep callback) takes `report.target_se` from the command line
    assert set(pd.read_csv(study[0] / "single" / "report" / "seed_plan.csv")["target_se"]) == {0.02}


def test_the_docs_show_the_studys_figure_and_generated_table():
    page = (REPO / "docs" / "seed-study.md").read_text()
    module = study_script()
    block = page[page.index(module.BEGIN):page.index(module.END)]
    assert "regenerated by `make study`" in block and "Numbers from " in block
    assert [line.split("|")[1].strip() for line in block.splitlines() if line.startswith("| ")][1:] == module.METHODS
    assert "](seed_study.png)" in page and (REPO / "docs" / "seed_study.png").stat().st_size > 10_000
    assert "(docs/seed_study.png)" in (REPO / "README.md").read_text()  # the README shows the figure too



@pytest.mark.processes
def test_methods_option_rejects_unknown_names_and_the_combination_with_plus_method(tmp_path):
    unknown = run_cli(["methods=[ssd,nonesuch]", *TINY], tmp_path)
    assert unknown.returncode != 0
    assert "methods: unknown method nonesuch; valid: altpo, bad_teacher," in unknown.stderr  # every method, sorted
    assert "Traceback" not in unknown.stderr and not (tmp_path / "sweep").exists()
    both = run_cli(["methods=[ssd]", "+method=ssd", *TINY], tmp_path)
    assert both.returncode != 0 and "not both" in both.stderr
    registered = [{"name": "finetune"}, {"name": "ssd"}, {"name": "lfssd"}]  # the task's methods, registry order
    assert [m["name"] for m in chosen(registered, ["ssd", "finetune"], "image_classification")] == ["finetune", "ssd"]
    assert chosen(registered, None, "image_classification") == registered
    for names, wrong in ((["ssd", "fedremove"], "fedremove"), ([], "(none given)")):
        with pytest.raises(UserError, match=rf"methods: {re.escape(wrong)} is not a method of the image_classification "
                                            r"task; valid: finetune, ssd, lfssd"):
            chosen(registered, names, "image_classification")
