"""report.md's tuning section and figures/tuning.png, from the tuning tables (`compute/tuning.py`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from unlearnbench.report.compute.tuning import replicate_rows
from unlearnbench.report.render.markdown import fmt
from unlearnbench.report.render.words import joined

INTRO = ("Per method (and replicate of the search): the best of its trials on the tuning training seeds (trial 0 is "
         "the method's defaults), then that point and the defaults on held-out training seeds the trials never "
         "saw. The objective: per block (target, training seed) the mean over the objective's metrics of the "
         "distance to the ideal divided by the metric's scale, then the mean over blocks; lower is better. It is not "
         "the leaderboard's mean rank, and a scaled distance can exceed 1 where a metric spans more than its scale "
         "(|privleak|/100). Beat defaults: defaults minus best on the tuning seeds. Optimism: held-out minus tuning "
         "objective of the best point (> 0: the tuning seeds flattered it; two-sample t-interval, the tuning value "
         "being the selected one). Gain: defaults minus tuned on the same held-out seeds (> 0: tuning helped; paired "
         "t-interval and p). Intervals 95%. Every trial in `trials.csv`, every column in `tuning.csv`.")


def section(table: pd.DataFrame, figure: str | None, replicates: pd.DataFrame | None = None) -> list[str]:
    """report.md's tuning section: a row per method and replicate, the replicates' spread, the random searches."""
    if table.empty:
        return []
    several = table["replicate"].nunique() > 1
    lines = ["## Tuning", "", INTRO, "",
             f"| method |{' replicate |' if several else ''} best point | trials (failed) | tuning | beat defaults "
             "by | held out [95%] | defaults held out | optimism [95%] | gain [95%] | gain p |",
             f"| --- |{' --- |' if several else ''} --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in table.itertuples(index=False):
        best = joined(row.best if isinstance(row.best, tuple) else row.note)  # no best point: why
        lines.append(f"| {row.method} |{f' {row.replicate} |' if several else ''} "
                     f"{best} | {row.trials} ({row.failed_trials}) | "
                     f"{fmt(row.objective_tuning)} | {beaten(row)} | "
                     f"{interval(row.objective_heldout, row.heldout_low, row.heldout_high)} | "
                     f"{fmt(row.objective_default)} | {interval(row.optimism, row.optimism_low, row.optimism_high)} | "
                     f"{interval(row.gain, row.gain_low, row.gain_high)} | {fmt(row.gain_p)} |")
    lines += ["", *random_search_lines(table)]
    summary = replicate_rows(table) if replicates is None else replicates
    if several:
        lines += replicate_lines(summary)
    if figure:
        lines += [f"![tuning]({figure})", ""]
    return lines


def interval(value, low, high) -> str:
    return fmt(value) if low is None or low != low else f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def beaten(row) -> str:
    """The best trial against the defaults' trial on the tuning seeds."""
    if row.beat_defaults is None or row.beat_defaults != row.beat_defaults:
        return "–"
    return fmt(row.beat_by) if row.beat_defaults else "no: the defaults are best"


def random_search_lines(table: pd.DataFrame) -> list[str]:
    """A line naming the searches in which TPE's model drew no point (the defaults' trial and random start-up
    trials only): random search, not TPE."""
    random = table[table["random_search"].astype(bool)]
    if random.empty:
        return []
    names = ", ".join(dict.fromkeys(f"{m} (replicate {r})" if table["replicate"].nunique() > 1 else m
                                    for m, r in zip(random["method"], random["replicate"], strict=True)))
    return [f"Random search: {names}. Every point was the defaults or one of TPE's `tune.startup_trials` "
            f"({int(random['startup_trials'].iloc[0])}) random start-up points (failed trials do not count towards "
            "them); TPE's model drew none.", ""]


def replicate_lines(summary: pd.DataFrame) -> list[str]:
    lines = ["### Across replicates", "",
             "The whole tuning repeated with other sampler seeds (and, with `tune.seed_sets`, other tuning seeds). "
             "The replicates share the held-out seeds, so the spread of the chosen points' held-out objective is "
             "the search's (which point it lands on), not the judgement's: it says how much a single tuning's "
             "verdict depends on its own luck. Mean optimism and gain with their t-intervals over the replicates. "
             "Every column in `tuning_replicates.csv`.", "",
             "| method | replicates | chosen point held out: mean ± std [min, max] | distinct points | beat defaults "
             "(tuning seeds) | random search | mean optimism [95%] | mean gain [95%] |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in summary.itertuples(index=False):
        spread = f"{fmt(row.heldout_mean)} ± {fmt(row.heldout_std)} [{fmt(row.heldout_min)}, {fmt(row.heldout_max)}]"
        lines.append(f"| {row.method} | {row.replicates} | {spread} | {row.distinct_points} | "
                     f"{row.beat_defaults} of {row.replicates} | {row.random_search} of {row.replicates} | "
                     f"{interval(row.optimism_mean, row.optimism_low, row.optimism_high)} | "
                     f"{interval(row.gain_mean, row.gain_low, row.gain_high)} |")
    return [*lines, ""]


BEST_OWN_INTRO = ("**Best step on its own run (optimistic)** (`report.best_step=true`). Per method and headline "
                  "metric, each job's step closest to the goal (the metric's ideal, M_r's mean for one judged against "
                  "the retrained model), chosen on that job's own curve, beside the jobs' final values: the mean "
                  "value and the mean distance to the goal over the jobs, and the spread of the chosen steps. These "
                  "numbers are optimistic by construction: each step is the best of many looks at the same run's "
                  "noise, scored on at most `evaluation.during.max_examples` examples per split, and no run was "
                  "judged anywhere else. To trust a stopping step, choose it on some training seeds and judge it "
                  "on others: `experiment=tune` with `tune.stop_step=true` (docs/tuning.md). Every job in "
                  "`dynamics_best_own.csv`.")


def best_own_lines(own: pd.DataFrame | None, keys: list[str], label) -> list[str]:
    """report.md's lines on the best step of each job's own run (`compute.dynamics.best_own_summary` of `own`,
    `dynamics_best_own.csv`), labelled optimistic; nothing where `report.best_step` is off or nothing was found.
    `label(metric, split)` names a metric as the report does."""
    from unlearnbench.report.compute.dynamics import best_own_summary
    from unlearnbench.report.render.markdown import md_table

    if own is None or own.empty:
        return []
    summary = best_own_summary(own, keys)
    rows = [[" · ".join(str(getattr(r, k)) for k in keys if getattr(r, k) != "") + f" — target {r.target}",
             r.method, label(r.metric, r.split), fmt(r.goal), f"{fmt(r.final_mean)} ({fmt(r.final_distance)})",
             f"{fmt(r.best_own_mean)} ({fmt(r.best_own_distance)})",
             f"{fmt(r.best_step_min)} / {fmt(r.best_step_median)} / {fmt(r.best_step_max)}", str(r.jobs)]
            for r in summary.itertuples()]
    return [BEST_OWN_INTRO, "", *md_table(["configuration", "method", "metric", "goal", "final: mean (distance)",
                                           "best on its own run, optimistic: mean (distance)",
                                           "its steps: min / median / max", "jobs"], rows)]


def draw(trials: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """figures/tuning.png: per method, each trial's objective (failed trials marked at the top), the best so far,
    and the held-out objectives of the best point and of the defaults; one colour per replicate."""
    if trials.empty:
        return None
    from matplotlib.figure import Figure

    from unlearnbench.report.render.figures import _save

    methods = list(dict.fromkeys(trials["method"]))
    figure = Figure(figsize=(4 * len(methods), 3.2), layout="constrained")
    axes = figure.subplots(1, len(methods), squeeze=False)[0]
    for ax, method in zip(axes, methods, strict=True):
        mine = trials[trials["method"] == method]
        replicates = sorted(set(mine["replicate"]))
        top = mine.loc[mine["state"] == "complete", "objective"].max()
        for k, replicate in enumerate(replicates):
            colour, name = f"C{k}", f" (replicate {replicate})" if len(replicates) > 1 else ""
            draw_replicate(ax, mine[mine["replicate"] == replicate].sort_values("trial"), colour, name,
                           1.0 if top != top else top)
            row = table[(table["method"] == method) & (table["replicate"] == replicate)]
            value = row["objective_heldout"].iloc[0] if len(row) else None
            if value is not None and value == value:
                ax.axhline(value, color=colour, linestyle="--", label=f"tuned, held out{name}")
        default = table.loc[table["method"] == method, "objective_default"].dropna()
        if len(default):
            ax.axhline(default.iloc[0], color="tab:gray", linestyle=":", label="defaults, held out")
        ax.set(title=method, xlabel="trial", ylabel="objective (lower is better)")
        ax.legend(fontsize=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(figure, path)


def draw_replicate(ax, trials: pd.DataFrame, colour: str, name: str, top: float) -> None:
    done = trials[trials["state"] == "complete"]
    ax.plot(done["trial"], done["objective"], "o", color=colour, markersize=3, label=f"trial{name}")
    ax.step(done["trial"], done["objective"].cummin(), where="post", color=colour, alpha=0.5)
    failed = trials[trials["state"] != "complete"]
    if len(failed):
        ax.plot(failed["trial"], [top] * len(failed), "x", color="tab:red")
