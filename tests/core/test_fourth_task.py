"""A fourth task added from outside the project (tests/fourth_task/: a package and its configs on Hydra's search
path) runs a sweep through the console script's own path, its option declared and checked by the core, with no file
of unlearnbench naming it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import fourth_task.options  # noqa: F401  (its options registered before Hydra composes: unlearnbench.conf's own way)
import pytest

from unlearnbench import cli

HERE = Path(__file__).resolve().parents[1] / "fourth_task"
PROJECT = Path(__file__).resolve().parents[2] / "unlearnbench"


def sweep(tmp_path: Path, *overrides: str) -> tuple[int, list[dict]]:
    """`unlearnbench` in this process on the tally task: its exit status and its jobs' results."""
    argv = ["unlearnbench", f"hydra.searchpath=[file://{HERE / 'conf'}]", "dataset=tally", "model=mean",
            "scenario=forget_group", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.cache_dir={tmp_path / 'cache'}",
            "runtime.progress=false", "runtime.print_table=false", "report.figures=false", *overrides]
    with mock.patch.object(sys, "argv", argv), pytest.raises(SystemExit) as stop:
        cli.main()
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/result.json"))]
    return stop.value.code, results


def values(result: dict) -> dict[tuple, float]:
    return {(r["method"] or r["role"], r["metric"]): r["value"] for r in result["records"]
            if r["metric"] in ("mean", "gap")}


def test_fourth_task_runs_a_sweep_of_its_methods_with_its_own_option(tmp_path):
    code, results = sweep(tmp_path, "seeds.train=0,1", "evaluation.decimals=6")
    assert code == 0 and len(results) == 2
    for result in results:
        assert result["status"] == "complete" and result["job"]["task"] == "tally"
        scores = values(result)
        assert scores[("subtract", "gap")] == 0.0 and scores[("subtract", "mean")] == scores[("retrained", "mean")]
        assert scores[("keep", "gap")] > 0.1 and scores[("keep", "mean")] == scores[("original", "mean")]
        assert all(round(v, 6) == v for v in scores.values())
        assert {m["name"] for m in result["catalogue"]["metrics"]} >= {"mean", "gap"}
    report = (tmp_path / "sweep" / "report" / "report.md").read_text()
    assert "subtract" in report and "keep" in report


def test_fourth_task_option_is_checked_against_its_declaration(tmp_path):
    code, results = sweep(tmp_path, "evaluation.decimals=-1")
    assert code != 0 and not results


def test_fourth_task_is_named_by_no_file_of_the_project():
    named = [p for p in PROJECT.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml")
             and ("tally" in p.read_text() or "fourth_task" in p.read_text())]
    assert named == []


def test_a_dataset_that_names_no_task_is_refused_in_one_line():
    from helpers import compose_config
    from omegaconf import MISSING

    from unlearnbench.core.config import validate
    from unlearnbench.runtime.errors import UserError

    cfg = compose_config([])
    cfg.task.name = MISSING
    with pytest.raises(UserError, match=r"^dataset digits names no task: a dataset config selects its task in its "
                                        r"defaults list \(`defaults: \[/task: image\]`"):
        validate(cfg)
