"""report.md's tuning section and figures/tuning.png, from the tuning tables (`compute/tuning.py`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from unlearnbench.report.render.markdown import fmt


def section(table: pd.DataFrame, figure: str | None) -> list[str]:
    """report.md's tuning section: a row per method."""
    if table.empty:
        return []
    lines = ["## Tuning", "",
             "Per method: the best of its trials on the tuning training seeds, then that point and the method's "
             "defaults on held-out training seeds the trials never saw. The objective is the mean distance to the "
             "leaderboard metrics' ideals (each scaled to [0, 1]): lower is better. Optimism: held-out minus tuning "
             "objective of the best point (> 0: the tuning seeds flattered it). Gain: defaults minus tuned, held "
             "out (> 0: tuning helped on seeds it never saw). Every trial in `trials.csv`, every column in "
             "`tuning.csv`.", "",
             "| method | best point | trials (failed) | tuning | held out [95%] | defaults held out | optimism "
             "| gain |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in table.itertuples(index=False):
        held = f"{fmt(row.objective_heldout)} [{fmt(row.heldout_low)}, {fmt(row.heldout_high)}]"
        lines.append(f"| {row.method} | {row.best if isinstance(row.best, str) else row.note} | {row.trials} "
                     f"({row.failed_trials}) | {fmt(row.objective_tuning)} | {held} | {fmt(row.objective_default)} "
                     f"| {fmt(row.optimism)} | {fmt(row.gain)} |")
    lines.append("")
    if figure:
        lines += [f"![tuning]({figure})", ""]
    return lines


def draw(trials: pd.DataFrame, table: pd.DataFrame, path: Path) -> Path | None:
    """figures/tuning.png: per method, each trial's objective (failed trials marked at the top), the best so far,
    and the held-out objectives of the best point and of the defaults."""
    if trials.empty:
        return None
    from matplotlib.figure import Figure

    from unlearnbench.report.render.figures import _save

    methods = list(dict.fromkeys(trials["method"]))
    figure = Figure(figsize=(4 * len(methods), 3.2), layout="constrained")
    axes = figure.subplots(1, len(methods), squeeze=False)[0]
    for ax, method in zip(axes, methods, strict=True):
        mine = trials[trials["method"] == method].sort_values("trial")
        done = mine[mine["state"] == "complete"]
        ax.plot(done["trial"], done["objective"], "o", color="tab:blue", label="trial (tuning seeds)")
        ax.step(done["trial"], done["objective"].cummin(), where="post", color="tab:blue", alpha=0.5)
        failed = mine[mine["state"] != "complete"]
        if len(failed):
            top = done["objective"].max() if len(done) else 1.0
            ax.plot(failed["trial"], [top] * len(failed), "x", color="tab:red", label="failed")
        row = table[table["method"] == method]
        for column, color, label in (("objective_heldout", "tab:green", "tuned, held out"),
                                     ("objective_default", "tab:gray", "defaults, held out")):
            value = row[column].iloc[0] if len(row) else None
            if value is not None and value == value:
                ax.axhline(value, color=color, linestyle="--", label=label)
        ax.set(title=method, xlabel="trial", ylabel="objective (lower is better)")
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(figure, path)
