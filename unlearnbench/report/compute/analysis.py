"""From the tidy records of a sweep to the report's tables (pandas; the statistics live in `stats`).

Vocabulary (docs/seed-study.md):
- a *row* of the study is one (dataset, model, scenario, target, method, role, metric, split): Z its value;
- Z_ij is the value of training seed i (`seed_train`) and unlearning seed j nested in i: one job. A job's evaluation
  seed normally follows its unlearning seed; where a sweep varies it separately, the variance split takes the
  three-stage model Z_ijk (k the evaluation seed; `seed_variance_eval.csv`) and the two-stage table its σ_T², σ_U²
  and σ_E² (`with_evaluation_split`), while the designs A(i), B and their W2 count each (unlearning seed, evaluation
  seed) pair of a training seed as one j;
- the single-training-seed design A(i) = {Z_ij : j}; the multi-training-seed design B = {Z_i1 : i}, where Z_i1 is the
  job of training seed i with the smallest unlearning seed (then evaluation seed);
- records with a `round` (the ranking task's NDCG@10 per round) enter the statistics with their last round only;
  every round goes into `summary.csv` and the trajectory figures;
- records with a `step` (the metrics along a method's steps) never reach these tables: `read/collect.py` keeps them
  out of the records' frame, and `dynamics.py` alone reads them.

Only complete jobs enter the statistics (a failed job's partial records stay in `results.csv`, with its status),
and only finite values: an inf or nan counts as missing (`collect` warns about them).
When two jobs hold the same row for the same seeds (two sweeps of the same design given together, or the reference
rows of M_o and M_r, which every method's job repeats), the first one in folder order is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.report.compute import stats
from unlearnbench.report.compute.notes import Note

CONFIG = ["dataset", "model", "scenario"]
OPTIONAL_CONFIG = ["strategy", "precision", "devices", "tuning", "tuning_replicate"]  # columns of the groups only
# where a sweep varies them (`tuning`: a tuning sweep's held-out jobs, with the tuned point or the defaults;
# `tuning_replicate`: which replicate's tuned point)
ROW = ["target", "role", "method", "metric", "split"]
SEEDS = ["seed_train", "seed_unlearn", "seed_eval"]
COSTS = ["cost_original_s", "cost_retrained_s"]  # the job's training times (`collect.training_times`)
ROLE_ORDER = {"original": 0, "retrained": 1, "unlearned": 2}


NO_W2 = {"one_unlearning_seed", "one_training_seed", "no_w2"}  # the caveats that also say there is no W2


def matching(frame: pd.DataFrame, select: dict) -> pd.DataFrame:
    """The rows of `frame` whose columns hold the values of `select`."""
    if frame.empty:
        return frame
    mask = pd.Series(True, index=frame.index)
    for column, value in select.items():
        mask &= frame[column] == value
    return frame[mask]


@dataclass
class Study:
    """The report's tables; `keys` are the configuration columns that identify a group (dataset, model, scenario and
    any of strategy, precision, devices that the sweep varies); `catalogue` declares the metrics the tables hold
    (labels, ideals, gold standards, headline and figure metrics: `read/catalogue.py`)."""

    keys: list[str]
    values: pd.DataFrame  # one Z per row of the study and seeds (last round only), complete jobs only
    rounds: pd.DataFrame  # the records with a round, every round
    summary: pd.DataFrame
    table: pd.DataFrame
    variance: pd.DataFrame
    wasserstein: pd.DataFrame
    wasserstein_by_seed: pd.DataFrame
    variance_by_seed: pd.DataFrame = field(default_factory=pd.DataFrame)
    variance_eval: pd.DataFrame = field(default_factory=pd.DataFrame)  # where the evaluation seed varies alone
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)  # filled by `seed_design.extend`
    ranks_by_seed: pd.DataFrame = field(default_factory=pd.DataFrame)
    plans: pd.DataFrame = field(default_factory=pd.DataFrame)
    powers: pd.DataFrame = field(default_factory=pd.DataFrame)  # `seed_design.seed_powers`, filled by the build
    warnings: list[Note] = field(default_factory=list)
    forgetting: Any = None  # the per-example tables (`forget_quality.ForgetQuality`), filled by the report's build
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)  # `curves.curve_table`, filled by the report's build
    leaderboard: list = field(default_factory=list)  # `leaderboard.Board` per configuration, filled by the build
    catalogue: Catalogue = field(default_factory=Catalogue)
    # the metrics along the methods' steps (compute/dynamics.py), filled by the report's build; never in the above
    dynamics: pd.DataFrame = field(default_factory=pd.DataFrame)
    dynamics_by_seed: pd.DataFrame = field(default_factory=pd.DataFrame)
    dynamics_best: pd.DataFrame = field(default_factory=pd.DataFrame)
    dynamics_paths: pd.DataFrame = field(default_factory=pd.DataFrame)
    dynamics_best_own: pd.DataFrame = field(default_factory=pd.DataFrame)  # `report.best_step` only: optimistic

    @property
    def groups(self) -> list[str]:
        return [*self.keys, *ROW]

    @property
    def has_seed_spread(self) -> bool:
        """More than one (training, unlearning) seed pair: something for the seed figures to show."""
        return not self.values.empty and len(self.values[["seed_train", "seed_unlearn"]].drop_duplicates()) > 1

    @property
    def wants_figures(self) -> bool:
        """Something to draw: seed spread, per-round records, training curves (a single job's curves still show
        an under-trained or diverged model) or records along the methods' steps."""
        return (self.has_seed_spread or not self.rounds.empty or not self.curves.empty
                or any(board.significance for board in self.leaderboard) or not self.dynamics.empty)


def prepare(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[Note]]:
    """(records of complete jobs with clean types and duplicates removed, configuration keys, caveats)."""
    warnings: list[Note] = []
    if frame.empty or "seed_train" not in frame:
        return pd.DataFrame(columns=[*CONFIG, *ROW, "round", *SEEDS, "value", *COSTS]), list(CONFIG), warnings
    data = frame[frame["status"] == "complete"].copy() if "status" in frame else frame.copy()
    for column in [*CONFIG, *OPTIONAL_CONFIG, *ROW]:
        if column not in data:
            data[column] = ""
        data[column] = data[column].astype(object).fillna("").astype(str).astype(object)
    for column in OPTIONAL_CONFIG:  # a number some jobs lack reads back as a float: 1, not 1.0
        data[column] = data[column].str.replace(r"^(-?\d+)\.0$", r"\1", regex=True)
    values = pd.to_numeric(data["value"], errors="coerce").astype(float)
    data["value"] = values.where(np.isfinite(values))  # inf or nan: missing, never averaged into a mean
    for column in ["round", *SEEDS]:
        data[column] = pd.to_numeric(data[column], errors="coerce") if column in data else np.nan
    data = data.dropna(subset=["seed_train"])
    data["seed_unlearn"] = data["seed_unlearn"].fillna(data["seed_train"])
    data["seed_eval"] = data["seed_eval"].fillna(data["seed_unlearn"])
    for column in SEEDS:
        data[column] = data[column].astype("int64")
    keys = [*CONFIG, *(c for c in OPTIONAL_CONFIG if data[c].nunique() > 1)]
    identity = [*keys, *ROW, "round", *SEEDS]
    duplicated = data.duplicated(subset=identity, keep="first")
    repeated = int((duplicated & (data["role"] == "unlearned")).sum())
    if repeated:  # the same design given twice? the first job in folder order is kept
        warnings.append(Note("repeated", {"values": repeated}))
    data = data[~duplicated]
    for column in COSTS:
        data[column] = pd.to_numeric(data[column], errors="coerce").astype(float) if column in data else np.nan
    columns = [*keys, *ROW, "round", *SEEDS, "value", *COSTS]
    return data[columns].reset_index(drop=True), keys, warnings


def last_rounds(data: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Records without a round, and of records with a round only the last round of their row."""
    rounded = data["round"].notna()
    if not rounded.any():
        return data
    last = data[rounded].groupby([*keys, *ROW], sort=False)["round"].transform("max")
    keep = ~rounded
    keep[rounded] = data.loc[rounded, "round"] == last
    return data[keep]


def sort_rows(frame: pd.DataFrame, keys: list[str], order_from: pd.DataFrame) -> pd.DataFrame:
    """Groups in a stable order: configuration, target, role (original, retrained, unlearned), method, then metric
    and split in the order the jobs wrote them."""
    if frame.empty:
        return frame.reset_index(drop=True)
    ranks = {c: {v: i for i, v in enumerate(pd.unique(order_from[c]))} for c in ("target", "metric", "split")}
    sort = frame.assign(_role=frame["role"].map(ROLE_ORDER).fillna(9),
                        **{f"_{c}": frame[c].map(ranks[c]).fillna(1e9) for c in ranks})
    by = [*keys, "_target", "_role", "method", "_metric", "_split"]
    by += [c for c in ("round", "seed_train") if c in frame]
    return sort.sort_values(by, kind="stable").drop(columns=[f"_{c}" for c in ("role", *ranks)]).reset_index(
        drop=True)


def summarise(data: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """summary.csv: mean, std (ddof 1), n over every seed, per row of the study (and round)."""
    columns = [*keys, *ROW, "round", "mean", "std", "n", "seeds_train", "seeds_unlearn"]
    if data.empty:
        return pd.DataFrame(columns=columns)
    grouped = data.groupby([*keys, *ROW, "round"], sort=False, dropna=False)
    summary = grouped.agg(mean=("value", "mean"), std=("value", "std"), n=("value", "count"),
                          seeds_train=("seed_train", "nunique"), seeds_unlearn=("seed_unlearn", "nunique"),
                          spread=("value", lambda v: v.max() - v.min()))
    summary = exact_zeros(summary.reset_index())
    return sort_rows(summary, keys, data)[columns]


def exact_zeros(table: pd.DataFrame) -> pd.DataFrame:
    """A std of exactly 0 where a group's values are all equal (`spread` 0): pandas' two-pass variance can leave a
    last-bit residue (2e-18) that reads as a seed effect."""
    table.loc[(table["spread"] == 0) & table["std"].notna(), "std"] = 0.0
    return table.drop(columns="spread")


def main_table(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """table.csv: mean ± std across training seeds. The values of one training seed are first averaged over its
    unlearning seeds; then mean and std (ddof 1) over the training seeds; I = training seeds, n = values."""
    columns = [*keys, *ROW, "mean", "std", "I", "n"]
    if values.empty:
        return pd.DataFrame(columns=columns)
    per_seed = values.groupby([*keys, *ROW, "seed_train"], sort=False).agg(value=("value", "mean"),
                                                                           n=("value", "count")).reset_index()
    table = per_seed.groupby([*keys, *ROW], sort=False).agg(
        mean=("value", "mean"), std=("value", "std"), I=("value", "count"), n=("n", "sum"),
        spread=("value", lambda v: v.max() - v.min())).reset_index()
    return sort_rows(exact_zeros(table), keys, values)[columns]


Grid = list[tuple[tuple, list[tuple[int, np.ndarray]]]]


def seed_grid(values: pd.DataFrame, keys: list[str]) -> Grid:
    """Per row of the study: (its identity, [(training seed i, its values Z_ij ordered by unlearning seed then
    evaluation seed) for each i in increasing order]). One sort, then numpy slices (fast on large sweeps)."""
    if values.empty:
        return []
    columns = [*keys, *ROW]
    ordered = values.sort_values([*columns, *SEEDS], kind="stable")
    codes = ordered.groupby(columns, sort=False).ngroup().to_numpy()
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    identities = ordered[columns].to_numpy(dtype=object)
    seeds = ordered["seed_train"].to_numpy()
    numbers = ordered["value"].to_numpy(dtype=float)
    grid = []
    for start, end in zip(starts, ends, strict=True):
        group_seeds, group_values = seeds[start:end], numbers[start:end]
        cuts = np.flatnonzero(group_seeds[1:] != group_seeds[:-1]) + 1
        firsts = np.r_[0, cuts]
        grid.append((tuple(identities[start]), [(int(group_seeds[f]), part) for f, part in
                                               zip(firsts, np.split(group_values, cuts), strict=True)]))
    return grid


VARIANCE_COLUMNS = ["I", "J", "J_min", "J_max", "K", "n", "mean", "total", "sigma_t2", "sigma_t2_low", "sigma_t2_high",
                    "sigma_t2_truncated", "sigma_u2", "sigma_u2_low", "sigma_u2_high", "sigma_u2_chi2_low",
                    "sigma_u2_chi2_high", "sigma_e2", "sigma_e2_low", "sigma_e2_high", "seeds_with_spread",
                    "var_by_seed_min", "var_by_seed_max", "deterministic_seeds", "homogeneity_w", "homogeneity_p",
                    "icc", "msb", "msw", "balanced", "warnings"]


def variance_table(grid: Grid, keys: list[str], order_from: pd.DataFrame) -> pd.DataFrame:
    """seed_variance.csv: the nested decomposition of every row of the study (see `stats.nested_variance`); `K` = 1
    and no σ_E² (it is inside σ_U²) until `with_evaluation_split` separates it."""
    rows = []
    for ident, seeds in grid:
        components = stats.nested_variance([v for _, v in seeds]).as_dict()
        rows.append({**dict(zip([*keys, *ROW], ident, strict=True)), **components, "K": 1, "sigma_e2": math.nan,
                     "sigma_e2_low": math.nan, "sigma_e2_high": math.nan})
    if not rows:
        return pd.DataFrame(columns=[*keys, *ROW, *VARIANCE_COLUMNS])
    return sort_rows(pd.DataFrame(rows), keys, order_from)[[*keys, *ROW, *VARIANCE_COLUMNS]]


def cell_means(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One value per (training seed, unlearning seed) of each row: the mean over its evaluation seeds (the values
    themselves where no pair has two). The two-stage split runs on these, so that a sweep over evaluation seeds
    does not count them as unlearning seeds (which biases σ̂_T² up by σ_U²(K − 1)/(JK − 1) and puts σ_E² into σ̂_U²)."""
    cell = [*keys, *ROW, "seed_train", "seed_unlearn"]
    if values.empty or not values.duplicated(cell).any():
        return values
    return values.groupby(cell, sort=False).agg(value=("value", "mean"), seed_eval=("seed_eval", "min")).reset_index()


THREE_STAGE = ["sigma_t2", "sigma_t2_low", "sigma_t2_high", "sigma_t2_truncated", "sigma_u2", "sigma_u2_low",
               "sigma_u2_high", "sigma_e2", "sigma_e2_low", "sigma_e2_high", "K"]


def with_evaluation_split(variance: pd.DataFrame, split: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """seed_variance.csv's rows whose evaluation seed varies within (training, unlearning) pairs take σ_T², σ_U² and
    σ_E² with their intervals from the three-stage split (`seed_variance_eval.csv`): unbiased, where the cell means'
    MSW estimates σ_U² + σ_E²/K. Their χ² interval for σ_U² (of that MSW) is withdrawn; total and ICC follow."""
    if split.empty or variance.empty:
        return variance
    ident = [*keys, *ROW]
    merged = variance.merge(split[[*ident, *THREE_STAGE]], on=ident, how="left", suffixes=("", "_three"))
    three = merged["K_three"].notna()
    for column in THREE_STAGE:
        merged.loc[three, column] = merged.loc[three, f"{column}_three"]
    merged.loc[three, ["sigma_u2_chi2_low", "sigma_u2_chi2_high"]] = math.nan
    parts = merged.loc[three, ["sigma_t2", "sigma_u2", "sigma_e2"]]
    merged.loc[three, "total"] = parts.sum(axis=1)
    merged.loc[three, "icc"] = (parts["sigma_t2"] / merged.loc[three, "total"]).where(merged.loc[three, "total"] > 0)
    return merged[variance.columns]


EVALUATION_COLUMNS = ["I", "J", "K", "n", "mean", "total", "sigma_t2", "sigma_t2_low", "sigma_t2_high",
                      "sigma_t2_truncated", "sigma_u2", "sigma_u2_low", "sigma_u2_high", "sigma_u2_truncated",
                      "sigma_e2", "sigma_e2_low", "sigma_e2_high", "train_share", "unlearn_share", "eval_share",
                      "balanced", "estimator"]


def evaluation_variance_table(values: pd.DataFrame, keys: list[str], order_from: pd.DataFrame) -> pd.DataFrame:
    """seed_variance_eval.csv: where a sweep varies the evaluation seed within (training seed, unlearning seed)
    pairs, each row's variance split into training, unlearning and evaluation parts (`stats.evaluation_split`)."""
    columns = [*keys, *ROW, *EVALUATION_COLUMNS]
    if values.empty or not values.duplicated([*keys, *ROW, "seed_train", "seed_unlearn"]).any():
        return pd.DataFrame(columns=columns)  # no pair holds two evaluation seeds: no row to split (the usual sweep)
    rows = []
    for ident, part in values.groupby([*keys, *ROW], sort=False, dropna=False):
        if part.groupby(["seed_train", "seed_unlearn"])["seed_eval"].nunique().max() < 2:
            continue
        cells = [[cell["value"].to_numpy(dtype=float) for _, cell in seed.groupby("seed_unlearn")]
                 for _, seed in part.groupby("seed_train")]
        split = stats.evaluation_split(cells)
        if split is not None:
            rows.append({**dict(zip([*keys, *ROW], ident, strict=True)), **split.as_dict()})
    return sort_rows(pd.DataFrame(rows), keys, order_from)[columns] if rows else pd.DataFrame(columns=columns)


def variance_by_seed_table(grid: Grid, keys: list[str], order_from: pd.DataFrame) -> pd.DataFrame:
    """seed_variance_by_seed.csv: var(Z | S = s_i) (ddof 1; 0.0 exactly when its unlearning seeds agree) and n_i for
    every training seed i with at least two unlearning seeds: how much the unlearning seed matters depends on the
    trained model, and this is that dependence."""
    rows = [{**dict(zip([*keys, *ROW], ident, strict=True)), "seed_train": seed, "n": len(v),
             "mean": float(np.mean(v)), "var": float(stats.seed_variances([v])[0])}
            for ident, seeds in grid for seed, v in seeds if len(v) >= 2]
    columns = [*keys, *ROW, "seed_train", "n", "mean", "var"]
    return sort_rows(pd.DataFrame(rows), keys, order_from)[columns] if rows else pd.DataFrame(columns=columns)


def wasserstein_tables(grid: Grid, keys: list[str], order_from: pd.DataFrame,
                       permutations: int = stats.NULL_PERMUTATIONS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(wasserstein.csv, wasserstein_by_seed.csv).

    By seed, for each training seed i with at least two unlearning seeds: W2(A(i), B₋ᵢ) and the 95th percentile of
    its permutation null (pool A(i) and B₋ᵢ, split at random `permutations` times), where B₋ᵢ is B without seed i's
    value: A(i) and B then share no job, and the null has its nominal size (with the shared Z_i1 it rejects too
    rarely). Per row of the study: I (training seeds, = |B|), J (median |A(i)|), the spread of W2(A(i), B₋ᵢ) over i
    (mean, std, min, median, max), the mean null percentile and the share of training seeds whose W2 exceeds its
    null. Rows with fewer than three training seeds (B₋ᵢ needs two) or no training seed with two unlearning seeds
    have no W2.
    """
    by_seed, summary = [], []
    for ident_values, seeds in grid:
        design_b = np.array([v[0] for _, v in seeds])
        singles = [(k, seed, v) for k, (seed, v) in enumerate(seeds) if len(v) >= 2]
        if len(design_b) < 3 or not singles:
            continue
        ident = dict(zip([*keys, *ROW], ident_values, strict=True))
        others = [np.delete(design_b, k) for k, _, _ in singles]
        distances = [stats.w2(v, b) for (_, _, v), b in zip(singles, others, strict=True)]
        nulls = stats.w2_null_pairs([(v, b) for (_, _, v), b in zip(singles, others, strict=True)], permutations)
        for (_, seed, v), distance, null in zip(singles, distances, nulls, strict=True):
            by_seed.append({**ident, "seed_train": seed, "n_A": len(v), "n_B": len(design_b) - 1, "w2": distance,
                            "null_95": null, "above_null": bool(distance > null)})
        distances_array = np.array(distances)
        summary.append({**ident, "I": len(design_b), "J": float(np.median([len(v) for _, _, v in singles])),
                        "designs_A": len(singles), "w2_mean": float(distances_array.mean()),
                        "w2_std": float(distances_array.std(ddof=1)) if len(singles) > 1 else math.nan,
                        "w2_min": float(distances_array.min()), "w2_median": float(np.median(distances_array)),
                        "w2_max": float(distances_array.max()), "null_95_mean": float(np.mean(nulls)),
                        "share_above_null": float(np.mean(distances_array > np.array(nulls)))})
    seed_columns = [*keys, *ROW, "seed_train", "n_A", "n_B", "w2", "null_95", "above_null"]
    columns = [*keys, *ROW, "I", "J", "designs_A", "w2_mean", "w2_std", "w2_min", "w2_median", "w2_max",
               "null_95_mean", "share_above_null"]
    wide = sort_rows(pd.DataFrame(summary), keys, order_from)[columns] if summary else pd.DataFrame(
        columns=columns)
    long = sort_rows(pd.DataFrame(by_seed), keys, order_from)[seed_columns] if by_seed else pd.DataFrame(
        columns=seed_columns)
    return wide, long


def design_warnings(variance: pd.DataFrame, wasserstein: pd.DataFrame, values: pd.DataFrame) -> list[Note]:
    """The study-wide caveats, each once: few training seeds, unbalanced grids, no W2 (and why)."""
    warnings = []
    unlearned = variance[variance["role"] == "unlearned"] if not variance.empty else variance
    if not unlearned.empty:
        few = unlearned[unlearned["I"] < stats.FEW_TRAINING_SEEDS]
        if len(few):
            warnings.append(Note("few_training_seeds", {"below": stats.FEW_TRAINING_SEEDS,
                                                        "seeds": sorted(set(few["I"].astype(int)))}))
        unbalanced = unlearned[~unlearned["balanced"].astype(bool)]
        if len(unbalanced):
            warnings.append(Note("unbalanced", {"rows": len(unbalanced),
                                                "methods": sorted(set(unbalanced["method"]))}))
        if (unlearned["J_max"] <= 1).all():
            warnings.append(Note("one_unlearning_seed"))
        elif (unlearned["I"] <= 1).all():
            warnings.append(Note("one_training_seed"))
    if not values.empty and wasserstein.empty and not any(w.code in NO_W2 for w in warnings):
        warnings.append(Note("no_w2"))
    return warnings


def analyse(frame: pd.DataFrame, catalogue: Catalogue, permutations: int = stats.NULL_PERMUTATIONS) -> Study:
    data, keys, warnings = prepare(frame)
    values = last_rounds(data, keys).dropna(subset=["value"])
    rounds = data[data["round"].notna()]
    grid = seed_grid(values, keys)
    cells = cell_means(values, keys)
    variance_eval = evaluation_variance_table(values, keys, values)
    variance = with_evaluation_split(variance_table(grid if cells is values else seed_grid(cells, keys), keys, values),
                                     variance_eval, keys)
    wasserstein, by_seed = wasserstein_tables(grid, keys, values, permutations)
    warnings += design_warnings(variance, wasserstein, values)
    return Study(keys=keys, values=values, rounds=rounds, summary=summarise(data, keys),
                 table=main_table(values, keys), variance=variance, wasserstein=wasserstein,
                 wasserstein_by_seed=by_seed, variance_by_seed=variance_by_seed_table(grid, keys, values),
                 variance_eval=variance_eval, warnings=warnings, catalogue=catalogue)
