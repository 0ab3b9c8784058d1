"""`report.best_step=true` (compute/dynamics.py `best_own_steps`, render/tuning.py `best_own_lines`): per job the
step closest to the goal on its own run, beside the job's final value, labelled optimistic; off by default. On
fabricated result.json files, the values computed here independently."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from unlearnbench.report.compute.analysis import analyse
from unlearnbench.report.compute.dynamics import analyse_dynamics, best_own_summary
from unlearnbench.report.read.collect import catalogue_of, load_results
from unlearnbench.report.render.tuning import best_own_lines

# Δacc (ideal 0) and acc (goal: M_r's mean) on D'_f along the steps, per training seed; M_r's acc 0.1 and 0.3
ALONG = {0: {0: (0.6, 0.9), 5: (-0.2, 0.4), 10: (0.1, 0.15)},
         1: {0: (0.7, 0.9), 5: (0.05, 0.2), 10: (-0.3, 0.5)}}
FINAL = {0: (0.12, 0.16), 1: (-0.31, 0.52)}
RETRAINED = {0: 0.1, 1: 0.3}
METRICS = ("delta_acc", "acc")


def catalogue() -> dict:
    from unlearnbench.core.catalogue import with_core
    from unlearnbench.tasks.image.catalogue import CATALOGUE

    return with_core(CATALOGUE).holding(set(METRICS)).as_dict()


def record(role: str, metric: str, value: float, **step) -> dict:
    return {"target": "3", "method": "finetune" if role == "unlearned" else None, "role": role, "metric": metric,
            "split": "forget_test", "value": value, **step}


def write(root: Path, seed: int) -> None:
    records = [record("retrained", "acc", RETRAINED[seed]), record("retrained", "delta_acc", 0.0),
               *(record("unlearned", m, v) for m, v in zip(METRICS, FINAL[seed], strict=True))]
    records += [record("unlearned", m, v, step=step, epoch=step // 5)
                for step, values in ALONG[seed].items() for m, v in zip(METRICS, values, strict=True)]
    job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
           "method": "finetune", "seed_train": seed, "seed_unlearn": seed, "seed_eval": seed, "strategy": "single",
           "precision": "32-true", "devices": 1}
    folder = root / f"job{seed}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"schema": 2, "status": "complete", "error": None, "job": job,
                                                    "records": records, "catalogue": catalogue()}))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("best_step")
    for seed in ALONG:
        write(root, seed)
    frame, jobs = load_results([root])
    return lambda best_step: analyse_dynamics(analyse(frame, catalogue_of(jobs), 20), jobs, best_step)


def test_each_jobs_best_step_on_its_own_run_beside_its_final_value(study):
    own = study(True).dynamics_best_own.set_index(["metric", "seed_train"])
    goal = sum(RETRAINED.values()) / 2  # acc's goal: M_r's mean over training seeds, as dynamics_best.csv's
    expected = {("delta_acc", 0): (0.0, 10, 0.1), ("delta_acc", 1): (0.0, 5, 0.05),
                ("acc", 0): (goal, 10, 0.15), ("acc", 1): (goal, 5, 0.2)}
    for key, (want_goal, step, value) in expected.items():
        row = own.loc[key]
        assert (row["goal"], row["best_step"], row["best_value"]) == (pytest.approx(want_goal), step,
                                                                       pytest.approx(value))
        final = FINAL[key[1]][METRICS.index(key[0])]
        assert row["final_value"] == pytest.approx(final) and row["steps"] == 3 and row["last_step"] == 10
    assert own.loc[("acc", 1), "best_epoch"] == 1  # step 0 (M_o) counts as a step of the run, as in dynamics_best


def test_the_summary_sets_the_optimistic_numbers_beside_the_final_ones(study):
    result = study(True)
    summary = best_own_summary(result.dynamics_best_own, result.keys).set_index("metric")
    delta = summary.loc["delta_acc"]
    assert delta["final_distance"] == pytest.approx((0.12 + 0.31) / 2)
    assert delta["best_own_distance"] == pytest.approx((0.1 + 0.05) / 2)
    assert (delta["best_step_min"], delta["best_step_median"], delta["best_step_max"], delta["jobs"]) == (5, 7.5,
                                                                                                         10, 2)
    lines = best_own_lines(result.dynamics_best_own, result.keys, result.catalogue.label)
    assert "optimistic" in lines[0] and "tune.stop_step=true" in lines[0]
    assert any("| finetune |" in line and "0.075" in line and "0.215" in line for line in lines)


def test_off_by_default(study):
    result = study(False)
    assert not result.dynamics_best.empty  # the dynamics are there
    assert getattr(result, "dynamics_best_own", pd.DataFrame()).empty
    assert best_own_lines(getattr(result, "dynamics_best_own", None), result.keys, result.catalogue.label) == []
