"""The leaderboard: which method is best per (dataset, model, scenario), and how sure the sweep can be of it.

- **Scores.** Per metric, a method's distance to the ideal its catalogue declares (`core/catalogue.py`, the
  report's bold): |mean − ideal| for a number (deltas, distances and privleak 0, completeness and forget quality 1),
  |mean − M_r's mean| for a metric judged against the retrained model. Smaller is better; the gold standards (M_r
  itself: `retrain`, `fed_retrain`, …) are not ranked.
- **Blocks.** A block is one (target, training seed). A method's value in a block is its mean over the block's
  unlearning seeds, so the blocks are independent draws of the nested design (the unlearning seeds of one trained
  model are not). Methods are ranked within each block (1 best, ties share the mean rank); only blocks where every
  method has a value count.
- **Aggregate.** The mean, over the metrics of `report.leaderboard.metrics` that the configuration records (by
  default the declared leaderboard metrics of the results' catalogue), of a method's per-metric rank in a block,
  ranked again within the block.
- **Tests.** Friedman's test over the blocks (are the methods' ranks exchangeable?), then Wilcoxon's signed-rank test
  for every pair of methods on their block scores, Holm-corrected over the pairs (scipy's tests, statsmodels'
  Holm). Wilcoxon–Holm's verdict on a pair does not depend on which other methods are in the comparison, which
  Nemenyi's (a mean-rank difference against a critical distance that grows with the number of methods) does.
- **Rank intervals.** A bootstrap over training seeds (each drawn seed brings its blocks of every target): each
  method's mean rank's 95% percentile interval and P(best), the share of resamples where its mean rank is the
  smallest (ties split).
- **Small sweeps.** A test needs enough blocks for its smallest attainable p-value to reach α (exact Wilcoxon: 2/2ⁿ
  against α / pairs, Holm's first step; Friedman: the χ² tail at perfect agreement); below that the table says how
  many training seeds it would take.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from unlearnbench.core.catalogue import RETRAINED, Catalogue
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.seed_design import rounded
from unlearnbench.runtime.errors import UserError

OPTION = "report.leaderboard.metrics"  # the option naming the leaderboard's metrics (`--leaderboard-metrics`)
AGGREGATE = "mean_rank"  # the aggregate's metric name in leaderboard.csv
ALPHA = 0.05
RESAMPLES = 1000
SEED = 20240603  # the bootstrap's seed: the report is reproducible
COLUMNS = ["metric", "split", "method", "blocks", "I", "targets", "mean_rank", "rank_low", "rank_high", "p_best",
           "score", "friedman_p", "note"]
PAIR_COLUMNS = ["metric", "split", "method_a", "method_b", "blocks", "median_difference", "p", "p_holm", "different"]


def parse_metrics(names: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """`metric:split` (or `metric` for a metric without a split) → (metric, split)."""
    return [tuple(name.split(":", 1)) if ":" in name else (name, "") for name in names]


def chosen_metrics(names: list[str] | tuple[str, ...] | None, catalogue: Catalogue,
                   recorded: set[str]) -> list[tuple[str, str]]:
    """The leaderboard's (metric, split): those of `names`, or where None the catalogue's declared leaderboard
    metrics. A `UserError` (one line, the rankable metrics listed) where a named metric has no best value or no
    result records it: a ranking by it would be silently empty. (Where nothing is recorded, as when every job
    failed, there is nothing to rank and the report lists the failures.)"""
    if names is None:
        return parse_metrics(catalogue.leaderboard())
    chosen = parse_metrics(names)
    if not recorded:
        return chosen
    rankable = [m.name for m in catalogue.metrics if m.ideal is not None and m.name in recorded]
    wrong = [name for name, (metric, _) in zip(names, chosen, strict=True) if metric not in rankable]
    if wrong:
        raise UserError(f"the {OPTION!r} option must name metrics with a best value (metric or metric:split of "
                        f"{', '.join(rankable) or 'none recorded'}); got {', '.join(wrong)} instead")
    return chosen


@dataclass
class Board:
    """One configuration's leaderboard: per metric and the aggregate, its rows, pairs and the blocks' ranks."""

    config: dict
    rows: list[dict] = field(default_factory=list)
    pairs: list[dict] = field(default_factory=list)
    ranks: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)  # blocks × methods, 1 = best
    significance: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)  # methods × methods, p_holm


def block_scores(values: pd.DataFrame, metric: str, split: str, catalogue: Catalogue) -> pd.DataFrame:
    """blocks (target, seed_train) × methods: each method's distance to the metric's ideal, from its mean over the
    block's unlearning seeds; only complete blocks, no gold standard. Empty where the metric has no ideal or no
    records."""
    goal = catalogue.ideal(metric)
    rows = values[(values["metric"] == metric) & (values["split"] == split)]
    if goal is None or rows.empty:
        return pd.DataFrame()
    means = rows.groupby(["role", "method", "target", "seed_train"])["value"].mean()
    if "unlearned" not in means.index.get_level_values("role"):
        return pd.DataFrame()  # the original and retrained models alone: nothing to rank
    table = means.loc["unlearned"].unstack("method")
    table = table[[m for m in table.columns if m not in catalogue.gold_standards]]
    if goal == RETRAINED:
        if "retrained" not in means.index.get_level_values(0):
            return pd.DataFrame()
        reference = means.loc["retrained"].groupby(["target", "seed_train"]).mean()
        table = table.sub(reference.reindex(table.index), axis=0)
    else:
        table = table - goal
    return rounded(table.abs().dropna(axis=0, how="any"))  # a mean's last bits are no ranking


def ranks_of(scores: pd.DataFrame) -> pd.DataFrame:
    """Ranks within each block (row): 1 for the smallest score, ties share their mean rank."""
    return pd.DataFrame(scipy_stats.rankdata(scores.to_numpy(), axis=1), index=scores.index, columns=scores.columns)


def blocks_needed(methods: int, alpha: float = ALPHA) -> tuple[int, int]:
    """(for Friedman, for Wilcoxon–Holm) the fewest blocks whose smallest attainable p-value reaches α: Friedman's
    statistic is n(k − 1) at perfect agreement; the exact two-sided signed-rank test's smallest p is 2/2ⁿ, which
    Holm's first step compares with α over the number of pairs."""
    pairs = methods * (methods - 1) // 2
    wilcoxon = math.ceil(math.log2(2 * pairs / alpha)) if pairs else 0
    friedman = next(n for n in range(2, 10_000) if scipy_stats.chi2.sf(n * (methods - 1), methods - 1) <= alpha) \
        if methods >= 3 else wilcoxon
    return friedman, wilcoxon


def friedman_p(scores: pd.DataFrame) -> float:
    """Friedman's p-value over the blocks (three methods or more); 1.0 where every block ties every method."""
    if scores.shape[1] < 3 or len(scores) < 2:
        return math.nan
    if (scores.nunique(axis=1) == 1).all():
        return 1.0
    return float(scipy_stats.friedmanchisquare(*(scores[m].to_numpy() for m in scores.columns)).pvalue)


def wilcoxon_holm(scores: pd.DataFrame, alpha: float = ALPHA) -> list[dict]:
    """Every pair's two-sided Wilcoxon signed-rank p-value on the block scores (exact where scipy can be), Holm's
    adjusted p-value over the pairs, and whether the pair differs at α. A pair equal in every block: p = 1."""
    from statsmodels.stats.multitest import multipletests

    rows = []
    for a, b in combinations(scores.columns, 2):
        difference = scores[a].to_numpy() - scores[b].to_numpy()
        p = 1.0 if not np.any(difference) else float(scipy_stats.wilcoxon(difference).pvalue)
        rows.append({"method_a": a, "method_b": b, "blocks": len(difference),
                     "median_difference": float(np.median(difference)), "p": p})
    if rows:
        reject, adjusted, _, _ = multipletests([r["p"] for r in rows], alpha=alpha, method="holm")
        for row, p_holm, differs in zip(rows, adjusted, reject, strict=True):
            row["p_holm"], row["different"] = float(p_holm), bool(differs)
    return rows


def bootstrap_ranks(ranks: pd.DataFrame, resamples: int = RESAMPLES, seed: int = SEED) -> pd.DataFrame:
    """Per method: the 95% percentile interval of its mean rank and P(best), over resamples of the training seeds
    (with replacement; a drawn seed brings its blocks of every target). NaN intervals with one training seed."""
    seeds = np.array(sorted(set(ranks.index.get_level_values("seed_train"))))
    methods = list(ranks.columns)
    if len(seeds) < 2:
        return pd.DataFrame({"rank_low": math.nan, "rank_high": math.nan, "p_best": math.nan}, index=methods)
    by_seed = np.stack([ranks.xs(s, level="seed_train").to_numpy().sum(axis=0) for s in seeds])  # seeds × methods
    counts = np.array([len(ranks.xs(s, level="seed_train")) for s in seeds])
    picks = np.random.default_rng([seed, len(seeds), len(methods), resamples]).integers(
        0, len(seeds), size=(resamples, len(seeds)))
    means = by_seed[picks].sum(axis=1) / counts[picks].sum(axis=1)[:, None]  # resamples × methods
    best = np.isclose(means, means.min(axis=1, keepdims=True), rtol=0, atol=1e-12)
    share = (best / best.sum(axis=1, keepdims=True)).mean(axis=0)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return pd.DataFrame({"rank_low": low, "rank_high": high, "p_best": share}, index=methods)


def metric_board(board: Board, scores: pd.DataFrame, metric: str, split: str, resamples: int) -> None:
    """The rows and pairs of one metric (or the aggregate) from its block scores."""
    ranks = ranks_of(scores)
    methods, blocks = list(scores.columns), len(scores)
    seeds = ranks.index.get_level_values("seed_train").nunique()
    targets = ranks.index.get_level_values("target").nunique()
    need_friedman, need_pairs = blocks_needed(len(methods))
    seeds_needed = math.ceil(need_pairs / targets)
    note = () if blocks >= need_pairs else (Note("wilcoxon_blocks", {"methods": len(methods), "need": need_pairs,
                                                                      "blocks": blocks, "seeds": seeds_needed,
                                                                      "targets": targets}),)
    p_friedman = friedman_p(scores) if blocks >= need_friedman else math.nan
    intervals = bootstrap_ranks(ranks, resamples)
    for method in methods:
        board.rows.append({"metric": metric, "split": split, "method": method, "blocks": blocks, "I": seeds,
                           "targets": targets, "mean_rank": float(ranks[method].mean()),
                           **intervals.loc[method].to_dict(), "score": float(scores[method].mean()),
                           "friedman_p": p_friedman, "note": note})
    if blocks >= need_pairs and len(methods) >= 2:
        pairs = wilcoxon_holm(scores)
        board.pairs += [{"metric": metric, "split": split, **pair} for pair in pairs]
        board.significance[(metric, split)] = significance_matrix(methods, pairs)
    board.ranks[(metric, split)] = ranks


def significance_matrix(methods: list[str], pairs: list[dict]) -> pd.DataFrame:
    """methods × methods: Holm-adjusted p-values (1 on the diagonal), as the critical-difference diagram reads."""
    matrix = pd.DataFrame(1.0, index=methods, columns=methods)
    for pair in pairs:
        matrix.loc[pair["method_a"], pair["method_b"]] = matrix.loc[pair["method_b"], pair["method_a"]] = \
            pair["p_holm"]
    return matrix


def configuration_board(values: pd.DataFrame, config: dict, metrics: list[tuple[str, str]], catalogue: Catalogue,
                        resamples: int = RESAMPLES) -> Board | None:
    """The leaderboard of one configuration's values: each declared metric it records, then the aggregate over
    them; None when it has fewer than two methods to rank on any of them."""
    board = Board(config)
    per_metric = {}
    for metric, split in metrics:
        scores = block_scores(values, metric, split, catalogue)
        if scores.shape[1] >= 2 and len(scores):
            per_metric[(metric, split)] = scores
            metric_board(board, scores, metric, split, resamples)
    if not per_metric:
        return None
    if len(per_metric) > 1:
        common = sorted(set.intersection(*(set(s.columns) for s in per_metric.values())))
        stacked = [ranks_of(s[common]) for s in per_metric.values()]
        index = stacked[0].index
        for frame in stacked[1:]:
            index = index.intersection(frame.index)
        if len(common) >= 2 and len(index):
            aggregate = sum(frame.loc[index] for frame in stacked) / len(stacked)
            metric_board(board, aggregate, AGGREGATE, "", resamples)
    return board


def leaderboards(values: pd.DataFrame, keys: list[str], metrics: list[tuple[str, str]], catalogue: Catalogue,
                 resamples: int = RESAMPLES) -> list[Board]:
    """One `Board` per configuration (the study's `keys`) that has two methods or more to rank by `metrics`, judged
    by the ideals and gold standards of `catalogue`."""
    boards = []
    if values.empty:
        return boards
    for config, group in values.groupby(keys, sort=False):
        config = dict(zip(keys, config if isinstance(config, tuple) else (config,), strict=True))
        board = configuration_board(group, config, metrics, catalogue, resamples)
        if board is not None:
            boards.append(board)
    return boards


def tables(boards: list[Board], keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(leaderboard.csv, leaderboard_pairs.csv): every board's rows and pairs, the configuration as columns."""
    rows = [{**board.config, **row} for board in boards for row in board.rows]
    pairs = [{**board.config, **pair} for board in boards for pair in board.pairs]
    return (pd.DataFrame(rows, columns=[*keys, *COLUMNS]), pd.DataFrame(pairs, columns=[*keys, *PAIR_COLUMNS]))


def figure_stem(config: dict) -> str:
    """The file stem of a configuration's critical-difference diagram (figures.py draws it, report.md shows it)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(map(str, config.values()))).strip("-") or "x"
    return f"leaderboard_{name}"


def main_metric(board: Board) -> tuple[str, str]:
    """The (metric, split) a board is ordered by: the aggregate where there is one, else its only metric."""
    metrics = [(row["metric"], row["split"]) for row in board.rows]
    return (AGGREGATE, "") if (AGGREGATE, "") in metrics else metrics[0]
