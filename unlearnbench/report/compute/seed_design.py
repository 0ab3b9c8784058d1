"""Three questions a seed sweep answers and a single-seed study cannot: how often one training seed ranks the methods
differently from many, how many training and unlearning seeds a study needs, and how many it needs to tell two
methods apart.

- `rank_stability`: for each training seed i, the methods ranked by the single-training-seed design A(i) (its
  unlearning seeds averaged) against the multi-training-seed design built from the *other* training seeds (the mean
  of their per-seed means; leaving i out keeps the two designs independent). Per metric: whether the best method
  changes, Kendall's τ-b between the two rankings, and over the training seeds the probability that the best method
  changes, with its Wilson 95% interval (the seeds as independent draws of a training run). The metrics are the
  declared leaderboard metrics whose ideal is a number (`ranked_metrics`); the gold standards are not ranked.
- `seed_plans`: per method and main metric, the cheapest (I, J, K) that reaches a standard error of the mean
  (`stats.seed_plan`), from the variance components and the sweep's own costs: c_T = the median time to train M_o,
  c_U = the median time to train M_r plus the method's own time, per job; c_E = the method's own time (what one
  more evaluation seed of a cached M_r costs). Planned twice: at the point estimates, and at the upper limits of
  their 95% intervals (one-sided 97.5% upper confidence limits), the conservative plan and the headline: a pilot of
  few seeds estimates the variance components poorly, and a σ̂_T² of 0 is often a negative estimate truncated.
- `seed_powers`: per pair of methods the leaderboard places next to each other (and every pair of
  `report.compare`), per target and leaderboard metric, the paired difference of their distances to the ideal in
  the same jobs, its test over training seeds, and the cheapest (I, J) with power 0.8 to detect a difference
  (`power.paired_test`, `power.power_plan`).
"""

from __future__ import annotations

import math
from itertools import combinations, pairwise

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from unlearnbench.core.catalogue import RETRAINED, Catalogue
from unlearnbench.report.compute import power, stats
from unlearnbench.report.compute.analysis import Study, sort_rows
from unlearnbench.runtime.errors import UserError

SIGNIFICANT = 12  # scores equal to this many significant digits are ties (a mean's last bits are not a ranking)
TARGET_SE = 0.01  # the default target standard error of a method's mean (`report.target_se`)

RANK_SEED_COLUMNS = ["target", "metric", "split", "seed_train", "best_single", "best_multi", "best_changed",
                     "kendall_tau"]
RANK_COLUMNS = ["target", "metric", "split", "I", "methods", "best_all", "p_best_changes", "p_low", "p_high",
                "tau_mean", "tau_min", "tau_max"]
PLAN_LEVEL = 0.975  # the one-sided level of the upper limits the conservative plan takes (the 95% intervals' ends)
PLANS = {"point": "", "upper": "_high"}  # a plan's column prefix → the suffix of the components it plans at
PLAN_PARTS = ["I", "J", "K", "se", "cost_s", "note"]
PLAN_INPUTS = ["target", "method", "metric", "split", "sigma_t2", "sigma_t2_high", "sigma_t2_truncated", "sigma_u2",
               "sigma_u2_high", "sigma_e2", "sigma_e2_high", "cost_train_s", "cost_unlearn_s", "cost_eval_s"]
PLAN_COLUMNS = [*PLAN_INPUTS, "j_star", *(f"{plan}_{part}" for plan in PLANS for part in PLAN_PARTS), "target_se",
                "upper_level"]
POWER = 0.8  # the power a planned comparison reaches
ALPHA = 0.05  # the level of its test
POWER_COLUMNS = ["target", "metric", "split", "method_a", "method_b", "pair", "I", "J", "mean_difference", "low",
                 "high", "p", "separated", "sigma_t2", "sigma_u2", "min_difference", "difference_from",
                 "cost_train_s", "cost_unlearn_s", "power_now", "plan_I", "plan_J", "plan_power", "plan_cost_s",
                 "note"]


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
            if rows["method"].nunique() < 2 or rows["seed_train"].nunique() < 2:
                continue  # fewer than two methods or training seeds: no row, as below (without the pivot's cost)
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
    """Per configuration, target and method: c_T (median seconds to train M_o over the training seeds), c_U (median
    over jobs of the seconds to train M_r plus the method's `time_s`) and c_E (median of the method's `time_s`)."""
    columns = [*keys, "target", "method", "cost_train_s", "cost_unlearn_s", "cost_eval_s"]
    timed = values[(values["role"] == "unlearned") & (values["metric"] == "time_s")]
    if timed.empty:
        return pd.DataFrame(columns=columns)
    per_job = timed.assign(unlearn=timed["value"] + timed["cost_retrained_s"])
    train = per_job.drop_duplicates([*keys, "target", "method", "seed_train"])
    grouped = [*keys, "target", "method"]
    result = train.groupby(grouped, sort=False)["cost_original_s"].median().rename("cost_train_s").to_frame()
    result["cost_unlearn_s"] = per_job.groupby(grouped, sort=False)["unlearn"].median()
    result["cost_eval_s"] = per_job.groupby(grouped, sort=False)["value"].median()
    return result.reset_index()[columns]


def plan_at(row: dict, suffix: str, target_se: float) -> stats.SeedPlan:
    """The seed plan at the components of `row` whose names end in `suffix` ("" the estimates, "_high" the upper
    limits); σ_E² counts only where the sweep separated it (else it is inside σ_U²)."""
    sigma_e2 = row.get(f"sigma_e2{suffix}", math.nan)
    return stats.seed_plan(row[f"sigma_t2{suffix}"], row[f"sigma_u2{suffix}"], row["cost_train_s"],
                           row["cost_unlearn_s"], target_se, 0.0 if pd.isna(sigma_e2) else float(sigma_e2),
                           row["cost_eval_s"])


def seed_plans(variance: pd.DataFrame, values: pd.DataFrame, keys: list[str], main: list[tuple[str, str]],
               target_se: float = TARGET_SE) -> pd.DataFrame:
    """seed_plan.csv: per configuration, target, method and main metric, the cheapest (I, J, K) for `target_se`, at
    the components' estimates (`point_*`) and at their upper limits (`upper_*`, the headline)."""
    unlearned = variance[(variance["role"] == "unlearned")
                         & pd.MultiIndex.from_frame(variance[["metric", "split"]]).isin(main)] \
        if not variance.empty else variance
    if unlearned.empty:
        return pd.DataFrame(columns=[*keys, *PLAN_COLUMNS])
    priced = unlearned.merge(costs(values, keys), on=[*keys, "target", "method"], how="left")
    for column in ("sigma_e2", "sigma_e2_high"):
        if column not in priced:
            priced[column] = math.nan
    rows = []
    for row in priced.to_dict("records"):
        row.update({c: float(row.get(c, math.nan)) for c in ("cost_train_s", "cost_unlearn_s", "cost_eval_s")})
        plans = {prefix: plan_at(row, suffix, target_se) for prefix, suffix in PLANS.items()}
        rows.append({**{c: row[c] for c in [*keys, "role", *PLAN_INPUTS]}, "j_star": plans["point"].j_star,
                     **{f"{prefix}_{part}": getattr(plan, part) for prefix, plan in plans.items()
                        for part in PLAN_PARTS},
                     "target_se": target_se, "upper_level": PLAN_LEVEL})
    return sort_rows(pd.DataFrame(rows), keys, values)[[*keys, *PLAN_COLUMNS]]


def job_distances(values: pd.DataFrame, keys: list[str], metric: str, split: str, ideal: float | str) -> pd.DataFrame:
    """(configuration, target, training seed, unlearning seed) × methods: each unlearned model's distance to the
    metric's ideal in its own job (|v − ideal|, or |v − M_r's v| of the same job), averaged over the job's evaluation
    seeds. (The leaderboard takes the distance of a block's mean instead; with one unlearning seed per training seed
    the two agree.)"""
    rows = values[(values["metric"] == metric) & (values["split"] == split)]
    job = [*keys, "target", "seed_train", "seed_unlearn", "seed_eval"]
    unlearned = rows[rows["role"] == "unlearned"]
    unlearned = (unlearned.groupby([*job, "method"], sort=True)["value"].first().unstack("method")  # = pivot_table's
                 if not unlearned.empty else  # (first value, sorted rows and columns), at a third of its time
                 unlearned.pivot_table(index=job, columns="method", values="value", aggfunc="first"))
    if ideal == RETRAINED:
        reference = rows[rows["role"] == "retrained"].groupby(job)["value"].first()
        distances = unlearned.sub(reference.reindex(unlearned.index), axis=0).abs()
    else:
        distances = (unlearned - float(ideal)).abs()
    return distances.groupby(level=job[:-1], sort=True).mean()


def compared_pairs(board, compare: list[str] | None) -> list[tuple[str, str, str]]:
    """(method a, method b, why) of a leaderboard: the methods it places next to each other on its main ranking, and
    every pair of the `report.compare` methods it ranks."""
    from unlearnbench.report.compute.leaderboard import main_metric

    metric, split = main_metric(board)
    order = [row["method"] for row in sorted((r for r in board.rows if (r["metric"], r["split"]) == (metric, split)),
                                            key=lambda r: (r["mean_rank"], r["method"]))]
    pairs = {(a, b): "neighbours" for a, b in pairwise(order)}
    named = [m for m in order if m in (compare or ())]
    for a, b in combinations(named, 2):
        pairs.setdefault((a, b), "compare")
    return [(a, b, why) for (a, b), why in pairs.items()]


def run_costs(values: pd.DataFrame) -> tuple[pd.Series, float, float]:
    """(each method's median time, the median time to train M_o, that to train M_r) of a target's values: what
    `pair_costs` adds up for every pair (computed once per target)."""
    timed = values[(values["role"] == "unlearned") & (values["metric"] == "time_s")]
    method = timed.groupby("method")["value"].median()
    train = timed.drop_duplicates("seed_train")["cost_original_s"].median()
    retrain = timed.drop_duplicates(["seed_train", "seed_unlearn"])["cost_retrained_s"].median()
    return method, train, retrain


def pair_costs(costs: tuple[pd.Series, float, float], a: str, b: str) -> tuple[float, float]:
    """(c_T, c_U) of a comparison: the median time to train M_o, and that of M_r plus both methods' median times
    (`costs`: `run_costs` of the pair's target)."""
    method, train, retrain = costs
    return float(train), float(retrain + method.get(a, math.nan) + method.get(b, math.nan))


def pair_row(differences: pd.Series, costs_ab: tuple[float, float], min_difference: float | None) -> dict:
    """One row of seed_power.csv from a pair's differences D_ij (indexed by training and unlearning seed)."""
    groups = [group.to_numpy(dtype=float) for _, group in differences.groupby(level="seed_train")]
    test = power.paired_test(groups, ALPHA)
    delta = min_difference if min_difference is not None else abs(test.mean)
    sigma_t2, sigma_u2 = test.sigma_t2, test.sigma_u2
    plan = power.power_plan(delta, sigma_t2, sigma_u2, *costs_ab, POWER, ALPHA)
    now = power.power(delta, sigma_t2, sigma_u2, test.I, test.J, ALPHA) if test.I >= 2 else math.nan
    return {"I": test.I, "J": test.J, "mean_difference": test.mean, "low": test.low, "high": test.high, "p": test.p,
            "separated": bool(test.p < ALPHA), "sigma_t2": sigma_t2, "sigma_u2": sigma_u2, "min_difference": delta,
            "difference_from": "observed" if min_difference is None else "report.min_difference",
            "cost_train_s": costs_ab[0], "cost_unlearn_s": costs_ab[1], "power_now": float(now),
            "plan_I": plan.I, "plan_J": plan.J, "plan_power": plan.power, "plan_cost_s": plan.cost_s,
            "note": (*test.note, *plan.note)}


def seed_powers(study: Study, compare: list[str] | None = None, min_difference: float | None = None) -> pd.DataFrame:
    """seed_power.csv: per leaderboard, target, leaderboard metric and compared pair (`compared_pairs`): the mean
    paired difference of the two methods' distances to the ideal (d_a − d_b: below 0, a is closer), its 95%
    t-interval and p over training seeds, the difference's variance components, the power of this sweep's design
    and the cheapest design with power 0.8 at α = 0.05 to detect `min_difference` (default: the observed
    difference)."""
    from unlearnbench.report.compute.leaderboard import AGGREGATE

    keys, rows = study.keys, []
    for board in study.leaderboard:
        mine = study.values
        for column, value in board.config.items():
            mine = mine[mine[column] == value]
        pairs = compared_pairs(board, compare)
        costs: dict = {}  # target -> run_costs
        metrics = list(dict.fromkeys((r["metric"], r["split"]) for r in board.rows if r["metric"] != AGGREGATE))
        for metric, split in metrics:
            distances = job_distances(mine, keys, metric, split, study.catalogue.ideal(metric))
            for target, part in distances.groupby(level="target", sort=False):
                for a, b, why in pairs:
                    if a not in part or b not in part:
                        continue
                    differences = (part[a] - part[b]).dropna().droplevel([*keys, "target"])
                    if differences.empty:
                        continue
                    if target not in costs:
                        costs[target] = run_costs(mine[mine["target"] == target])
                    rows.append({**board.config, "target": target, "metric": metric, "split": split, "method_a": a,
                                 "method_b": b, "pair": why,
                                 **pair_row(differences, pair_costs(costs[target], a, b),
                                            min_difference)})
    return pd.DataFrame(rows, columns=[*keys, *POWER_COLUMNS])


def check_compare(compare: list[str] | None, values: pd.DataFrame, gold_standards: frozenset[str]) -> None:
    """`report.compare` names two methods or more that the results rank: a `UserError` in one line otherwise."""
    if compare is None:
        return
    ranked = sorted(set(values.loc[values["role"] == "unlearned", "method"]) - gold_standards)
    unknown = [m for m in compare if m not in ranked]
    if len(set(compare)) < 2 or (unknown and ranked):
        raise UserError(f"the 'report.compare' option must name two or more of the ranked methods "
                        f"({', '.join(ranked) or 'none'}); got {', '.join(map(str, compare)) or 'none'} instead")


def extend(study: Study, target_se: float = TARGET_SE) -> Study:
    """The study with its rank-stability tables and seed plans (of the headline metrics) filled in (the seed power,
    which needs the leaderboard, is `seed_powers`)."""
    catalogue = study.catalogue
    study.ranks, study.ranks_by_seed = rank_stability(study.values, study.keys, ranked_metrics(catalogue),
                                                      catalogue.gold_standards)
    headline = [(metric, split) for _, metric, split in catalogue.headline()]
    study.plans = seed_plans(study.variance, study.values, study.keys, headline, target_se)
    return study
