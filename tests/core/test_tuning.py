"""experiment=tune's parts that run without a process: the search spaces the methods declare, the seeded search
(the defaults' trial 0, TPE's random start-up, replicates' sampler seeds), the settings and command line it refuses
(seed sets of replicates), the objective (mean scaled distance, not the leaderboard's rank) on fabricated records
against a hand computation, and the tuning tables (intervals against scipy's tests, the random-search flag, the
replicates' summary, tuning.json's single-replicate layout)."""

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
from unlearnbench.core.tuning import (
    DEFAULTS,
    RANDOM,
    TPE,
    Defaults,
    Dimension,
    Search,
    Settings,
    defaults_of,
    sampler_seed,
    search_space,
    split_arguments,
)
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.tuning import (
    objective,
    optimism_interval,
    paired_gain,
    replicate_rows,
    trial_rows,
    tuning_rows,
    without_trials,
)
from unlearnbench.report.render.words import joined, text
from unlearnbench.runtime.errors import UserError

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
    ({"momentum_x": {"low": 0.1, "high": 1.0}}, "the 'tune.momentum_x' entry of method finetune must be named after "
                                                "one of its options (name, epochs, lr"),
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
    ({"seeds": []}, "the 'tune.seeds' option of experiment=tune must be a list of distinct training seeds, "
                     "one at least; got [] instead"),
    ({"heldout": [3, 3]}, "the 'tune.heldout' option of experiment=tune must be a list of distinct training seeds"),
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
    assert failed.reason == Note("job_failed", {"folder": "j0", "error": "CUDA out of memory"})
    assert text(failed.reason) == "j0: CUDA out of memory" and math.isnan(failed.value)
    diverged = [{"folder": "j0", "status": "complete",
                 "failures": [{"target": "3", "method": "m", "error": "m diverged: non-finite loss"}]}]
    assert text(objective(frame, diverged, CATALOGUE, "m", metrics).reason) == "j0: m diverged: non-finite loss"
    missing = objective(frame, [{"folder": "j0", "status": "complete"}], CATALOGUE, "m",
                        [*metrics, ("leak", "forget")])
    assert text(missing.reason) == "leak:forget has no value for target 3, training seed 0"
    assert missing.as_record() == {"state": "failed", "objective": None, "by_seed": {}, "reason": missing.reason}
    assert text(objective(frame, [{"folder": "j0", "status": "complete"}], CATALOGUE, "n", metrics).reason) == \
        "no records of method n"
    unsplit = Note("no_value", {"metric": "leak", "split": "", "target": 3, "seed": 0})
    assert text(unsplit) == "leak has no value for target 3, training seed 0"


def test_a_batch_without_a_result_fails_and_tuning_json_words_its_reason(tmp_path):
    from hydra_plugins.unlearnbench_launcher.tune import recorded, worded_rule
    from unlearnbench.report.compute.tuning import score_folders

    (tmp_path / "j0").mkdir()
    scored = score_folders([tmp_path / "j0"], "m", None)
    assert scored.reason == Note("no_result", {"folder": "j0"}) and math.isnan(scored.value)
    assert recorded(scored) == {"state": "failed", "objective": None, "by_seed": {}, "reason": "j0: no result.json"}
    assert worded_rule(None) is None and worded_rule({"rule": Note("objective_rule"), "metrics": []})["rule"] == (
        "per block (a target and a training seed), the mean over the objective's metrics of |v - ideal| / scale "
        "(|v - M_r's v| / scale for a metric whose ideal is the retrained model's value), then the mean over the "
        "blocks; lower is better, 0 at every ideal. Not the leaderboard's rule (a mean rank among methods): one "
        "method's tuning has no other method to rank against")
    assert text(Note("all_trials_failed", {"trials": 3})) == "all 3 trials failed"


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
    assert joined(row["best"]) == "lr=0.01" and row["trials"] == 3 and row["failed_trials"] == 1
    assert row["optimism"] == pytest.approx(0.1) and row["gain"] == pytest.approx(0.05)
    assert (row["heldout_low"], row["heldout_high"]) == pytest.approx((0.3 - half, 0.3 + half))
    assert joined(table.loc["n", "note"]) == "all 1 trials failed" and pd.isna(table.loc["n", "objective_heldout"])
    assert joined(row["note"]) == "" and pd.isna(table.loc["n", "best"])
    # tuning.json's single-replicate layout (before replicates): replicate 0, no defaults' trial, TPE's 10 start-up
    assert row["replicate"] == 0 and row["random_search"] and row["tpe_trials"] == 0 and row["startup_trials"] == 10
    assert pd.isna(row["beat_defaults"]) and math.isnan(row["defaults_tuning"])
    assert list(trial_rows([tuning])["drawn"]) == [RANDOM, RANDOM, RANDOM, RANDOM]


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


SPACE = [Dimension("lr", 1e-5, 1e-2, log=True), Dimension("epochs", 1, 20, integer=True),
         Dimension("retain_loss", choices=("nll", "kl"))]


def drawn_points(search: Search, count: int, failed: tuple[int, ...] = ()) -> list:
    found = []
    for number in range(count):
        point = search.ask()
        found.append(point)
        score = 0.0 if point.drawn == DEFAULTS else (math.log10(point.params["lr"]) + 3) ** 2
        search.tell(point, None if number in failed else score)
    return found


def test_the_defaults_are_trial_0_and_told_to_tpe_where_they_lie_in_the_space():
    defaults = Defaults({"lr": 1e-3, "epochs": 5, "retain_loss": "kl"})
    search = Search(SPACE, 0, "npo", startup_trials=3, defaults=defaults)
    points = drawn_points(search, 6, failed=(1,))
    assert points[0].params == defaults.params and points[0].drawn == DEFAULTS and points[0].trial is not None
    assert search.overrides(points[0].params, points[0].drawn) == []  # its jobs run the config unchanged
    told = search.study.trials[0]
    assert told.params == defaults.params and told.value == pytest.approx(0.0)  # Optuna's enqueued trial, scored
    # TPE's model draws once 3 complete trials follow the defaults (the failed trial 1 does not count): its random
    # points are those of Optuna's RandomSampler on the same seed, its first modelled point is not
    assert [p.drawn for p in points] == [DEFAULTS, RANDOM, RANDOM, RANDOM, RANDOM, TPE] and search.startup == 4
    random = optuna_random(search.seed, search.distributions, 5)
    assert [p.params for p in points[1:5]] == random[:4] and points[5].params != random[4]


def optuna_random(seed: int, distributions: dict, count: int) -> list[dict]:
    import optuna

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [study.ask(distributions).params for _ in range(count)]


@pytest.mark.parametrize("params", [{"lr": None, "epochs": 5, "retain_loss": "kl"},  # a text method's lr: null
                                    {"lr": 0.5, "epochs": 5, "retain_loss": "kl"},  # Optuna would keep it, warning
                                    {"lr": 1e-3, "epochs": 5, "retain_loss": "hinge"}])  # Optuna would refuse it
def test_defaults_outside_the_space_run_as_trial_0_and_are_never_told(params):
    defaults = defaults_of(params, SPACE)
    assert defaults.outside and not defaults.told
    search = Search(SPACE, 0, "npo", startup_trials=2, defaults=defaults)
    points = drawn_points(search, 5)
    assert points[0].params == params and points[0].trial is None and points[0].drawn == DEFAULTS
    assert len(search.study.trials) == 4 and search.startup == 2  # the sampler never saw trial 0
    plain = drawn_points(Search(SPACE, 0, "npo", startup_trials=2), 4)
    assert [p.params for p in points[1:]] == [p.params for p in plain]  # the same search after it
    assert [p.drawn for p in points] == [DEFAULTS, RANDOM, RANDOM, TPE, TPE]


def test_a_methods_defaults_are_read_from_its_config_and_checked_against_its_space():
    finetune = method_config("finetune")
    space = search_space(finetune, option_names(target_of(finetune, "method")))
    assert defaults_of(finetune, space) == Defaults({"lr": 0.02, "epochs": 5})
    narrowed = [Dimension("lr", 1e-3, 1e5, log=True), Dimension("epochs", 1, 3, integer=True)]
    assert defaults_of(finetune, narrowed).outside == ("epochs",)
    assert Dimension("epochs", 1, 3, integer=True).contains(2) and not Dimension("e", 1, 3, integer=True).contains(2.5)
    assert not Dimension("flag", choices=(0, 1)).contains(True) and Dimension("x", 0.0, 1.0).contains(1)


def test_replicates_draw_their_own_sampler_seeds_and_replicate_0_is_the_single_tuning():
    from unlearnbench.runtime.seeding import streams

    seeds = [sampler_seed(0, "npo", replicate) for replicate in range(3)]
    assert seeds[0] == streams("tune", 0, "npo").seed and len(set(seeds)) == 3
    assert seeds[1:] == [streams("tune", 0, "npo", r).seed for r in (1, 2)] and sampler_seed(1, "npo", 1) != seeds[1]
    assert [p.params for p in drawn_points(Search(SPACE, 0, "npo", 1), 3)] != \
        [p.params for p in drawn_points(Search(SPACE, 0, "npo", 0), 3)]


def test_seed_sets_give_each_replicate_its_tuning_seeds():
    assert settings_of().sets == ((0,),) and settings_of(replicates=3).sets == ((0,), (0,), (0,))
    sets = settings_of(seed_sets=[[3, 4], [5, 6]], heldout=[0, 1])  # tune.seeds' [0] is not used
    assert sets.sets == ((3, 4), (5, 6)) and sets.replicates == 2
    assert settings_of(seed_sets=[[3], [4]], replicates=2).replicates == 2
    assert settings_of(startup_trials=0).startup_trials == 0


@pytest.mark.parametrize(("tune", "message"), [
    ({"seed_sets": [[3], [4]], "replicates": 3},
     "the 'tune.replicates' option of experiment=tune must be 1 or the number of tune.seed_sets (2); got 3 instead"),
    ({"seed_sets": [[3, 4], [4, 5]]},
     "the 'tune.seed_sets' option must hold disjoint sets of training seeds; got [[3, 4], [4, 5]], where 4 is in two "
     "sets"),
    ({"seed_sets": [[3], [1]]}, "the 'tune.heldout' option must hold training seeds the trials never see; got [1, 2], "
                                "which shares 1 with tune.seed_sets"),
    ({"seed_sets": [[3], []]}, "the 'tune.seed_sets' option of experiment=tune must be one or more sets, each of "
                               "distinct training seeds, one at least; got [[3], []] instead"),
    ({"seed_sets": [[3, 3]]}, "got [[3, 3]] instead"),
    ({"seed_sets": []}, "got [] instead"),
])
def test_bad_seed_sets_are_refused_in_one_line(tune, message):
    with pytest.raises(UserError) as refused:
        settings_of(**tune)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_replicate_option_is_the_sweepers():
    with pytest.raises(UserError, match=r"sets tune\.replicate itself"):
        split_arguments(["+method=ssd", "tune.replicate=1"])


@pytest.mark.parametrize(("heldout", "tuning"), [([0.31, 0.22, 0.41, 0.28, 0.35], [0.12, 0.2, 0.17]),
                                                  ([0.31, 0.22], [0.12, 0.2, 0.17, 0.3])])
def test_the_optimism_interval_is_students_two_sample_interval(heldout, tuning):
    expected = stats.ttest_ind(heldout, tuning, equal_var=True).confidence_interval(0.95)
    assert optimism_interval(heldout, tuning) == pytest.approx((expected.low, expected.high), rel=1e-12)


def test_with_one_tuning_seed_the_optimism_interval_rests_on_the_held_out_variance_alone():
    heldout = np.array([0.31, 0.22, 0.41, 0.28, 0.35])
    centre, spread = heldout.mean() - 0.12, heldout.std(ddof=1) * math.sqrt(1 / 5 + 1)
    assert optimism_interval(heldout, [0.12]) == pytest.approx(stats.t.interval(0.95, 4, centre, spread), rel=1e-12)
    assert all(math.isnan(v) for v in optimism_interval([0.3], [0.12]) + optimism_interval([], [0.1, 0.2]))


def test_the_gain_has_the_paired_t_interval_and_test_over_the_held_out_seeds():
    default = {"5": 0.4, "6": 0.31, "7": 0.52, "8": 0.33}
    tuned = {"8": 0.30, "5": 0.35, "6": 0.33, "7": 0.41, "9": 0.1}  # seed 9: no defaults' value, not paired
    seeds = sorted(default)
    test = stats.ttest_rel([default[s] for s in seeds], [tuned[s] for s in seeds])
    interval = test.confidence_interval(0.95)
    assert paired_gain(default, tuned) == pytest.approx((interval.low, interval.high, test.pvalue), rel=1e-12)
    assert all(math.isnan(v) for v in paired_gain({"5": 0.4}, {"5": 0.3}))
    same = paired_gain(default, default)  # the chosen point is the defaults: 0 on every seed, nothing to test
    assert same[:2] == (0.0, 0.0) and math.isnan(same[2])


def replicated(best_trials: list[int], held: list[dict], drawn: list[list[str]]) -> dict:
    """A tuning.json of one method, a replicate per entry: three trials each (trial 0 the defaults)."""
    replicates = []
    for number, (best, tuned, kinds) in enumerate(zip(best_trials, held, drawn, strict=True)):
        trials = [{"trial": k, "params": {"lr": 0.02 if k == 0 else 0.1 * (k + number)}, "drawn": kind,
                   "state": "complete", "objective": 0.3 - 0.1 * (k == best) - 0.01 * k,
                   "by_seed": {str(number): 0.3 - 0.1 * (k == best) - 0.01 * k}, "reason": None}
                  for k, kind in enumerate(kinds)]
        replicates.append({"replicate": number, "seeds": [number], "trials": trials, "best": trials[best],
                           "tpe_trials": kinds.count(TPE),
                           "heldout": {"tuned": tuned, "default": {"objective": 0.25, "reason": None,
                                                                   "by_seed": {"7": 0.2, "8": 0.3}}}})
    return {"seeds": [0], "heldout": [7, 8], "startup_trials": 1, "methods": {"m": {"replicates": replicates}}}


def test_each_replicate_is_a_row_and_the_summary_gives_their_spread():
    held = [{"objective": 0.15, "by_seed": {"7": 0.1, "8": 0.2}, "reason": None},
            {"objective": 0.25, "by_seed": {"7": 0.2, "8": 0.3}, "reason": None},
            {"objective": 0.35, "by_seed": {"7": 0.3, "8": 0.4}, "reason": None}]
    tuning = replicated([2, 0, 1], held, [[DEFAULTS, RANDOM, TPE], [DEFAULTS, RANDOM, RANDOM],
                                          [DEFAULTS, RANDOM, TPE]])
    table = tuning_rows([tuning]).set_index("replicate")
    assert list(table.index) == [0, 1, 2] and list(table["random_search"]) == [False, True, False]
    assert list(table["beat_defaults"]) == [True, False, True] and joined(table.loc[1, "best"]) == "defaults (lr=0.02)"
    assert table.loc[0, "beat_by"] == pytest.approx(0.3 - (0.2 - 0.02)) and table.loc[1, "beat_by"] == 0
    assert table.loc[1, "gain"] == 0 and math.isnan(table.loc[1, "gain_p"])
    assert joined(table.loc[0, "note"]) == (
        "one tuning seed: the optimism interval uses the held-out seeds' variance alone")
    summary = replicate_rows(tuning_rows([tuning])).iloc[0]
    assert summary["replicates"] == 3 and summary["heldout_mean"] == pytest.approx(0.25)
    assert summary["heldout_std"] == pytest.approx(0.1) and (summary["heldout_min"], summary["heldout_max"]) == \
        pytest.approx((0.15, 0.35))
    assert summary["distinct_points"] == 3 and summary["points_differ"] and summary["beat_defaults"] == 2
    assert summary["random_search"] == 1 and summary["gain_mean"] == pytest.approx(0.25 - 0.25)
    rows = tuning_rows([tuning])
    for name in ("optimism", "gain"):  # the t-interval of the mean over the replicates, df R − 1
        values = rows[name].astype(float)
        expected = stats.t.interval(0.95, len(values) - 1, values.mean(), stats.sem(values)) \
            if values.std() > 0 else (values.mean(), values.mean())
        assert (summary[f"{name}_low"], summary[f"{name}_high"]) == pytest.approx(expected, nan_ok=True)
    trials = trial_rows([tuning])
    assert list(trials["replicate"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2] and trials["drawn"].iloc[0] == DEFAULTS


def test_the_report_section_names_the_random_searches_and_the_replicates_spread():
    from unlearnbench.report.render.tuning import section

    held = [{"objective": 0.15, "by_seed": {"7": 0.1, "8": 0.2}, "reason": None}] * 2
    table = tuning_rows([replicated([2, 0], held, [[DEFAULTS, RANDOM, TPE], [DEFAULTS, RANDOM, RANDOM]])])
    text = "\n".join(section(table, None))
    assert "Random search: m (replicate 1)." in text and "not the leaderboard's mean rank" in text
    assert "### Across replicates" in text and "| m | 2 | 0.15 ± 0 [0.15, 0.15] | 2 |" in text
    single = "\n".join(section(table[table["replicate"] == 0], None))
    assert "Across replicates" not in single and "Random search" not in single


def test_tuning_json_states_the_objectives_rule_and_each_metrics_scale():
    from unlearnbench.report.compute.tuning import objective_rule

    rule = objective_rule([("acc", "forget"), ("leak", "forget")], CATALOGUE)
    assert "Not the leaderboard's rule" in text(rule["rule"]) and "/ scale" in text(rule["rule"])
    assert rule["metrics"] == [{"metric": "acc", "split": "forget", "label": "acc D_f", "ideal": RETRAINED,
                                "scale": 1.0},
                               {"metric": "leak", "split": "forget", "label": "leak D_f", "ideal": 0.0, "scale": 100.0}]


def test_the_tuning_studys_seed_sets_are_disjoint():
    """(Its docs folder is checked before any sweep: test_make_targets.py, with the other docs-writing scripts.)"""
    from helpers import script

    study = script(REPO / "scripts" / "tune_study.py")
    sets, heldout = study.designs([1, 3], 3, 5)
    assert sets == {"one seed": [[0], [1], [2]], "three seeds": [[3, 4, 5], [6, 7, 8], [9, 10, 11]]}
    assert heldout == [12, 13, 14, 15, 16]
