"""Every sentence the report's statistics come with, once: the words of each `compute.notes.Note` code, filled from
its values. report.md, the CSVs' note and warning columns and the warnings list all read them from here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.report.compute.leaderboard import AGGREGATE
from unlearnbench.report.compute.notes import Note

NOTE_COLUMNS = ("warnings", "note", "point_note", "upper_note", "best")  # table columns that hold a tuple of notes


def _unbalanced(values: dict) -> str:
    rows = f"{values['rows']} row{'s' if values['rows'] > 1 else ''}"
    return (f"unbalanced grid ({rows}; methods {', '.join(values['methods'])}): not every training seed has the "
            "same number of unlearning seeds. σ_T² and σ_U² use the unbalanced one-way ANOVA estimator with the "
            "effective J = n0; the σ_T² interval is approximate")


def _wilcoxon_blocks(values: dict) -> str:
    targets = values["targets"]
    return (f"a Wilcoxon–Holm test over {values['methods']} methods needs {values['need']} blocks, not "
            f"{values['blocks']}: {values['seeds']} training seeds of {targets} target{'s' if targets != 1 else ''} "
            f"(seeds.train=range({values['seeds']}))")


def _left_out(values: dict) -> str:
    others = values["others"]
    shown = ", ".join(others[:5]) + (f", … {len(others) - 5} more" if len(others) > 5 else "")
    return (f"{' · '.join(values['group'])} — target {values['target']}: {len(others)} of {values['jobs']} jobs left "
            f"out of the per-example scores, their forget set differs from the {values['kept']} others' (fix "
            f"seeds.forget to hold one D_f across jobs): {shown}")


def _pool(values: dict) -> str:
    pool = "B" if values["design"] == "B" else f"A({values['seed']})"
    return f"{' · '.join(values['group'])} — target {values['target']}, pool {pool}, method {values['method']}"


# code → its words: a format string of the note's values, or a function of them where a list is joined or a word
# agrees with a number
WORDS: dict[str, str | Callable[[dict], str]] = {
    # the study's design caveats (analysis.prepare, analysis.design_warnings): report.md's warnings
    "repeated": ("{values} values of a method appear in more than one job with the same seeds (the same design given "
                 "twice?): the first job in folder order was kept"),
    "few_training_seeds": lambda v: (f"fewer than {v['below']} training seeds (I = {', '.join(map(str, v['seeds']))})"
                                     ": σ_T² is barely identifiable; its interval is wide"),
    "unbalanced": _unbalanced,
    "one_unlearning_seed": ("one unlearning seed per training seed (J = 1): only the total variance is identifiable "
                            "and there is no single-training-seed design to compare (no W2)"),
    "one_training_seed": ("one training seed (I = 1): only σ_U² is identifiable and there is no multi-training-seed "
                          "design to compare (no W2)"),
    "no_w2": ("no row has both three training seeds and a training seed with two unlearning seeds: no W2 (A(i) is "
              "compared with B without seed i, which needs two other training seeds)"),
    # a row's variance split (stats.nested_variance, stats.evaluation_split): seed_variance.csv's warnings
    "no_values": "no values",
    "few_training_seeds_row": "fewer than {below} training seeds (I = {I}): σ_T² is barely identifiable",
    "unbalanced_row": ("unbalanced grid ({J_min} to {J_max} unlearning seeds per training seed): unbalanced ANOVA "
                       "estimator with effective J = n0 = {n0:.3g}; the σ_T² interval is approximate"),
    "chi2_sigma_u2": ("fewer than {below} training seeds with two unlearning seeds: σ_U²'s interval is the χ² one, "
                      "exact only if every training seed has the same variance"),
    "total_only": "one unlearning seed per training seed (J = 1): only the total variance is identifiable",
    "sigma_u2_only": "one training seed (I = 1): only σ_U² is identifiable",
    "single_value": "a single value: no variance is identifiable",
    "unbalanced_three_stage": ("unbalanced grid ({J_min} to {J_max} unlearning seeds per training seed, {K_min} to "
                               "{K_max} evaluation seeds per cell): Henderson's method 1, unbiased; J and K are "
                               "effective numbers, and the intervals of σ_U² and σ_T² approximate"),
    "not_apart": "one unlearning seed per training seed: σ_T² and σ_U² are not identifiable apart",
    "no_sigma_t2": "one training seed (I = 1): σ_T² is not identifiable",
    # a seed plan (stats.seed_plan): seed_plan.csv's notes
    "sigma_t2_or_u2_unknown": "σ_T² or σ_U² not identifiable from this grid",
    "sigma_e2_unknown": "σ_E² not identifiable from this grid",
    "unbounded": lambda v: f"{' and '.join(v['components'])} upper limit unbounded: too few seeds to plan at the upper "
                           "limit",
    "no_time": "no training or unlearning time recorded",
    "no_seed_variance": ("no seed variance at these values: any design reaches the target; {least} training seeds "
                         "still, since σ_T² cannot be estimated from one"),
    "no_evaluation_time": ("no evaluation time recorded: one evaluation seed per job (K = 1), σ_E² counted with "
                           "σ_U²"),
    "sigma_u2_zero": "σ_U² = 0: extra unlearning seeds buy nothing; only training seeds lower the error",
    "sigma_t2_zero": ("σ̂_T² = 0, often a negative estimate truncated at 0 rather than no training-seed effect: at "
                      "least {least} training seeds, since σ_T² cannot be estimated from one"),
    "training_seed_floor": ("at least {least} training seeds: one would reach the target at these values, but σ_T² "
                            "cannot be estimated from one"),
    "k_bound": "K at the search bound ({K})",
    # a paired comparison and its power plan (power.paired_test, power.power_plan): seed_power.csv's notes
    "same_mean_difference": "every training seed gives the same mean difference: the interval has width 0",
    "no_test": "fewer than two training seeds: the difference's spread over training seeds is unknown; no test",
    "unbalanced_test": ("unbalanced grid: the training-seed means have unequal variances, the t-test is approximate "
                        "and J is the effective n0"),
    "no_difference": "no difference to plan for",
    "zero_difference": "a difference of 0: no design detects it (power = α)",
    "difference_components_unknown": "σ_TD² or σ_UD² not identifiable from this grid",
    "difference_unbounded": "upper limit unbounded: too few seeds to plan at the upper limit",
    "no_spread": "no spread in the difference: {least} training seeds tell the methods apart",
    "too_small": ("a difference of {delta:.3g} is too small against its spread: every design needs more than "
                  "{max_jobs:,} jobs"),
    # a leaderboard (leaderboard.metric_board): leaderboard.csv's notes
    "wilcoxon_blocks": _wilcoxon_blocks,
    # forgetting quality (forget_quality): forget_quality.csv's notes and report.md's warnings
    "point_pool": ("one M_u per original model: its unlearned pool is a point, which the competition scores at the ε "
                   "cap (ε = 50, no points); design B scores such a method"),
    "no_resolution": "N = {N}: the resolution cap ⌈ln(N − 1)⌉ is 0, every ε scores 0",
    "forget_sets_differ": _left_out,
    "not_scored": lambda v: f"{_pool(v)}: not scored per example: {v['error']}",
    "no_klom": lambda v: f"{_pool(v)}: no KLOM: {v['error']}",
    # a tuning (compute.tuning): tuning.json's objective rule and reasons (written by the sweeper, tune.py),
    # report.md's warnings, tuning.csv's best and note columns
    "objective_rule": ("per block (a target and a training seed), the mean over the objective's metrics of |v - ideal| "
                       "/ scale (|v - M_r's v| / scale for a metric whose ideal is the retrained model's value), then "
                       "the mean over the blocks; lower is better, 0 at every ideal. Not the leaderboard's rule (a "
                       "mean rank among methods): one method's tuning has no other method to rank against"),
    "job_failed": "{folder}: {error}",
    "no_records": "no records of method {method}",
    "no_value": lambda v: (f"{v['metric']}:{v['split']}" if v["split"] else v["metric"]) + (
        f" has no value for target {v['target']}, training seed {v['seed']}"),
    "no_result": "{folder}: no result.json",
    "all_trials_failed": "all {trials} trials failed",
    "tuning_unread": "{path}: not read ({error}); its tuning tables are left out",
    "not_tuning": "{path}: not a tuning record; its tuning tables are left out",
    "no_trial_completed": "no trial completed",
    "tuning_error": "{error}",
    "point": "{point}",
    "defaults_point": "defaults ({point})",
    "heldout_failed": "{stage}: {reason}",
    "one_heldout_seed": "one held-out seed: no held-out or gain interval",
    "no_optimism_interval": "one held-out and one tuning seed: no optimism interval",
    "heldout_variance_only": "one tuning seed: the optimism interval uses the held-out seeds' variance alone",
}


def text(note: Note) -> str:
    """The words of one note."""
    words = WORDS[note.code]
    return words(note.values) if callable(words) else words.format(**note.values)


def joined(notes: Sequence[Note] | float | None) -> str:
    """A cell's notes as one line, "; " between them ("" for none, and for a missing cell: NaN or None)."""
    if not isinstance(notes, tuple | list):
        return ""
    return "; ".join(map(text, notes))


def worded(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its note columns (`NOTE_COLUMNS`) in words, as its CSV holds them."""
    columns = [column for column in NOTE_COLUMNS if column in table.columns]
    return table.assign(**{column: table[column].map(joined) for column in columns}) if columns else table


def metric_label(metric: str, split: str, catalogue: Catalogue) -> str:
    """A leaderboard metric's name in a table or figure: the aggregate's, or the catalogue's label."""
    return "mean rank" if metric == AGGREGATE else catalogue.label(metric, split)
