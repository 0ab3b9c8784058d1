"""Two questions a seed sweep answers and a single-seed study cannot: how often one training seed ranks the methods
differently from many, and how many training and unlearning seeds a study needs.

- `rank_stability`: for each training seed i, the methods ranked by the single-training-seed design A(i) (its
  unlearning seeds averaged) against the multi-training-seed design built from the *other* training seeds (the mean
  of their per-seed means; leaving i out keeps the two designs independent). Per metric: whether the best method
  changes, Kendall's τ-b between the two rankings, and over the training seeds the probability that the best method
  changes, with its Wilson 95% interval (the seeds as independent draws of a training run). The metrics are the
  declared leaderboard metrics whose ideal is a number (`ranked_metrics`); the gold standards are not ranked.
- `seed_plans`: per method and main metric, the cheapest (I, J) that reaches a standard error of the mean
  (`stats.seed_plan`), from the variance components and the sweep's own costs: c_T = the median time to train M_o,
  c_U = the median time to train M_r plus the method's own time, per job.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.report.compute import stats
from unlearnbench.report.compute.analysis import ROW, Study, sort_rows

SIGNIFICANT = 12  # scores equal to this many significant digits are ties (a mean's last bits are not a ranking)
TARGET_SE = 0.01  # the default target standard error of a method's mean (`report.target_se`)

RANK_SEED_COLUMNS = ["target", "metric", "split", "seed_train", "best_single", "best_multi", "best_changed",
                     "kendall_tau"]
RANK_COLUMNS = ["target", "metric", "split", "I", "methods", "best_all", "p_best_changes", "p_low", "p_high",
                "tau_mean", "tau_min", "tau_max"]
PLAN_COLUMNS = ["target", "method", "metric", "split", "sigma_t2", "sigma_u2", "cost_train_s", "cost_unlearn_s",
                "j_star", "plan_I", "plan_J", "plan_se", "plan_cost_s", "target_se", "note"]


def ranked_metrics(catalogue: Catalogue) -> list[tuple[str, str, float]]:
    """(metric, split, ideal) of the declared leaderboard metrics whose ideal is a number: methods are ranked by
    |Z − ideal|, smallest first (a metric judged against M_r has no fixed ideal to rank one seed's values by)."""
    return [(metric, split, float(catalogue.ideal(metric))) for metric, split in catalogue.roles("leaderboard")
            if isinstance(catalogue.ideal(metric), int | float)]


def rank_label(metric: str, split: str, catalogue: Catalogue) -> str:
    """|label| for an ideal of 0, |ideal − label| for another number: what the methods are ranked by."""
    ideal, name = catalogue.ideal(metric), catalogue.label(metric, split)
    return f"|{ideal:g} − {name}|" if isinstance(ideal, int | float) and ideal != 0 else f"|{name}|"


def rounded(scores: pd.Series | pd.DataFrame) -> pd.Series | pd.DataFrame:
    return scores.map(lambda x: float(f"{x:.{SIGNIFICANT}g}"))


def best(scores: pd.Series) -> list[str]:
    """The methods with the smallest score (several when tied)."""
    kept = rounded(scores)
    return sorted(kept.index[kept == kept.min()])


def kendall_tau(first: pd.Series, second: pd.Series) -> float:
    """Kendall's τ-b of two score vectors over the same methods (ties allowed); 1.0 when both are equal and constant
    (nothing to disagree on), NaN when only one is constant."""
    a, b = rounded(first), rounded(second.loc[first.index])
    if a.nunique() == 1 or b.nunique() == 1:
        return 1.0 if a.nunique() == b.nunique() == 1 else math.nan
    return round(float(scipy_stats.kendalltau(a.to_numpy(), b.to_numpy()).statistic), SIGNIFICANT)


def wilson(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (Wilson, JASA 22, 1927)."""
    if not trials:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == trials else
                                                                  min(1.0, centre + half))


def per_seed_scores(rows: pd.DataFrame, ideal: float = 0.0) -> pd.DataFrame:
    """methods × training seeds: the mean |Z − ideal| over each training seed's unlearning seeds; only the training
    seeds that every method has."""
    scores = rows.assign(value=(rows["value"] - ideal).abs()).groupby(["seed_train", "method"])["value"].mean()
    return scores.unstack("method").dropna(axis=0, how="any").T


def rank_stability(values: pd.DataFrame, keys: list[str], metrics: list[tuple[str, str, float]],
                   gold_standards: frozenset[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rank_stability.csv, rank_stability_by_seed.csv) over `metrics` ((metric, split, ideal)): see the module's
    docstring. A row needs two methods (other than the gold standards, M_r itself) and two training seeds that
    every method has."""
    group_keys = [*keys, "target"]
    summary, by_seed = [], []
    unlearned = values[(values["role"] == "unlearned") & ~values["method"].isin(gold_standards)]
    for metric, split, ideal in metrics:
        chosen = unlearned[(unlearned["metric"] == metric) & (unlearned["split"] == split)]
        for ident, rows in chosen.groupby(group_keys, sort=False):
            scores = per_seed_scores(rows, ideal)
            if scores.shape[0] < 2 or scores.shape[1] < 2:
                continue
            ident = dict(zip(group_keys, ident, strict=True))
            seeds = []
            for seed in scores.columns:
                single, multi = scores[seed], scores.drop(columns=seed).mean(axis=1)
                changed = not set(best(single)) & set(best(multi))
                seeds.append({**ident, "metric": metric, "split": split, "seed_train": int(seed),
                              "best_single": ", ".join(best(single)), "best_multi": ", ".join(best(multi)),
                              "best_changed": changed, "kendall_tau": kendall_tau(single, multi)})
            by_seed += seeds
            changes, taus = sum(s["best_changed"] for s in seeds), np.array([s["kendall_tau"] for s in seeds])
            low, high = wilson(changes, len(seeds))
            finite = taus[np.isfinite(taus)]
            summary.append({**ident, "metric": metric, "split": split, "I": len(seeds), "methods": len(scores),
                            "best_all": ", ".join(best(scores.mean(axis=1))), "p_best_changes": changes / len(seeds),
                            "p_low": low, "p_high": high,
                            "tau_mean": float(finite.mean()) if len(finite) else math.nan,
                            "tau_min": float(finite.min()) if len(finite) else math.nan,
                            "tau_max": float(finite.max()) if len(finite) else math.nan})
    return (pd.DataFrame(summary, columns=[*keys, *RANK_COLUMNS]),
            pd.DataFrame(by_seed, columns=[*keys, *RANK_SEED_COLUMNS]))


def costs(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per configuration, target and method: c_T (median seconds to train M_o over the training seeds) and c_U
    (median over jobs of the seconds to train M_r plus the method's `time_s`)."""
    columns = [*keys, "target", "method", "cost_train_s", "cost_unlearn_s"]
    timed = values[(values["role"] == "unlearned") & (values["metric"] == "time_s")]
    if timed.empty:
        return pd.DataFrame(columns=columns)
    per_job = timed.assign(unlearn=timed["value"] + timed["cost_retrained_s"])
    train = per_job.drop_duplicates([*keys, "target", "method", "seed_train"])
    grouped = [*keys, "target", "method"]
    result = train.groupby(grouped, sort=False)["cost_original_s"].median().rename("cost_train_s").to_frame()
    result["cost_unlearn_s"] = per_job.groupby(grouped, sort=False)["unlearn"].median()
    return result.reset_index()[columns]


def seed_plans(variance: pd.DataFrame, values: pd.DataFrame, keys: list[str], main: list[tuple[str, str]],
               target_se: float = TARGET_SE) -> pd.DataFrame:
    """seed_plan.csv: per configuration, target, method and main metric, the cheapest (I, J) for `target_se`."""
    if variance.empty:
        return pd.DataFrame(columns=[*keys, *PLAN_COLUMNS])
    rows = []
    unlearned = variance[(variance["role"] == "unlearned")
                         & pd.MultiIndex.from_frame(variance[["metric", "split"]]).isin(main)]
    if unlearned.empty:
        return pd.DataFrame(columns=[*keys, *PLAN_COLUMNS])
    priced = unlearned.merge(costs(values, keys), on=[*keys, "target", "method"], how="left")
    for row in priced.to_dict("records"):
        cost_train, cost_unlearn = (float(row.get(c, math.nan)) for c in ("cost_train_s", "cost_unlearn_s"))
        plan = stats.seed_plan(row["sigma_t2"], row["sigma_u2"], cost_train, cost_unlearn, target_se)
        rows.append({**{k: row[k] for k in [*keys, *ROW]}, "sigma_t2": row["sigma_t2"], "sigma_u2": row["sigma_u2"],
                     "cost_train_s": cost_train, "cost_unlearn_s": cost_unlearn, "j_star": plan.j_star,
                     "plan_I": plan.I, "plan_J": plan.J, "plan_se": plan.se, "plan_cost_s": plan.cost_s,
                     "target_se": target_se, "note": plan.note})
    return sort_rows(pd.DataFrame(rows), keys, values)[[*keys, *PLAN_COLUMNS]]


def extend(study: Study, target_se: float = TARGET_SE) -> Study:
    """The study with its rank-stability tables and seed plans (of the headline metrics) filled in."""
    catalogue = study.catalogue
    study.ranks, study.ranks_by_seed = rank_stability(study.values, study.keys, ranked_metrics(catalogue),
                                                      catalogue.gold_standards)
    headline = [(metric, split) for _, metric, split in catalogue.headline()]
    study.plans = seed_plans(study.variance, study.values, study.keys, headline, target_se)
    return study
