"""`experiment=tune` with `tune.stop_step=true` (docs/tuning.md, "The stopping step"): the best (point, step) is
chosen from the trials' step records with the tuner's objective, the held-out jobs rerun the method to that step,
tuning.csv gives its optimism; the methods that cannot stop at a step, and the settings that cannot, are refused in
one line. On fabricated result.json files, and one tiny real sweep on digits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import TINY, run_cli

from unlearnbench.core.tuning import Defaults, Dimension, Settings, Stopping, stopping_of
from unlearnbench.report.compute.tuning import score_folders, tuning_rows
from unlearnbench.runtime.errors import UserError

OBJECTIVE = ["delta_acc:forget_train", "delta_acc:retain_test"]
# |Δacc| per (training seed, step, split): step 0 is M_o, never a stopping point, however good
ALONG = {0: {0: (0.0, 0.0), 1: (0.5, 0.1), 2: (0.2, 0.1), 3: (0.1, 0.3)},
         1: {0: (0.0, 0.0), 1: (0.4, 0.0), 2: (0.1, 0.2), 3: (0.0, 0.5)}}
FINAL = {0: (0.05, 0.02), 1: (0.07, 0.03)}  # better than any step: the choice must not read the final records


def catalogue() -> dict:
    from unlearnbench.core.catalogue import with_core
    from unlearnbench.tasks.image.catalogue import CATALOGUE

    return with_core(CATALOGUE).holding({"delta_acc"}).as_dict()


def record(split: str, value: float, **step) -> dict:
    return {"target": "3", "method": "gradient_ascent", "role": "unlearned", "metric": "delta_acc", "split": split,
            "value": value, **step}


def write_job(folder: Path, seed: int, steps: dict, final: tuple, epochs_per_step: float = 1.0) -> Path:
    records = [record(split, value) for split, value in zip(("forget_train", "retain_test"), final, strict=True)]
    for step, values in steps.items():
        records += [record(split, value, step=step * 4, epoch=int(step * epochs_per_step))
                    for split, value in zip(("forget_train", "retain_test"), values, strict=True)]
    job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
           "method": "gradient_ascent", "seed_train": seed, "seed_unlearn": seed, "seed_eval": seed,
           "strategy": "single", "precision": "32-true", "devices": 1, "tuning": "trial"}
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"schema": 2, "status": "complete", "error": None, "job": job,
                                                    "records": records, "catalogue": catalogue()}))
    return folder


@pytest.fixture
def trial(tmp_path) -> list[Path]:
    return [write_job(tmp_path / f"t{seed}", seed, ALONG[seed], FINAL[seed]) for seed in ALONG]


def test_the_step_is_chosen_on_the_tuning_seeds_step_records_with_the_tuners_objective(trial):
    expected = {step: float(np.mean([np.mean(ALONG[seed][step]) for seed in ALONG])) for step in (1, 2, 3)}
    scored = score_folders(trial, "gradient_ascent", OBJECTIVE, "step")
    assert scored.reason is None and scored.steps == pytest.approx({4 * s: v for s, v in expected.items()})
    assert (scored.step, scored.epoch) == (8, 2.0)  # step 2: 0.15, below step 1's 0.25 and step 3's 0.225
    assert scored.value == pytest.approx(expected[2]) and scored.by_seed() == pytest.approx(
        {0: np.mean(ALONG[0][2]), 1: np.mean(ALONG[1][2])})
    record = scored.as_record()
    assert (record["step"], record["epoch"], record["objective"]) == (8, 2.0, pytest.approx(0.15))
    final = score_folders(trial, "gradient_ascent", OBJECTIVE)  # without stop_step: the final records, as ever
    assert final.value == pytest.approx(np.mean([np.mean(v) for v in FINAL.values()])) and "step" not in \
        final.as_record()


def test_an_epoch_count_groups_the_seeds_records_by_epoch_and_ties_go_to_the_earliest(tmp_path):
    along = {0: {1: (0.2, 0.2), 2: (0.1, 0.3)}, 1: {1: (0.1, 0.1), 2: (0.2, 0.0)}}  # both epochs 0.15
    folders = [write_job(tmp_path / f"t{seed}", seed, along[seed], FINAL[seed]) for seed in along]
    scored = score_folders(folders, "gradient_ascent", OBJECTIVE, "epoch")
    assert scored.steps == pytest.approx({1: 0.15, 2: 0.15}) and (scored.step, scored.epoch) == (4, 1.0)


def test_an_objective_metric_the_step_records_lack_is_refused_in_one_line(trial):
    with pytest.raises(UserError) as error:
        score_folders(trial, "gradient_ascent", [*OBJECTIVE, "delta_acc:forget_test"], "step")
    assert "hold no delta_acc:forget_test" in str(error.value) and "\n" not in str(error.value)


def test_the_held_out_jobs_rerun_the_point_to_the_chosen_step():
    from hydra_plugins.unlearnbench_launcher.tune import MethodTuning

    space = [Dimension("lr", 1e-3, 1.0, log=True), Dimension("epochs", 1, 9, integer=True)]
    settings = Settings(2, [0], [1], 0, OBJECTIVE, sets=((0,),), stop_step=True)
    tuning = MethodTuning("gradient_ascent", ["+method=gradient_ascent", "train.epochs=3"], space,
                          Defaults({"lr": 0.01, "epochs": 5}), settings, Stopping("method.epochs", "epoch"))
    best = {"params": {"lr": 0.5, "epochs": 7}, "drawn": "tpe", "step": 12, "epoch": 3.0}
    assert tuning.tuned_overrides(best) == ["+method=gradient_ascent", "train.epochs=3", "method.lr=0.5",
                                            "method.epochs=3"]  # the point's 7 epochs cut at the chosen 3
    tuning.stopping = Stopping("train.unlearn.max_steps", "step")
    tuning.overrides = ["+method=npo", "train.unlearn.max_steps=80"]
    assert tuning.tuned_overrides({**best, "drawn": "defaults"}) == ["+method=npo", "train.unlearn.max_steps=12"]


def test_tuning_csv_gives_the_chosen_steps_optimism_as_for_any_parameter():
    best = {"trial": 1, "params": {"lr": 0.5}, "drawn": "random", "state": "complete", "objective": 0.1,
            "by_seed": {"0": 0.1}, "step": 12, "epoch": 3.0, "steps": {"4": 0.3, "12": 0.1}}
    defaults = {**best, "trial": 0, "drawn": "defaults", "objective": 0.2, "step": 4, "epoch": 1.0}
    heldout = {"tuned": {"objective": 0.16, "by_seed": {"1": 0.15, "2": 0.17}},
               "default": {"objective": 0.3, "by_seed": {"1": 0.31, "2": 0.29}}}
    tuning = {"heldout": [1, 2], "methods": {"gradient_ascent": {"replicates": [
        {"replicate": 0, "seeds": [0], "trials": [defaults, best], "best": best, "heldout": heldout}]}}}
    row = tuning_rows([tuning]).iloc[0]
    assert (row["stop_step"], row["stop_epoch"]) == (12, 3.0)
    assert row["optimism"] == pytest.approx(0.06) and row["gain"] == pytest.approx(0.14)
    assert "stop_step=12" in repr(row["best"]) and "stop_epoch=3" in repr(row["best"])
    plain = {**tuning, "methods": {"m": {"replicates": [{"replicate": 0, "seeds": [0], "trials": [], "best": {
        k: v for k, v in best.items() if k not in ("step", "epoch", "steps")}, "heldout": heldout}]}}}
    assert "stop_step" not in tuning_rows([plain]).columns  # a tuning without it keeps its columns


IMAGE = "unlearnbench.tasks.image.methods."
EVERY = {"evaluation": {"during": {"every": "1 epoch"}}, "train": {}}


@pytest.mark.parametrize(("target", "config", "expected"), [
    (f"{IMAGE}gradient_ascent.GradientAscent", EVERY, Stopping("method.epochs", "epoch")),
    (f"{IMAGE}scrub.Scrub", EVERY, Stopping("method.epochs", "epoch")),
    ("unlearnbench.tasks.text.methods.npo.NPO", {"evaluation": {"during": {"every": 5}}, "train": {"unlearn": {
        "schedule": "constant"}}}, Stopping("method.max_steps", "step")),
    ("unlearnbench.tasks.text.methods.npo.NPO", {"evaluation": {"during": {"every": 5}}, "train": {"unlearn": {
        "max_steps": 80, "schedule": None}}}, "linear schedule"),  # the method's own linear schedule
])
def test_how_each_method_stops_at_a_step(target, config, expected):
    method = {"_target_": target, "name": target.rsplit(".", 1)[1].lower(), "schedule": "linear"}
    if isinstance(expected, Stopping):
        assert stopping_of(method, config) == expected
        return
    with pytest.raises(UserError, match=expected):
        stopping_of(method, config)
    constant = {**config, "train": {"unlearn": {"max_steps": 80, "schedule": "constant"}}}
    assert stopping_of(method, constant) == Stopping("train.unlearn.max_steps", "step")  # it rules over the method's


@pytest.mark.parametrize(("target", "every", "why"), [
    (f"{IMAGE}l1_sparse.L1Sparse", "1 epoch", "l1 weight decays"),
    (f"{IMAGE}ssd.SSD", "1 epoch", "no steps"),
    (f"{IMAGE}unsir.Unsir", "1 epoch", "two phases"),
    (f"{IMAGE}retrain.Retrain", "1 epoch", "no option that stops"),
    (f"{IMAGE}finetune.FineTune", 5, "evaluation.during.every='N epochs'"),
    (f"{IMAGE}finetune.FineTune", None, "set evaluation.during.every"),
])
def test_a_method_or_setting_that_cannot_stop_at_a_step_is_refused_in_one_line(target, every, why):
    method = {"_target_": target, "name": "m"}
    with pytest.raises(UserError) as error:
        stopping_of(method, {"evaluation": {"during": {"every": every}}, "train": {}})
    assert why in str(error.value) and "\n" not in str(error.value)
    if every == "1 epoch":
        assert "the methods that can: the image methods finetune, gradient_ascent" in str(error.value)


def test_a_stop_step_that_is_no_boolean_is_refused():
    from omegaconf import OmegaConf

    config = OmegaConf.create({"tune": {"seeds": [0], "heldout": [1], "trials": 2, "seed": 0, "objective": None,
                                        "stop_step": "yes"}})
    with pytest.raises(UserError, match=r"'tune\.stop_step' option of experiment=tune must be true or false"):
        Settings.of(config)


# ---- a tiny real sweep: trial 0 (gradient ascent's defaults but lr; 5 epochs) on training seed 0, held out on 1 ----
# Under the basic launcher (a later `hydra/launcher` wins over experiment=tune's `local`), as test_tune.py's study:
# the sweep's process runs its three jobs one after the other instead of starting a pool of workers (their imports)
# for the two held-out jobs; what the jobs compute does not depend on the launcher.

SWEEP = ["experiment=tune", "+method=gradient_ascent", "tune.trials=1", "tune.seeds=[0]", "tune.heldout=[1]",
         "++tune.stop_step=true", "evaluation.during.every=1epoch", "evaluation.during.max_examples=100000",
         "tune.objective=[delta_acc:retain_test]", "method.lr=0.05", *TINY,  # a rate that wrecks D'_r late
         "hydra/launcher=basic"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory, shared_cache):
    folder = tmp_path_factory.mktemp("stop")
    run = run_cli([*SWEEP, f"paths.cache_dir={shared_cache}"], folder)
    assert run.returncode == 0, run.stderr[-3000:]
    jobs = {}
    for path in (folder / "sweep").glob("*/result.json"):
        result = json.loads(path.read_text())
        jobs[result["job"]["tuning"]] = (result, yaml.safe_load((path.parent / ".hydra/overrides.yaml").read_text()))
    return folder / "sweep", jobs


@pytest.mark.processes
def test_a_tiny_sweep_chooses_a_step_and_reruns_the_method_to_it_on_the_held_out_seed(swept):
    sweep, jobs = swept
    record = json.loads((sweep / "tuning.json").read_text())
    method = record["methods"]["gradient_ascent"]
    best = method["replicates"][0]["best"]
    assert method["stop_step"] == {"key": "method.epochs", "unit": "epoch"} and record["stop_step"] is True
    steps = {int(k): v for k, v in best["steps"].items()}
    assert sorted(steps) == [1, 2, 3, 4, 5] and best["objective"] == min(steps.values())
    epoch = int(best["epoch"])
    assert epoch < 5  # a step inside the run: the rerun is cut short
    assert steps[epoch] == best["objective"] and all(steps[e] > best["objective"] for e in steps if e < epoch)
    tuned, tuned_overrides = jobs["tuned"]
    default, default_overrides = jobs["default"]
    assert f"method.epochs={epoch}" in tuned_overrides and not any("method.epochs" in o for o in default_overrides)
    # the rerun to the chosen epoch is the defaults' run stopped there: its final Δacc is the held-out defaults'
    # step record at that epoch (the points score every example: max_examples above every split)
    finals = {(r["metric"], r["split"]): r["value"] for r in tuned["records"]
              if r["role"] == "unlearned" and "step" not in r and r["metric"] == "delta_acc"}
    along = {(r["metric"], r["split"]): r["value"] for r in default["records"]
             if r["role"] == "unlearned" and r.get("epoch") == epoch and r.get("step") and r["metric"] == "delta_acc"}
    assert finals and finals == pytest.approx(along, abs=1e-9)
    row = pd.read_csv(sweep / "report" / "tuning.csv").iloc[0]
    assert row["stop_epoch"] == epoch and row["objective_tuning"] == pytest.approx(best["objective"])
    assert row["optimism"] == pytest.approx(row["objective_heldout"] - row["objective_tuning"])
    assert row["objective_heldout"] == pytest.approx(abs(finals[("delta_acc", "retain_test")]))
    assert math.isfinite(row["objective_default"])


@pytest.mark.processes
def test_a_method_that_cannot_stop_is_refused_before_any_job(tmp_path, shared_cache):
    ssd = [a for a in SWEEP[2:] if not a.startswith("method.")]  # SSD has no learning rate
    run = run_cli([*SWEEP[:1], "+method=ssd", *ssd, f"paths.cache_dir={shared_cache}"], tmp_path)
    assert run.returncode == 1 and not list((tmp_path / "sweep").glob("*/result.json"))
    assert "cannot rerun method ssd to a chosen step: it takes no steps" in run.stderr
