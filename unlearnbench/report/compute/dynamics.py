"""Unlearning dynamics: the metrics along a method's steps, across seeds (issue 58; pandas, no torch).

The contract with the jobs (`evaluation.during`, issue 58's job side): a record of `result.json` (`records`,
core/result.py, docs/metrics.md) may carry `"step": int`, the optimiser step of the method's unlearning (0: M_o
before any step), and `"epoch": float | null`. A record without `step` is a final record, as always. Step records
exist for role `unlearned` (with a method); M_o's and M_r's final records are the reference lines. A step record
never enters a statistic of the final models (leaderboard, summary, variance, seed design, power, forgetting
quality, tuning objective, console table): `read/collect.py` keeps it out of the records' frame, in its job's
`steps`, and only this module reads it. A step record of another role, or of a failed job or a tuning's trial, is
left out here too.

- `step_values`: the step records of the complete jobs as the study spells its rows (configuration keys, target,
  method, metric, split as strings; seeds as integers), duplicates (the same design given twice) kept once;
- `dynamics_by_seed.csv`: per row of the study, step and training seed, the mean over that seed's unlearning (and
  evaluation) seeds, how many values it pools, and the mean epoch recorded at that step;
- `dynamics.csv`: per row and step, the mean over training seeds of those per-seed means, its 95% t-interval across
  training seeds (df I − 1; none with one training seed), I, n, the mean epoch recorded, and the reference lines:
  M_o's mean over training seeds and M_r's (`table.csv`'s, per-seed means first);
- `dynamics_best.csv`: per row of a headline metric with an ideal, the step whose mean is closest to the ideal (for
  `retrained`: to M_r's mean), and each training seed's own best step (min, median, max over the seeds). A step
  chosen on the runs it is reported on is optimistic: issue 58's tuning of the stopping step judges it on held-out
  seeds;
- `dynamics_best_own.csv` (`report.best_step=true`, off by default): per row of a headline metric with a goal (the
  same goal as `dynamics_best.csv`) and per job (its seeds), the step whose value is closest to the goal on that
  job's own run, its value, the last step's and the job's final value; `best_own_summary` averages them over the
  jobs. Optimistic by construction: the step is chosen on the very run it is reported on, on at most
  `evaluation.during.max_examples` examples per split. `experiment=tune` with `tune.stop_step=true` chooses the step
  on some training seeds and judges it on others (docs/tuning.md): the way to trust it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from unlearnbench.core.catalogue import RETRAINED, Catalogue
from unlearnbench.report.compute.analysis import CONFIG, OPTIONAL_CONFIG, SEEDS, Study
from unlearnbench.report.compute.stats import t_interval

LEVEL = 0.95  # of dynamics.csv's intervals
ROW = ["target", "method", "metric", "split"]  # a method's row of the study (role: unlearned)
STEP_COLUMNS = ["step", "epoch", *SEEDS, "value"]
BY_SEED_COLUMNS = ["step", "seed_train", "mean", "n", "epoch"]
DYNAMICS_COLUMNS = ["step", "epoch", "mean", "low", "high", "I", "n", "original_mean", "retrained_mean"]
BEST_COLUMNS = ["goal", "steps", "best_step", "best_epoch", "best_mean", "best_low", "best_high", "I", "last_step",
                "last_mean", "seed_best_min", "seed_best_median", "seed_best_max"]


def step_values(jobs: list[dict], keys: list[str]) -> pd.DataFrame:
    """The step records of the complete jobs, one row each: `keys`, `ROW`, `STEP_COLUMNS` (value NaN where missing
    or not finite); configuration and row columns spelled as `analysis.prepare` spells them."""
    rows = [row for job in jobs if job.get("status") == "complete" for row in job.get("steps") or []
            if row.get("role") == "unlearned" and row.get("method")]
    columns = [*keys, *ROW, *STEP_COLUMNS]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows)
    for column in [*CONFIG, *OPTIONAL_CONFIG, *ROW]:
        frame[column] = (frame[column] if column in frame else pd.Series("", index=frame.index)).astype(
            object).fillna("").astype(str)
    for column in OPTIONAL_CONFIG:  # as analysis.prepare: 1, not 1.0
        frame[column] = frame[column].str.replace(r"^(-?\d+)\.0$", r"\1", regex=True)
    for column in ["step", "epoch", "value", *SEEDS]:
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if column in frame else np.nan
    frame = frame.dropna(subset=["seed_train", "step"])
    frame["seed_unlearn"] = frame["seed_unlearn"].fillna(frame["seed_train"])
    frame["seed_eval"] = frame["seed_eval"].fillna(frame["seed_unlearn"])
    frame = frame.astype({column: "int64" for column in ["step", *SEEDS]})
    frame["value"] = frame["value"].where(np.isfinite(frame["value"]))
    frame = frame.drop_duplicates(subset=[*keys, *ROW, "step", *SEEDS], keep="first")
    return frame[columns].reset_index(drop=True)


def by_seed_table(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """dynamics_by_seed.csv: per row, step and training seed, the mean over its unlearning (and evaluation) seeds."""
    columns = [*keys, *ROW, *BY_SEED_COLUMNS]
    values = values.dropna(subset=["value"])
    if values.empty:
        return pd.DataFrame(columns=columns)
    table = values.groupby([*keys, *ROW, "step", "seed_train"], sort=False).agg(
        mean=("value", "mean"), n=("value", "count"), epoch=("epoch", "mean")).reset_index()
    return ordered(table, keys, values, ["step", "seed_train"])[columns]


def dynamics_table(by_seed: pd.DataFrame, keys: list[str], reference: pd.DataFrame) -> pd.DataFrame:
    """dynamics.csv: per row and step, the mean over training seeds of the per-seed means, its t-interval, I, n, the
    mean epoch, and M_o's and M_r's means over training seeds from `reference` (the study's `table`)."""
    columns = [*keys, *ROW, *DYNAMICS_COLUMNS]
    if by_seed.empty:
        return pd.DataFrame(columns=columns)
    groups = by_seed.groupby([*keys, *ROW, "step"], sort=False)
    table = groups.agg(mean=("mean", "mean"), I=("mean", "count"), n=("n", "sum"), epoch=("epoch", "mean"))
    bounds = groups["mean"].apply(lambda seeds: t_interval(seeds.to_numpy(dtype=float), LEVEL))
    table["low"], table["high"] = [low for low, _ in bounds], [high for _, high in bounds]
    table = table.reset_index()
    for role in ("original", "retrained"):
        means = reference_means(reference, keys, role)
        table = table.merge(means, on=[*keys, "target", "metric", "split"], how="left")
    return table[columns]


def reference_means(table: pd.DataFrame, keys: list[str], role: str) -> pd.DataFrame:
    """`<role>_mean` per configuration, target, metric and split: the role's mean over training seeds (`table.csv`;
    the first row where a role has several, as the report's tables read M_r)."""
    on = [*keys, "target", "metric", "split"]
    rows = table[table["role"] == role] if not table.empty else table
    if rows.empty:
        return pd.DataFrame(columns=[*on, f"{role}_mean"])
    return rows.drop_duplicates(subset=on)[[*on, "mean"]].rename(columns={"mean": f"{role}_mean"})


def ordered(table: pd.DataFrame, keys: list[str], order_from: pd.DataFrame, then: list[str]) -> pd.DataFrame:
    """Rows in a stable order: configuration and target as the jobs came, method by name, metric and split as the
    jobs wrote them, then `then`."""
    ranks = {c: {v: i for i, v in enumerate(pd.unique(order_from[c]))} for c in ("target", "metric", "split")}
    configuration = {v: i for i, v in enumerate(dict.fromkeys(map(tuple, order_from[keys].to_numpy())))}
    sort = table.assign(_config=[configuration.get(tuple(v), 1e9) for v in table[keys].to_numpy()],
                        **{f"_{c}": table[c].map(ranks[c]).fillna(1e9) for c in ranks})
    by = ["_config", "_target", "method", "_metric", "_split", *then]
    return sort.sort_values(by, kind="stable").drop(columns=[f"_{c}" for c in ("config", *ranks)]).reset_index(
        drop=True)


def goal_of(ideal: float | str | None, retrained_mean: float) -> float:
    """The value a step's mean is judged against: the metric's ideal, M_r's mean for `retrained`; NaN for none."""
    if ideal == RETRAINED:
        return retrained_mean
    return math.nan if ideal is None else float(ideal)


def best_steps(dynamics: pd.DataFrame, by_seed: pd.DataFrame, keys: list[str], catalogue: Catalogue) -> pd.DataFrame:
    """dynamics_best.csv: per row of a headline metric whose goal is known (`goal_of`), the step with the mean
    closest to it (the earliest on ties), that step's mean and interval, the last step's mean, and the spread of each
    training seed's own best step (its per-seed means against the same goal)."""
    columns = [*keys, *ROW, *BEST_COLUMNS]
    headline = set(catalogue.roles("headline"))
    rows = []
    for ident, mine in dynamics.groupby([*keys, *ROW], sort=False):
        row = dict(zip([*keys, *ROW], ident, strict=True))
        goal = goal_of(catalogue.ideal(row["metric"]), mine["retrained_mean"].iloc[0])
        if (row["metric"], row["split"]) not in headline or math.isnan(goal):
            continue
        mine = mine.sort_values("step", kind="stable")
        best = mine.loc[(mine["mean"] - goal).abs().idxmin()]
        seeds = by_seed.merge(pd.DataFrame([row]), on=[*keys, *ROW]).sort_values(["seed_train", "step"],
                                                                                kind="stable")
        seed_best = [float(part.loc[(part["mean"] - goal).abs().idxmin(), "step"])
                     for _, part in seeds.groupby("seed_train", sort=True)]
        rows.append({**row, "goal": goal, "steps": len(mine), "best_step": int(best["step"]),
                     "best_epoch": best["epoch"], "best_mean": best["mean"], "best_low": best["low"],
                     "best_high": best["high"], "I": int(best["I"]), "last_step": int(mine["step"].iloc[-1]),
                     "last_mean": mine["mean"].iloc[-1], "seed_best_min": min(seed_best),
                     "seed_best_median": float(np.median(seed_best)), "seed_best_max": max(seed_best)})
    return pd.DataFrame(rows, columns=columns)


OWN_COLUMNS = ["seed_train", "seed_unlearn", "seed_eval", "goal", "steps", "best_step", "best_epoch", "best_value",
               "last_step", "last_value", "final_value"]
OWN_SUMMARY_COLUMNS = ["goal", "jobs", "final_mean", "final_distance", "best_own_mean", "best_own_distance",
                       "best_step_min", "best_step_median", "best_step_max"]


def best_own_steps(values: pd.DataFrame, dynamics: pd.DataFrame, finals: pd.DataFrame, keys: list[str],
                   catalogue: Catalogue) -> pd.DataFrame:
    """dynamics_best_own.csv: per row of a headline metric whose goal is known (`goal_of`, with the row's M_r mean
    as `dynamics_best.csv` takes it) and per job (training, unlearning and evaluation seed), the step of that job's
    own run whose value is closest to the goal (the earliest on ties), that value, the last step's, and the job's
    final value (`finals`: the study's `values`, NaN where the job has none)."""
    columns = [*keys, *ROW, *OWN_COLUMNS]
    headline = set(catalogue.roles("headline"))
    goals = dynamics.drop_duplicates(subset=[*keys, *ROW])[[*keys, *ROW, "retrained_mean"]] if not dynamics.empty \
        else pd.DataFrame(columns=[*keys, *ROW, "retrained_mean"])
    final = finals.drop_duplicates(subset=[*keys, *ROW, *SEEDS], keep="last").set_index(
        [*keys, *ROW, *SEEDS])["value"] if not finals.empty else pd.Series(dtype=float)
    rows = []
    for ident, mine in values.dropna(subset=["value"]).merge(goals, on=[*keys, *ROW]).groupby(
            [*keys, *ROW, *SEEDS], sort=False):
        row = dict(zip([*keys, *ROW, *SEEDS], ident, strict=True))
        goal = goal_of(catalogue.ideal(row["metric"]), mine["retrained_mean"].iloc[0])
        if (row["metric"], row["split"]) not in headline or math.isnan(goal):
            continue
        mine = mine.sort_values("step", kind="stable")
        best = mine.loc[(mine["value"] - goal).abs().idxmin()]
        rows.append({**row, "goal": goal, "steps": len(mine), "best_step": int(best["step"]),
                     "best_epoch": best["epoch"], "best_value": best["value"], "last_step": int(mine["step"].iloc[-1]),
                     "last_value": mine["value"].iloc[-1], "final_value": final.get(ident, math.nan)})
    return pd.DataFrame(rows, columns=columns)


def best_own_summary(own: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per row of `best_own_steps`' table, over its jobs: the mean final value and its mean distance to the goal
    beside the mean best-on-its-own-run value and its mean distance (optimistic), and the spread of the jobs' best
    steps (min, median, max)."""
    columns = [*keys, *ROW, *OWN_SUMMARY_COLUMNS]
    if own.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for ident, mine in own.groupby([*keys, *ROW], sort=False):
        goal = mine["goal"].iloc[0]
        rows.append({**dict(zip([*keys, *ROW], ident, strict=True)), "goal": goal, "jobs": len(mine),
                     "final_mean": mine["final_value"].mean(),
                     "final_distance": (mine["final_value"] - goal).abs().mean(),
                     "best_own_mean": mine["best_value"].mean(),
                     "best_own_distance": (mine["best_value"] - goal).abs().mean(),
                     "best_step_min": mine["best_step"].min(), "best_step_median": float(mine["best_step"].median()),
                     "best_step_max": mine["best_step"].max()})
    return pd.DataFrame(rows, columns=columns)


def plane_paths(by_seed: pd.DataFrame, keys: list[str], catalogue: Catalogue) -> pd.DataFrame:
    """Each training seed's path in the catalogue's forgetting–utility plane: per configuration, target, method,
    training seed and step where both axes have a value, `forgetting` and `utility` (the per-seed means); empty where
    the catalogue declares no plane."""
    axes = catalogue.plane_axes()
    on = [*keys, "target", "method", "seed_train", "step"]
    if axes is None or by_seed.empty:
        return pd.DataFrame(columns=[*on, "forgetting", "utility"])
    (forget_metric, forget_split), (utility_metric, utility_split) = axes
    def axis(metric: str, split: str, name: str) -> pd.DataFrame:
        rows = by_seed[(by_seed["metric"] == metric) & (by_seed["split"] == split)]
        return rows[[*on, "mean"]].rename(columns={"mean": name})

    paths = axis(forget_metric, forget_split, "forgetting").merge(axis(utility_metric, utility_split, "utility"),
                                                                 on=on)
    return paths.sort_values(on, kind="stable").reset_index(drop=True)


def analyse_dynamics(study: Study, jobs: list[dict], best_step: bool = False) -> Study:
    """The study with its dynamics tables filled from the jobs' step records (all empty where there are none); with
    `best_step` (`report.best_step`), the best step on each job's own run too (`dynamics_best_own`)."""
    values = step_values(jobs, study.keys)
    study.dynamics_by_seed = by_seed_table(values, study.keys)
    study.dynamics = dynamics_table(study.dynamics_by_seed, study.keys, study.table)
    study.dynamics_best = best_steps(study.dynamics, study.dynamics_by_seed, study.keys, study.catalogue)
    study.dynamics_paths = plane_paths(study.dynamics_by_seed, study.keys, study.catalogue)
    if best_step:
        study.dynamics_best_own = best_own_steps(values, study.dynamics, study.values, study.keys, study.catalogue)
    return study
