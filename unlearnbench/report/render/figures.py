"""The report's figures (matplotlib's object API on the Agg canvas: no pyplot state, no display needed).

Per configuration (dataset · model · scenario):
- `designs_<config>_<metric>_<split>.png` for the figure metrics (those the catalogue declares a `figure`): per
  method, box plots of the single-training-seed design A(i₀) (the J unlearning seeds of the smallest training seed
  i₀, the common practice of one seed 0) and of the multi-training-seed design B (one unlearning seed per training
  seed), side by side; dashed lines at the retrained model's 25/50/75% quantiles over all its seeds where it has the
  metric, else a grey line at the metric's ideal where that is a number. One panel per target (at most
  `MAX_PANELS`).
- `wasserstein_<config>.png`: per figure metric, per method a box of W2(A(i), B) over the training seeds i (and the
  targets), with the mean 95% permutation-null percentile as a red tick.
- `variance_<config>.png`: per figure metric, per method the training-seed and unlearning-seed components σ_T² and
  σ_U² stacked (averaged over targets), the ICC above each bar.
- `seed_study_<config>_<target>.png`: Figure 1 of the seed study: the figure metrics judged against the retrained
  model (the image task's forget- and retain-set test accuracy), per method the designs A(i₀) and B side by side,
  the retrained model's quartiles as lines.
- `ranks_<config>.png`: per ranked metric, Kendall's τ between each training seed's ranking of the methods and the
  other seeds' ranking, a cross where the best method changed (`seed_design.rank_stability`).
- `forget_quality_<config>.png`: per method the forgetting quality F of each single-original-model pool A(i) as
  points and of the multi-training-seed pool B as a line, and the distribution of the per-example ε
  (`forget_quality`).
- `trajectory_<config>_<metric>_<target>.png` for records with a `round` (the ranking task): Figure 3 of the seed
  study, a row per model (original, retrained, each method), design A(i₀) beside design B, a thin line per run and
  the mean ± std across runs.
- `curves_<config>.png` for the jobs' training curves (`curves.curve_table`): a row per kind of model (M_o, one
  line per training seed; M_r, one line per target and unlearning seed; the methods that train, one line per run),
  a column each for the training loss, training accuracy and learning rate per epoch, so that an under-trained or
  diverged model stands out.
- `dynamics_<config>_<metric>_<split>.png` for the headline metrics recorded along the methods' steps
  (compute/dynamics.py): a panel per target, the metric against the step, a line per method (the mean over training
  seeds) with its 95% band across training seeds, M_o's and M_r's means as horizontal reference lines.
- `plane_<config>.png` where the catalogue declares a forgetting–utility plane (`Catalogue.plane`): a panel per
  method (and target), its path through the plane along the steps, a line per training seed (a circle at its first
  step, a cross at its last), M_o's and M_r's means as points.

Each PNG is written whole or not at all (`atomic_path`); a figure that cannot be written stops the report with a
`WriteError` (a full disk is not a figure's problem to hide), any other failure of a kind of figure becomes a
warning.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

if "matplotlib.pyplot" not in sys.modules:  # no interactive session to respect: pin Agg (headless, no display)
    matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from unlearnbench.core.catalogue import RETRAINED
from unlearnbench.report.compute.analysis import ROLE_ORDER, Study, matching
from unlearnbench.report.compute.seed_design import rank_label
from unlearnbench.runtime.files import WriteError, atomic_path, make_folder, remove_file

MAX_PANELS = 6
DPI = 90
COLOURS = {"A": "#4C72B0", "B": "#DD8452"}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def configurations(study: Study, frame: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    if frame.empty:
        return []
    return [(ident if isinstance(ident, tuple) else (ident,), part)
            for ident, part in frame.groupby(study.keys, sort=False)]


LEGEND_COLUMNS = 7  # a legend of more entries wraps onto further rows, within the figure's width


def _save(figure: Figure, path: Path, handles: list | None = None) -> Path:
    if handles:
        figure.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), LEGEND_COLUMNS),
                      fontsize=8, frameon=False)
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _panels(count: int, width: float = 4.2, height: float = 3.4) -> tuple[Figure, list]:
    columns = min(count, 3)
    rows = (count + columns - 1) // columns
    figure = Figure(figsize=(max(width * columns, 8.0), height * rows + 0.4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = [figure.add_subplot(rows, columns, k + 1) for k in range(count)]
    return figure, axes


def designs(study: Study, folder: Path) -> list[Path]:
    paths, catalogue = [], study.catalogue
    for ident, part in configurations(study, study.values):
        config = " · ".join(str(value) for value in ident if value != "")
        for metric, split in catalogue.roles("figure"):
            rows = part[(part["metric"] == metric) & (part["split"] == split)]
            unlearned = rows[rows["role"] == "unlearned"]
            if unlearned.empty:
                continue
            targets = list(dict.fromkeys(unlearned["target"]))[:MAX_PANELS]
            figure, axes = _panels(len(targets))
            handles: list = []
            for axis, target in zip(axes, targets, strict=True):
                handles = _design_panel(axis, rows[rows["target"] == target], catalogue.ideal(metric)) or handles
                axis.set_title(f"target {target}", fontsize=9)
            figure.suptitle(f"{config}: {catalogue.label(metric, split)}, design A(i₀) vs B", fontsize=10)
            paths.append(_save(figure, folder / f"designs_{slug('_'.join(map(str, ident)))}_{slug(metric)}"
                                                f"{'_' + slug(split) if split else ''}.png", handles))
    return paths


def _design_panel(axis, rows: pd.DataFrame, ideal: float | str | None) -> list:
    """Box plots of both designs per method; the retrained model's quartiles, or else the metric's ideal as a grey
    line where it is a number."""
    unlearned = rows[rows["role"] == "unlearned"].sort_values(["seed_train", "seed_unlearn", "seed_eval"])
    methods = sorted(set(unlearned["method"]))
    first_seed = unlearned["seed_train"].min()
    data, positions, colours = [], [], []
    for k, method in enumerate(methods):
        mine = unlearned[unlearned["method"] == method]
        design_a = mine[mine["seed_train"] == first_seed]["value"].to_numpy()
        design_b = mine.groupby("seed_train", sort=True)["value"].first().to_numpy()
        for offset, values, design in ((-0.2, design_a, "A"), (0.2, design_b, "B")):
            if len(values):
                data.append(values)
                positions.append(k + offset)
                colours.append(COLOURS[design])
    if data:
        boxes = axis.boxplot(data, positions=positions, widths=0.35, patch_artist=True, showfliers=True,
                             medianprops={"color": "black"})
        for patch, colour in zip(boxes["boxes"], colours, strict=True):
            patch.set_facecolor(colour)
            patch.set_alpha(0.75)
    retrained = rows[rows["role"] == "retrained"].drop_duplicates(subset=["seed_unlearn"])["value"].dropna()
    if len(retrained):
        for q, style in zip(np.quantile(retrained, [0.25, 0.5, 0.75]), (":", "--", ":"), strict=True):
            axis.axhline(q, color="black", linestyle=style, linewidth=1)
    elif isinstance(ideal, int | float):
        axis.axhline(ideal, color="grey", linewidth=1)
    axis.set_xticks(range(len(methods)))
    axis.set_xticklabels(methods, rotation=30, ha="right", fontsize=8)
    handles = [Patch(color=COLOURS["A"], label=f"A(i₀): training seed {first_seed}, its unlearning seeds"),
               Patch(color=COLOURS["B"], label="B: one unlearning seed per training seed")]
    if len(retrained):
        handles.append(Line2D([], [], color="black", linestyle="--", label="M_r: median, 25/75% dotted"))
    return handles


def wasserstein(study: Study, folder: Path) -> list[Path]:
    paths = []
    by_seed = study.wasserstein_by_seed
    summary = study.wasserstein
    for ident, part in configurations(study, by_seed):
        part = part[part["role"] == "unlearned"]
        metrics = [(m, s) for m, s in study.catalogue.roles("figure")
                   if ((part["metric"] == m) & (part["split"] == s)).any()]
        if not metrics:
            continue
        config_rows = matching(summary, dict(zip(study.keys, ident, strict=True)))
        figure, axes = _panels(len(metrics), width=4.0, height=3.2)
        for axis, (metric, split) in zip(axes, metrics, strict=True):
            rows = part[(part["metric"] == metric) & (part["split"] == split)]
            methods = sorted(set(rows["method"]))
            axis.boxplot([rows[rows["method"] == m]["w2"].to_numpy() for m in methods], positions=range(len(methods)),
                         widths=0.5, medianprops={"color": "black"})
            for k, method in enumerate(methods):
                null = config_rows[(config_rows["method"] == method) & (config_rows["metric"] == metric)
                                   & (config_rows["split"] == split)]["null_95_mean"].mean()
                axis.plot([k - 0.3, k + 0.3], [null, null], color="red", linewidth=1.5)
            axis.set_xticks(range(len(methods)))
            axis.set_xticklabels(methods, rotation=30, ha="right", fontsize=8)
            axis.set_title(study.catalogue.label(metric, split), fontsize=9)
            axis.set_ylabel("W2(A(i), B₋ᵢ)", fontsize=8)
        figure.suptitle(f"{' · '.join(map(str, ident))}: W2(A(i), B₋ᵢ) over training seeds i and targets",
                        fontsize=10)
        handles = [Line2D([], [], color="red", label="permutation null, 95th percentile (mean over i)")]
        paths.append(_save(figure, folder / f"wasserstein_{slug('_'.join(map(str, ident)))}.png", handles))
    return paths


def variance(study: Study, folder: Path) -> list[Path]:
    paths = []
    for ident, part in configurations(study, study.variance):
        part = part[part["role"] == "unlearned"]
        metrics = [(m, s) for m, s in study.catalogue.roles("figure")
                   if ((part["metric"] == m) & (part["split"] == s) & part["sigma_t2"].notna()).any()]
        if not metrics:
            continue
        figure, axes = _panels(len(metrics), width=4.0, height=3.2)
        for axis, (metric, split) in zip(axes, metrics, strict=True):
            rows = part[(part["metric"] == metric) & (part["split"] == split)]
            means = rows.groupby("method", sort=True)[["sigma_t2", "sigma_u2"]].mean()
            positions = np.arange(len(means))
            axis.bar(positions, means["sigma_t2"], color="#55A868", label="σ_T² (training seed)")
            axis.bar(positions, means["sigma_u2"], bottom=means["sigma_t2"], color="#C44E52",
                     label="σ_U² (unlearning seed)")
            for k, (t2, u2) in enumerate(zip(means["sigma_t2"], means["sigma_u2"], strict=True)):
                total = t2 + u2
                if total > 0:
                    axis.text(k, total, f"ICC {t2 / total:.2f}", ha="center", va="bottom", fontsize=7)
            axis.set_xticks(positions)
            axis.set_xticklabels(list(means.index), rotation=30, ha="right", fontsize=8)
            axis.set_title(study.catalogue.label(metric, split), fontsize=9)
            top = float(np.nanmax((means["sigma_t2"] + means["sigma_u2"]).to_numpy(), initial=0.0))
            if top > 0:
                axis.set_ylim(0, top * 1.15)
        figure.suptitle(f"{' · '.join(map(str, ident))}: variance components (mean over targets)", fontsize=10)
        handles = [Patch(color="#55A868", label="σ_T² (training seed)"),
                   Patch(color="#C44E52", label="σ_U² (unlearning seed)")]
        paths.append(_save(figure, folder / f"variance_{slug('_'.join(map(str, ident)))}.png", handles))
    return paths


def trajectories(study: Study, folder: Path) -> list[Path]:
    """Figure 3 of the seed study, per configuration, metric recorded per round and target (at most `MAX_PANELS`
    targets): one row per role and method, design A(i₀) (the runs of the smallest training seed) beside design B
    (the first unlearning seed of every training seed); a thin line per run, the mean ± std across runs over it."""
    paths = []
    for ident, part in configurations(study, study.rounds):
        for (metric, split, target), rows in part.groupby(["metric", "split", "target"], sort=False):
            series = [(role, method, mine) for (role, method), mine in rows.groupby(["role", "method"], sort=True)]
            series.sort(key=lambda item: (ROLE_ORDER.get(item[0], 9), item[1]))
            figure = Figure(figsize=(10.0, 1.9 * len(series) + 0.9), layout="constrained")
            FigureCanvasAgg(figure)
            axes = figure.subplots(len(series), 2, sharex=True, sharey=True, squeeze=False)
            for (role, method, mine), (left, right) in zip(series, axes, strict=True):
                first_seed = mine["seed_train"].min()
                runs = mine.sort_values(["seed_train", "seed_unlearn", "seed_eval", "round"])
                first_unlearning = runs.groupby("seed_train")["seed_unlearn"].transform("min")
                designs_ = {"A": runs[runs["seed_train"] == first_seed],
                            "B": runs[runs["seed_unlearn"] == first_unlearning]}
                for axis, (design, chosen) in zip((left, right), designs_.items(), strict=True):
                    _run_lines(axis, chosen, COLOURS[design])
                name = method if role == "unlearned" else f"({role})"
                left.set_ylabel(f"{name}\n{metric}", fontsize=8)
            axes[0][0].set_title(f"A(i₀): training seed {part['seed_train'].min()}, its unlearning seeds", fontsize=9)
            axes[0][1].set_title("B: one unlearning seed per training seed", fontsize=9)
            for axis in axes[-1]:
                axis.set_xlabel("round", fontsize=8)
            figure.suptitle(f"{' · '.join(map(str, ident))}, target {target}: "
                            f"{study.catalogue.label(metric, split)} per round "
                            "(thin: one run; thick: mean ± std)", fontsize=10)
            name = (f"trajectory_{slug('_'.join(map(str, ident)))}_{slug(metric)}{'_' + slug(split) if split else ''}"
                    f"_{slug(str(target))}")
            paths.append(_save(figure, folder / f"{name}.png"))
    return paths


def _run_lines(axis, runs: pd.DataFrame, colour: str) -> None:
    """One thin line per run (seed triple), and the mean ± std across runs per round."""
    for _, run in runs.groupby(["seed_train", "seed_unlearn", "seed_eval"], sort=True):
        axis.plot(run["round"], run["value"], color=colour, linewidth=0.6, alpha=0.8)
    summary = runs.groupby("round", sort=True)["value"].agg(["mean", "std"]).fillna({"std": 0.0})
    axis.plot(summary.index, summary["mean"], color="black", linewidth=1.2)
    axis.fill_between(summary.index, summary["mean"] - summary["std"], summary["mean"] + summary["std"],
                      color=colour, alpha=0.2)
    axis.tick_params(labelsize=7)


def study_metrics(study: Study, part: pd.DataFrame) -> list[tuple[str, str]]:
    """The figure metrics judged against the retrained model that a configuration records (the image task's
    forget- and retain-set test accuracy): what Figure 1 of the seed study shows."""
    catalogue = study.catalogue
    return [(m, s) for m, s in catalogue.roles("figure") if catalogue.ideal(m) == RETRAINED
            and ((part["metric"] == m) & (part["split"] == s)).any()]


def seed_study(study: Study, folder: Path) -> list[Path]:
    """Figure 1 of the seed study, per configuration and target (at most `MAX_PANELS` targets): the study metrics
    (`study_metrics`) of every method, the single-training-seed design A(i₀) and the multi-training-seed design B
    side by side, the retrained model's quartiles as horizontal lines."""
    paths = []
    for ident, part in configurations(study, study.values):
        metrics = study_metrics(study, part)
        if not metrics:
            continue
        chosen = part[pd.MultiIndex.from_frame(part[["metric", "split"]]).isin(metrics)]
        for target in list(dict.fromkeys(chosen[chosen["role"] == "unlearned"]["target"]))[:MAX_PANELS]:
            figure, axes = _panels(len(metrics), width=5.5, height=3.6)
            handles: list = []
            for axis, (metric, split) in zip(axes, metrics, strict=True):
                rows = chosen[(chosen["target"] == target) & (chosen["metric"] == metric)
                              & (chosen["split"] == split)]
                handles = _design_panel(axis, rows, RETRAINED) or handles
                axis.set_title(study.catalogue.label(metric, split), fontsize=9)
            figure.suptitle(f"{' · '.join(map(str, ident))}, target {target}: one training seed against many",
                            fontsize=10)
            name = f"seed_study_{slug('_'.join(map(str, ident)))}_{slug(str(target))}.png"
            paths.append(_save(figure, folder / name, handles))
    return paths


def ranks(study: Study, folder: Path) -> list[Path]:
    """Per configuration: Kendall's τ between the single-training-seed ranking of each training seed and the other
    seeds' ranking, per ranked metric and target; a cross where the best method changed."""
    paths = []
    for ident, part in configurations(study, study.ranks_by_seed):
        panels = list(part.groupby(["metric", "split"], sort=False))
        figure, axes = _panels(len(panels), width=4.5, height=3.2)
        for axis, ((metric, split), rows) in zip(axes, panels, strict=True):
            for k, (target, mine) in enumerate(rows.groupby("target", sort=False)):
                changed = mine["best_changed"].astype(bool)
                colour = f"C{k % 10}"
                axis.plot(mine["seed_train"], mine["kendall_tau"], "o-", color=colour, label=f"target {target}",
                          markersize=4, linewidth=1)
                axis.plot(mine["seed_train"][changed], mine["kendall_tau"][changed], "x", color="black", markersize=8)
            axis.set_ylim(-1.05, 1.05)
            axis.set_xlabel("training seed i", fontsize=8)
            axis.set_ylabel("Kendall τ, A(i) vs the other seeds", fontsize=8)
            axis.set_title(f"ranked by {rank_label(metric, split, study.catalogue)}", fontsize=9)
        figure.suptitle(f"{' · '.join(map(str, ident))}: how one training seed ranks the methods", fontsize=10)
        handles = [Line2D([], [], color="black", marker="x", linestyle="", label="best method changed")]
        paths.append(_save(figure, folder / f"ranks_{slug('_'.join(map(str, ident)))}.png", handles))
    return paths


def leaderboard(study: Study, folder: Path) -> list[Path]:
    """Per configuration with a test: the critical-difference diagram of the methods' mean ranks (scikit-posthocs),
    methods joined by a bar where Wilcoxon–Holm finds no difference at α = 0.05."""
    import scikit_posthocs

    from unlearnbench.report.compute.leaderboard import ALPHA, figure_stem, main_metric
    from unlearnbench.report.render.words import metric_label

    paths = []
    for board in study.leaderboard:
        metric, split = main_metric(board)
        significance = board.significance.get((metric, split))
        if significance is None:
            continue
        ranks = board.ranks[(metric, split)].mean()
        figure = Figure(figsize=(8.0, 1.2 + 0.22 * len(ranks)))
        FigureCanvasAgg(figure)
        axis = figure.add_axes((0.17, 0.04, 0.66, 0.8))  # room for the method names either side
        scikit_posthocs.critical_difference_diagram(ranks, significance, alpha=ALPHA, ax=axis)
        blocks = len(board.ranks[(metric, split)])
        name = metric_label(metric, split, study.catalogue)
        axis.set_title(f"{' · '.join(map(str, board.config.values()))}: {name} over {blocks} "
                       f"blocks (bar: no difference, Wilcoxon–Holm α = {ALPHA:g})", fontsize=9)
        paths.append(_save(figure, folder / f"{figure_stem(board.config)}.png"))
    return paths


def forget_quality(study: Study, folder: Path) -> list[Path]:
    """`forget_quality_<config>.png`: per target, F per method under each single-original-model pool A(i) (points)
    and under the multi-training-seed pool B (a line), with the null's median (grey tick); beside it the
    distribution of the per-example ε of pool B (of the first A(i) where there is no B). The retrained gold standard
    is left out: its M_u is M_r itself, F = 1 by construction."""
    forgetting = study.forgetting
    if forgetting is None or forgetting.empty:
        return []
    paths = []
    for ident, part in configurations(study, forgetting.quality):
        targets = list(pd.unique(part["target"]))[:MAX_PANELS // 2]
        figure = Figure(figsize=(11.0, 3.6 * len(targets) + 0.4), layout="constrained")
        FigureCanvasAgg(figure)
        for row, target in enumerate(targets):
            rows = part[part["target"] == target]
            examples = matching(forgetting.by_example, {**dict(zip(study.keys, ident, strict=True)),
                                                        "target": target})
            methods = [m for m in pd.unique(rows["method"])  # the gold standards: F = 1, M_u = M_r
                       if m not in study.catalogue.gold_standards]
            _quality_panel(figure.add_subplot(len(targets), 2, 2 * row + 1), rows, methods, target)
            _epsilon_panel(figure.add_subplot(len(targets), 2, 2 * row + 2), examples, methods, target)
        figure.suptitle(f"{' · '.join(map(str, ident))}: forgetting quality F (NeurIPS 2023 competition)",
                        fontsize=10)
        handles = [Line2D([], [], color=COLOURS["A"], marker="o", linestyle="", label="A(i): one original model"),
                   Line2D([], [], color=COLOURS["B"], linewidth=2, label="B: one job per training seed"),
                   Line2D([], [], color="grey", linewidth=2, label="null median (pool split at random)")]
        paths.append(_save(figure, folder / f"forget_quality_{slug('_'.join(map(str, ident)))}.png", handles))
    return paths


def _quality_panel(axis, rows: pd.DataFrame, methods: list[str], target: str) -> None:
    for k, method in enumerate(methods):
        mine = rows[rows["method"] == method]
        a, b = mine[mine["design"] == "A"], mine[mine["design"] == "B"]
        axis.plot(np.full(len(a), k), a["forget_quality"], "o", color=COLOURS["A"], alpha=0.7, markersize=4)
        for value, colour, width in ((b["forget_quality"], COLOURS["B"], 2),
                                     (mine["forget_quality_null_median"], "grey", 1.5)):
            if len(value):
                axis.plot([k - 0.3, k + 0.3], [value.iloc[-1]] * 2, color=colour, linewidth=width)
    axis.set_xticks(range(len(methods)))
    axis.set_xticklabels(methods, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel("forgetting quality F", fontsize=8)
    axis.set_title(f"target {target}", fontsize=9)


def _epsilon_panel(axis, examples: pd.DataFrame, methods: list[str], target: str) -> None:
    design = "B" if (examples["design"] == "B").any() else "A"
    chosen = examples[examples["design"] == design]
    if design == "A" and not chosen.empty:
        chosen = chosen[chosen["seed_train"] == chosen["seed_train"].min()]
    data = [chosen[chosen["method"] == m]["epsilon"].to_numpy() for m in methods]
    axis.boxplot([d if len(d) else [np.nan] for d in data], positions=range(len(methods)), widths=0.5,
                 medianprops={"color": "black"})
    axis.set_xticks(range(len(methods)))
    axis.set_xticklabels(methods, rotation=30, ha="right", fontsize=8)
    axis.set_yscale("symlog", linthresh=1.0)  # the scored range [0, 4] and the cap of 50 in one panel
    axis.set_ylim(bottom=0)
    axis.set_ylabel("ε per forget example", fontsize=8)
    which = "B" if design == "B" else "A(i), smallest i"
    axis.set_title(f"target {target}: ε per example, pool {which}", fontsize=9)


CURVE_SERIES = [("loss", "training loss"), ("train_acc", "training accuracy"), ("lr", "learning rate")]
CURVE_ROWS = {"original": ("M_o: a line per training seed", "training seed "),  # (row title, legend prefix)
              "retrained": ("M_r: a line per target and unlearning seed", "unlearning seed "),
              "unlearned": ("methods: a line per run", "")}
MAX_LEGEND = 10  # up to this many seeds (methods) a colour each, all named; beyond, a sequential map in seed order
LINE_STYLES = ["-", "--", ":", "-."]  # one per target, where there are no more targets than styles
LOG_SPREAD = 10.0  # a loss axis spanning this factor or more is drawn on a log scale


def curves(study: Study, folder: Path) -> list[Path]:
    """`curves_<config>.png`: the training curves of the configuration's models, a row per kind of model (those
    it has), a column per series; a gap in a line is a missing or non-finite value, a cross the last value before
    missing ones at the end (a diverged model) or a value the line cannot show alone."""
    paths = []
    for ident, part in configurations(study, study.curves):
        rows = [(role, title) for role, (title, _) in CURVE_ROWS.items() if (part["role"] == role).any()]
        figure = Figure(figsize=(13.0, 2.9 * len(rows) + 0.7), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(rows), len(CURVE_SERIES), squeeze=False)
        for (role, title), row in zip(rows, axes, strict=True):
            _curve_row(row, part[part["role"] == role], role)
            row[0].set_ylabel(title, fontsize=8)
        for axis in axes[-1]:
            axis.set_xlabel("epoch", fontsize=8)
        figure.suptitle(f"{' · '.join(map(str, ident))}: training curves", fontsize=10)
        paths.append(_save(figure, folder / f"curves_{slug('_'.join(map(str, ident)))}.png"))
    return paths


def _curve_row(axes, rows: pd.DataFrame, role: str) -> None:
    """One kind of model's curves: colour per seed (per method for the methods), line style per target where
    there are few targets; thin, translucent lines when there are many."""
    key = "method" if role == "unlearned" else "seed"
    colours = _colours(sorted(pd.unique(rows[key])))
    targets = list(pd.unique(rows["target"]))
    styles = {t: LINE_STYLES[k] if len(targets) <= len(LINE_STYLES) else "-" for k, t in enumerate(targets)}
    many = rows["curve"].nunique() > MAX_LEGEND
    for _, curve in rows.groupby("curve", sort=False):
        first = curve.iloc[0]
        colour = colours[first[key]]
        for axis, (series, _) in zip(axes, CURVE_SERIES, strict=True):
            axis.plot(curve["epoch"], curve[series], color=colour, linestyle=styles[first["target"]],
                      linewidth=0.7 if many else 1.2, alpha=0.55 if many else 0.9)
            marked = _stranded(curve[series].to_numpy(dtype=float))
            axis.plot(curve["epoch"][marked], curve[series][marked], "x", color=colour, markersize=5)
    for axis, (series, title) in zip(axes, CURVE_SERIES, strict=True):
        _curve_axis(axis, rows, series, title)
    handles = _curve_legend(colours, styles, CURVE_ROWS[role][1])
    if handles:
        axes[-1].legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7, frameon=False)


def _stranded(values: np.ndarray) -> np.ndarray:
    """The points a line does not show or that end in a gap: finite values with no finite neighbour, and the last
    finite value before missing ones at the end (where a model diverged)."""
    finite = np.isfinite(values)
    before = np.r_[False, finite[:-1]]
    after = np.r_[finite[1:], False]
    marked = finite & ~before & ~after
    if len(values) and finite.any() and not finite[-1]:
        marked[np.flatnonzero(finite)[-1]] = True
    return marked


def _colours(keys: list) -> dict:
    """A colour per key: the qualitative cycle for few keys, a sequential map (seed order) for many."""
    if len(keys) <= MAX_LEGEND:
        return {key: f"C{k}" for k, key in enumerate(keys)}
    shades = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.92, len(keys)))
    return dict(zip(keys, shades, strict=True))


def _curve_axis(axis, rows: pd.DataFrame, series: str, title: str) -> None:
    """Scale and title of one panel: a log loss axis where the losses are positive and span `LOG_SPREAD`, accuracy
    on [0, 1] where it lies there, and how many curves have missing values."""
    values = rows[series].dropna()
    if series == "loss" and len(values) and values.min() > 0 and values.max() >= LOG_SPREAD * values.min():
        axis.set_yscale("log")
    if series == "train_acc" and len(values) and values.min() >= 0 and values.max() <= 1:
        axis.set_ylim(-0.02, 1.02)
    gaps = int(rows.groupby("curve")[series].apply(lambda s: s.isna().any()).sum())
    axis.set_title(f"{title}{f' ({gaps} with missing values)' if gaps else ''}", fontsize=9)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.tick_params(labelsize=7)


def _curve_legend(colours: dict, styles: dict, prefix: str) -> list:
    """Handles for the colours (where many, the two ends of the sequential map) and the targets' line styles
    (where more than one)."""
    labels = {key: f"{prefix}{key}" for key in colours}
    if len(colours) > MAX_LEGEND:
        first, *_, last = colours
        labels = {first: labels[first], last: f"… {labels[last]}"}
    handles = [Line2D([], [], color=colours[key], label=text) for key, text in labels.items()]
    if 1 < len(styles) <= len(LINE_STYLES):
        handles += [Line2D([], [], color="black", linestyle=style, label=f"target {target}")
                    for target, style in styles.items()]
    return handles


def dynamics(study: Study, folder: Path) -> list[Path]:
    """`dynamics_<config>_<metric>_<split>.png` per configuration and headline metric recorded along the steps."""
    paths = []
    for ident, part in configurations(study, study.dynamics):
        for metric, split in study.catalogue.roles("headline"):
            rows = part[(part["metric"] == metric) & (part["split"] == split)]
            if rows.empty:
                continue
            targets = list(dict.fromkeys(rows["target"]))[:MAX_PANELS]
            figure, axes = _panels(len(targets))
            colours = _colours(sorted(pd.unique(rows["method"])))
            for axis, target in zip(axes, targets, strict=True):
                _dynamics_panel(axis, rows[rows["target"] == target], colours)
                axis.set_title(f"target {target}", fontsize=9)
            figure.suptitle(f"{' · '.join(str(v) for v in ident if v != '')}: "
                            f"{study.catalogue.label(metric, split)} along the steps\n(line: mean over training "
                            "seeds; band: its 95% t-interval)", fontsize=10)
            handles = [*(Line2D([], [], color=colour, label=method) for method, colour in colours.items()),
                       Line2D([], [], color="grey", linestyle="--", label="M_o (mean)"),
                       Line2D([], [], color="black", linestyle=":", label="M_r (mean)")]
            name = f"dynamics_{slug('_'.join(map(str, ident)))}_{slug(metric)}{'_' + slug(split) if split else ''}"
            paths.append(_save(figure, folder / f"{name}.png", handles))
    return paths


def _dynamics_panel(axis, rows: pd.DataFrame, colours: dict) -> None:
    for method, mine in rows.groupby("method", sort=True):
        mine = mine.sort_values("step")
        axis.plot(mine["step"], mine["mean"], color=colours[method], linewidth=1.2, marker="o", markersize=2.5)
        banded = mine["low"].notna()
        if banded.any():
            axis.fill_between(mine["step"][banded], mine["low"][banded], mine["high"][banded], color=colours[method],
                              alpha=0.2, linewidth=0)
    for column, style, colour in (("original_mean", "--", "grey"), ("retrained_mean", ":", "black")):
        reference = rows[column].dropna()
        if len(reference):
            axis.axhline(float(reference.iloc[0]), color=colour, linestyle=style, linewidth=1)
    axis.set_xlabel("step", fontsize=8)
    axis.tick_params(labelsize=7)


def plane(study: Study, folder: Path) -> list[Path]:
    """`plane_<config>.png`: each method's path through the forgetting–utility plane, a line per training seed."""
    axes_declared = study.catalogue.plane_axes()
    if axes_declared is None:
        return []
    (forget_metric, forget_split), (utility_metric, utility_split) = axes_declared
    paths = []
    for ident, part in configurations(study, study.dynamics_paths):
        panels = list(part.groupby(["target", "method"], sort=False))[:2 * MAX_PANELS]
        figure, axes = _panels(len(panels), width=4.2, height=3.6)
        config = matching(study.table, dict(zip(study.keys, ident, strict=True)))
        for axis, ((target, method), mine) in zip(axes, panels, strict=True):
            colours = _colours(sorted(pd.unique(mine["seed_train"])))
            for seed, run in mine.groupby("seed_train", sort=True):
                run = run.sort_values("step")
                axis.plot(run["forgetting"], run["utility"], color=colours[seed], linewidth=1.1,
                          label=f"training seed {seed}")
                axis.plot(run["forgetting"].iloc[:1], run["utility"].iloc[:1], "o", color=colours[seed], markersize=4)
                axis.plot(run["forgetting"].iloc[-1:], run["utility"].iloc[-1:], "x", color=colours[seed],
                          markersize=6)
            for role, marker in (("original", "s"), ("retrained", "*")):
                point = [_reference(config, role, target, metric, split)
                         for metric, split in ((forget_metric, forget_split), (utility_metric, utility_split))]
                if not any(math.isnan(v) for v in point):
                    axis.plot(*point, marker, color="black", markersize=8, label=f"M_{role[0]} (mean)")
            axis.set_xlabel(study.catalogue.label(forget_metric, forget_split), fontsize=8)
            axis.set_ylabel(study.catalogue.label(utility_metric, utility_split), fontsize=8)
            axis.set_title(f"{method}, target {target}", fontsize=9)
            axis.tick_params(labelsize=7)
            axis.legend(fontsize=6, frameon=False)
        figure.suptitle(f"{' · '.join(str(v) for v in ident if v != '')}: forgetting–utility path per training "
                        "seed (○ first step, × last)", fontsize=10)
        paths.append(_save(figure, folder / f"plane_{slug('_'.join(map(str, ident)))}.png"))
    return paths


def _reference(table: pd.DataFrame, role: str, target: str, metric: str, split: str) -> float:
    """The role's mean over training seeds (table.csv) of one metric, NaN where it has none."""
    rows = table[(table["role"] == role) & (table["target"] == target) & (table["metric"] == metric)
                 & (table["split"] == split)]["mean"].dropna()
    return float(rows.iloc[0]) if len(rows) else math.nan


def draw(study: Study, folder: Path) -> tuple[list[Path], list[str]]:
    """Every figure into `folder`; (paths, problems). PNG files of an earlier build that this one did not redraw are
    removed at the end: until then (and when a figure cannot be written) the earlier ones stay whole."""
    make_folder(folder)
    paths, problems = [], []
    kinds = (leaderboard, seed_study, designs, wasserstein, variance, ranks, forget_quality, trajectories, curves,
             dynamics, plane) if study.has_seed_spread else (leaderboard, trajectories, curves, dynamics, plane)
    for kind in kinds:
        try:
            paths += kind(study, folder)
        except WriteError:
            raise
        except Exception as error:  # a figure never costs the report its tables
            problems.append(f"figures ({kind.__name__}) failed: {type(error).__name__}: {error}")
    remove_stale(folder, paths)
    return paths, problems


def remove_stale(folder: Path, paths: list[Path]) -> None:
    """Remove the PNG files of `folder` that are not among `paths` (an earlier build's figures, which the report no
    longer shows)."""
    for old in sorted(set(folder.glob("*.png")) - set(paths)):
        remove_file(old)
