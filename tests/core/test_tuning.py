"""experiment=tune's parts that run without a process: the search spaces the methods declare, the seeded search,
the settings and command line it refuses, the objective (the leaderboard's rule, scaled) on fabricated records
against a hand computation, and the tuning tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import REPO
from omegaconf import OmegaConf
from scipy import stats

from unlearnbench.core.catalogue import RETRAINED, Catalogue, Metric
from unlearnbench.core.components import build, option_names, target_of
from unlearnbench.core.errors import UserError
from unlearnbench.core.tuning import Dimension, Search, Settings, search_space, split_arguments
from unlearnbench.report.compute.tuning import objective, tuning_rows, without_trials

METHODS = REPO / "conf" / "method"
GOLD = {"retrain", "text_retrain", "fed_retrain", "fed_original"}


def method_config(name: str) -> dict:
    return yaml.safe_load((METHODS / f"{name}.yaml").read_text())


def test_every_image_and_text_method_but_the_gold_standards_declares_a_space_that_parses():
    declared = {}
    for path in sorted(METHODS.glob("*.yaml")):
        config = method_config(path.stem)
        if config["_target_"].split(".")[2] == "ranking" or path.stem in GOLD:
            assert "tune" not in config or path.stem not in GOLD, path.stem
            continue
        space = search_space(config, option_names(target_of(config, "method")))
        declared[path.stem] = {d.name for d in space}
        for dimension in space:
            assert dimension.distribution() is not None
    assert len(declared) == 24 and all("lr" in names for m, names in declared.items() if "ssd" not in m)


def test_the_constructor_never_sees_the_search_space():
    config = {k: v for k, v in method_config("finetune").items() if k != "batch_size"}
    assert "tune" in config and build(config, "method").name == "finetune"


@pytest.mark.parametrize(("block", "message"), [
    (None, "method finetune declares no search space"),
    ({"momentum_x": {"low": 0.1, "high": 1.0}}, "the 'tune.momentum_x' entry of method finetune must name one of its "
                                                "options (name, epochs, lr"),
    ({"lr": {"low": 0.1, "high": 0.1}}, "must be {low, high[, log: bool, int: bool]} with low < high"),
    ({"lr": {"low": 0.0, "high": 1.0, "log": True}}, "low > 0 on a log scale"),
    ({"epochs": {"low": 1.5, "high": 3, "int": True}}, "whole bounds for an integer"),
    ({"lr": [0.1, 0.2]}, "must be {low, high[, log, int]} or {choices: [...]}; got [0.1, 0.2] instead"),
    ({"epochs": {"choices": [3]}}, "must be {choices: [two or more values]}"),
])
def test_a_malformed_search_space_is_refused_in_one_line(block, message):
    config = {**method_config("finetune"), "tune": block}
    with pytest.raises(UserError) as refused:
        search_space(config, option_names(target_of(config, "method")))
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_points_override_the_options_in_full():
    assert Dimension("lr", 1e-5, 0.1, log=True).override(0.012345678901234) == "method.lr=0.012345678901234"
    assert Dimension("epochs", 1, 10, integer=True).override(3) == "method.epochs=3"
    assert Dimension("retain_loss", choices=("nll", "kl")).override("kl") == "method.retain_loss=kl"


def points(seed: int, method: str = "npo", fail: int | None = None) -> list[dict]:
    space = [Dimension("lr", 1e-5, 1e-2, log=True), Dimension("epochs", 1, 20, integer=True),
             Dimension("retain_loss", choices=("nll", "kl"))]
    search, found = Search(space, seed, method), []
    for number in range(14):  # past TPE's 10 random start-up trials
        trial = search.ask()
        found.append(dict(trial.params))
        score = (math.log10(trial.params["lr"]) + 3) ** 2 + trial.params["epochs"] / 100
        search.tell(trial, None if number == fail else score)
    return found


def test_the_search_is_drawn_from_tune_seed_and_the_method_and_repeats_itself():
    first = points(0)
    assert points(0) == first  # what resuming a sweep relies on
    assert points(1) != first and points(0, "simnpo") != first
    failed = points(0, fail=3)
    assert failed[:4] == first[:4]  # a failed trial is no score: what follows may differ, what came before not
    assert all(1e-5 <= p["lr"] <= 1e-2 and 1 <= p["epochs"] <= 20 and isinstance(p["epochs"], int) for p in first)


def settings_of(**tune) -> Settings:
    return Settings.of(OmegaConf.create({"tune": {"trials": 3, "seeds": [0], "heldout": [1, 2], "seed": 0,
                                                  "objective": None, **tune}}))


@pytest.mark.parametrize(("tune", "message"), [
    ({"heldout": [2, 0]}, "the 'tune.heldout' option must hold training seeds the trials never see; got [2, 0], "
                          "which shares 0 with tune.seeds"),
    ({"seeds": []}, "the 'tune.seeds' option must list distinct training seeds, one at least; got [] instead"),
    ({"heldout": [3, 3]}, "the 'tune.heldout' option must list distinct training seeds"),
])
def test_overlapping_or_empty_seeds_are_refused(tune, message):
    with pytest.raises(UserError) as refused:
        settings_of(**tune)
    assert message in str(refused.value)


def test_the_command_line_names_the_methods_and_sweeps_nothing_else():
    methods, base = split_arguments(["experiment=tune", "+method=finetune,gradient_ascent", "model.width=8"])
    assert methods == [("finetune", "+method=finetune"), ("gradient_ascent", "+method=gradient_ascent")]
    assert base == ["experiment=tune", "model.width=8"]
    for arguments, message in ((["+method=ssd", "seeds.unlearn=0,1"], "sweeps nothing else; remove the sweep "
                                                                     "seeds.unlearn=0,1"),
                               (["+method=ssd", "seeds.train=3"], "sets seeds.train itself"),
                               (["model.width=8"], "tunes the methods of +method=NAME[,NAME…]; got none"),
                               (["+method=ssd", "methods=[ssd]"], "remove methods=[ssd]")):
        with pytest.raises(UserError) as refused:
            split_arguments(arguments)
        assert message in str(refused.value)


CATALOGUE = Catalogue((Metric("acc", "acc", RETRAINED, leaderboard=("forget",)),
                       Metric("delta", "Δ", 0.0, leaderboard=("forget",)),
                       Metric("leak", "leak", 0.0, leaderboard=("forget",), scale=100.0),
                       Metric("note", "note")), {"forget": "D_f"})


def records(seed: int, values: dict[str, float], target: str = "3", method: str = "m") -> list[dict]:
    rows = [{"folder": f"j{seed}", "status": "complete", "seed_train": seed, "seed_unlearn": seed, "target": target,
             "role": "unlearned", "method": method, "metric": name, "split": "forget", "value": value}
            for name, value in values.items()]
    return [*rows, {"folder": f"j{seed}", "status": "complete", "seed_train": seed, "seed_unlearn": seed,
                    "target": target, "role": "retrained", "method": None, "metric": "acc", "split": "forget",
                    "value": 0.5 + seed / 10}]


def test_the_objective_is_the_mean_scaled_distance_to_the_ideals_over_metrics_then_blocks():
    frame = pd.DataFrame(records(0, {"acc": 0.9, "delta": -0.2, "leak": -30.0, "note": 7.0})
                         + records(1, {"acc": 0.4, "delta": 0.1, "leak": 10.0, "note": 1.0}))
    jobs = [{"folder": "j0", "status": "complete"}, {"folder": "j1", "status": "complete"}]
    metrics = [("acc", "forget"), ("delta", "forget"), ("leak", "forget")]
    scored = objective(frame, jobs, CATALOGUE, "m", metrics)
    by_hand = {0: (abs(0.9 - 0.5) + 0.2 + 30 / 100) / 3, 1: (abs(0.4 - 0.6) + 0.1 + 10 / 100) / 3}
    assert scored.reason is None and scored.by_seed() == pytest.approx(by_hand)
    assert scored.value == pytest.approx(np.mean(list(by_hand.values())))
    assert objective(frame, jobs, CATALOGUE, "m", [("delta", "forget")]).value == pytest.approx(0.15)


def test_a_failed_job_a_failed_method_or_a_missing_value_fails_the_batch_with_its_reason():
    frame = pd.DataFrame(records(0, {"acc": 0.9, "delta": -0.2}))
    metrics = [("acc", "forget"), ("delta", "forget")]
    failed = objective(frame, [{"folder": "x/j0", "status": "failed", "error": "CUDA out of memory\ntrace"}],
                       CATALOGUE, "m", metrics)
    assert failed.reason == "j0: CUDA out of memory" and math.isnan(failed.value)
    diverged = [{"folder": "j0", "status": "complete",
                 "failures": [{"target": "3", "method": "m", "error": "m diverged: non-finite loss"}]}]
    assert objective(frame, diverged, CATALOGUE, "m", metrics).reason == "j0: m diverged: non-finite loss"
    missing = objective(frame, [{"folder": "j0", "status": "complete"}], CATALOGUE, "m",
                        [*metrics, ("leak", "forget")])
    assert missing.reason == "leak:forget has no value for target 3, training seed 0"
    assert missing.as_record() == {"state": "failed", "objective": None, "by_seed": {}, "reason": missing.reason}


def test_the_tuning_table_gives_the_optimism_gain_and_held_out_interval():
    tuning = {"seeds": [0, 1], "heldout": [2, 3, 4], "methods": {
        "m": {"trials": [{"trial": 0, "params": {"lr": 0.1}, "state": "complete", "objective": 0.3},
                         {"trial": 1, "params": {"lr": 0.01}, "state": "complete", "objective": 0.2},
                         {"trial": 2, "params": {"lr": 9.0}, "state": "failed", "objective": None}],
              "best": {"trial": 1, "params": {"lr": 0.01}, "state": "complete", "objective": 0.2},
              "heldout": {"tuned": {"objective": 0.3, "by_seed": {"2": 0.2, "3": 0.3, "4": 0.4}, "reason": None},
                          "default": {"objective": 0.35, "by_seed": {}, "reason": None}}},
        "n": {"trials": [{"trial": 0, "params": {"lr": 9.0}, "state": "failed", "objective": None}],
              "error": "all 1 trials failed"}}}
    table = tuning_rows([tuning]).set_index("method")
    half = stats.t.ppf(0.975, 2) * np.std([0.2, 0.3, 0.4], ddof=1) / math.sqrt(3)
    row = table.loc["m"]
    assert row["best"] == "lr=0.01" and row["trials"] == 3 and row["failed_trials"] == 1
    assert row["optimism"] == pytest.approx(0.1) and row["gain"] == pytest.approx(0.05)
    assert (row["heldout_low"], row["heldout_high"]) == pytest.approx((0.3 - half, 0.3 + half))
    assert table.loc["n", "note"] == "all 1 trials failed" and pd.isna(table.loc["n", "objective_heldout"])


def test_trial_jobs_leave_the_reports_tables():
    frame = pd.DataFrame({"tuning": ["trial", "tuned", None], "value": [1, 2, 3]})
    jobs = [{"folder": "a", "tuning": "trial"}, {"folder": "b", "tuning": "tuned"}, {"folder": "c"}]
    kept, kept_jobs = without_trials(frame, jobs)
    assert list(kept["value"]) == [2, 3] and [j["folder"] for j in kept_jobs] == ["b", "c"]


def test_a_space_is_changed_and_extended_on_the_command_line():
    from helpers import compose_config

    cfg = compose_config(["+method=finetune", "method.tune.lr.high=0.01",
                          "+method.tune.weight_decay={low: 1e-5, high: 0.1, log: true}"])
    method = OmegaConf.to_container(cfg.method, resolve=True)
    space = {d.name: d for d in search_space(method, option_names(target_of(method, "method")))}
    assert space["lr"].high == 0.01 and space["weight_decay"] == Dimension("weight_decay", 1e-5, 0.1, log=True)


def test_the_objective_reads_the_leaderboard_metrics_or_those_named_and_refuses_one_without_an_ideal():
    from unlearnbench.report.compute.tuning import objective_metrics

    assert objective_metrics(None, CATALOGUE) == [("acc", "forget"), ("delta", "forget"), ("leak", "forget")]
    assert objective_metrics(["delta:forget"], CATALOGUE) == [("delta", "forget")]
    with pytest.raises(UserError) as refused:
        objective_metrics(["delta:forget", "note:forget"], CATALOGUE)
    assert str(refused.value) == ("the 'tune.objective' option must name metrics with an ideal (metric or "
                                  "metric:split of acc, delta, leak); got note:forget instead")
