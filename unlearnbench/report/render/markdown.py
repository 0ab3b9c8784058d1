"""`report.md`: the tables of a `Study` as Markdown, best values marked, warnings, figures, failed jobs and failed
methods. Metric labels, ideals, gold standards and the headline columns come from the study's catalogue."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from unlearnbench.core.catalogue import RETRAINED, Catalogue
from unlearnbench.report.compute.analysis import Study, matching
from unlearnbench.report.compute.seed_design import rank_label
from unlearnbench.report.read.collect import describe_numerics, failed_methods
from unlearnbench.report.render.words import joined, metric_label

MAX_ERROR_LINES = 20
TRUNCATED = ("0†: a negative estimate (its mean squares in the wrong order, often by chance with few seeds) "
             "truncated at 0; the share is of the truncated values, and the interval still says how large the "
             "component may be.")
VARIANCE_INTRO = ["### Seed variance: training seed (σ_T²) and unlearning seed (σ_U²)", "",
                  "One-way nested random effects; total = σ_T² + σ_U²; ICC = σ_T² / total. σ_T² with the "
                  "Graybill–Wang interval; σ_U² with a studentized bootstrap over training seeds, which holds when "
                  "the unlearning seed matters more for some trained models than for others; the exact χ² interval "
                  "beside it only where a Brown–Forsythe test does not reject equal per-seed variances (p ≥ 0.05). "
                  "var(Z | S = s): the smallest and largest variance over one training seed's unlearning seeds "
                  f"(det.: seeds where it is exactly 0). {TRUNCATED} Where the sweep varies the evaluation seed, "
                  "σ_T² and σ_U² are the three-stage split's (below). Every metric and model in "
                  "`seed_variance.csv`, every training seed in `seed_variance_by_seed.csv`.", ""]
EVALUATION_INTRO = ["### Seed variance with the evaluation seed (σ_E²)", "",
                    "Where the sweep varies `seeds.eval` within each (training, unlearning) seed pair (sampled "
                    "decoding, `evaluation.sampling`): the three-stage nested split, total = σ_T² + σ_U² + σ_E², "
                    "with 95% intervals (σ_T², σ_U²: Graybill–Wang; σ_E²: χ²) and each part's share, for the metrics "
                    "the evaluation seed moves; K evaluation seeds per pair. The table above takes its σ_T², σ_U² and "
                    "σ_E² from this split. {truncated} Every metric in `seed_variance_eval.csv`.", ""]
W2_INTRO = ["### Single- against multi-training-seed design (W2)", "",
            "A(i): the J unlearning seeds of training seed i; B₋ᵢ: one unlearning seed (the smallest) of every "
            "other training seed. W2(A(i), B₋ᵢ) for every training seed i, against the 95th percentile of its "
            "permutation null; every seed in `wasserstein_by_seed.csv`.", ""]
RANK_INTRO = ["### How misleading is one training seed?", "",
              "For each training seed i, the methods (other than `retrain`) ranked by the single-training-seed "
              "design A(i) against the ranking from the other training seeds (mean of their per-seed means); "
              "smaller |Δ| ranks higher. P(best changes): the share of training seeds whose best method is not "
              "the others' best, with its Wilson 95% interval; τ: Kendall's τ-b between the two rankings. Every seed "
              "in `rank_stability_by_seed.csv`.", ""]
PLAN_INTRO = ["### How many seeds to run", "",
              "The cheapest I training seeds × J unlearning seeds each (× K evaluation seeds, where the sweep "
              "separates their variance) whose mean has a standard error ≤ {target} (`report.target_se`): SE² = "
              "σ_T²/I + σ_U²/(IJ) + σ_E²/(IJK), cost = I·(c_T + J·(c_U + (K − 1)·c_E)), with c_T the median time "
              "to train M_o, c_U that of M_r plus the method and c_E the method's, all measured in this sweep. "
              "Planned at the upper limits of the components' 95% intervals (one-sided 97.5% limits: the headline, "
              "since a pilot of few seeds estimates them poorly) and at the estimates; never fewer than 2 training "
              "seeds, since σ_T² cannot be estimated from one. {truncated} A plan from a pilot is a first estimate: "
              "rebuild the report once more seeds have finished. Every metric in `seed_plan.csv`.", ""]
POWER_INTRO = ["### How many seeds to tell two methods apart", "",
               "For the methods the leaderboard places next to each other (and every pair of `report.compare`), per "
               "leaderboard metric: each method's distance to the metric's ideal in its own job, and their paired "
               "difference d_a − d_b over the same jobs (< 0: a is closer). Its mean [95% t-interval] and p over "
               "the training seeds' means (df I − 1; one pair's test, not corrected for the other pairs: the "
               "leaderboard's Wilcoxon–Holm verdict says which pairs differ); σ_T² and σ_U² of the difference; "
               "the power of this sweep's I × J to detect δ (the observed |difference|, or "
               "`report.min_difference`), and the cheapest I × J with power 0.8 at α = 0.05 (the noncentral t of "
               "a multisite design: Raudenbush and Liu, Psychological Methods 5, 2000). Every pair in "
               "`seed_power.csv`.", ""]


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value == 0:
        return "0"
    return f"{value:.3g}"


def mean_std(mean: float, std: float) -> str:
    return fmt(mean) if std is None or math.isnan(std) else f"{fmt(mean)} ± {fmt(std)}"


def interval(value: float, low: float, high: float) -> str:
    return fmt(value) if math.isnan(low) else f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows), ""]


def row_name(role: str, method: str) -> str:
    return method if role == "unlearned" else f"({role})"


def best_methods(table: pd.DataFrame, metric: str, split: str, catalogue: Catalogue) -> set[str]:
    """The unlearning methods (not the retrained gold standard) whose mean is closest to the metric's ideal (ties: all
    of them). The retrained reference is M_r's row, or its method's row where retraining is a method (`fed_retrain`)."""
    goal, gold_standards = catalogue.ideal(metric), catalogue.gold_standards
    if goal is None:
        return set()
    rows = [(role, method, float(mean)) for role, method, mean, m, s in  # a few rows: plain Python, not pandas
            zip(table["role"], table["method"], table["mean"], table["metric"], table["split"], strict=True)
            if m == metric and s == split and not math.isnan(mean)]
    if goal == RETRAINED:
        reference = [mean for role, _, mean in rows if role == "retrained"] or [
            mean for role, method, mean in rows if role == "unlearned" and method in gold_standards]
        if not reference:
            return set()
        goal = reference[0]
    candidates = [(method, abs(mean - goal)) for role, method, mean in rows
                  if role == "unlearned" and method not in gold_standards]
    if len(candidates) < 2:
        return set()
    best = min(distance for _, distance in candidates)
    return {method for method, distance in candidates if distance <= best + 1e-12 * max(1.0, abs(best))}


def section_title(ident: tuple) -> str:
    """The section heading: dataset · model · scenario (· any other varied configuration) — target t."""
    return " · ".join(f"{value}" for value in ident[:-1] if value != "") + f" — target {ident[-1]}"


def section_columns(table: pd.DataFrame, catalogue: Catalogue) -> list[tuple[str, str, str]]:
    """(label, metric, split) of the headline metrics a section has: its short tables' columns."""
    return [(h, m, s) for h, m, s in catalogue.headline() if ((table["metric"] == m) & (table["split"] == s)).any()]


def goal_words(goal: float | str) -> str:
    return "the retrained model's mean" if goal == RETRAINED else f"{goal:g}"


def best_rule(columns: list[tuple[str, str, str]], catalogue: Catalogue) -> list[str]:
    """The line that says which value of each of the section's columns is bold (none where no column has an
    ideal)."""
    by_ideal: dict = {}
    for _, metric, _ in columns:
        if catalogue.ideal(metric) is not None:
            by_ideal.setdefault(catalogue.ideal(metric), {})[catalogue.label(metric, None)] = None
    if not by_ideal:
        return []
    goals = [f"{goal_words(goal)} for {', '.join(labels)}" for goal, labels in by_ideal.items()]
    gold = " and ".join(f"`{method}`" for method in sorted(catalogue.gold_standards))
    among = f" other than {gold} (M_r itself)" if gold else ""
    return [f"**Bold**: the best method per column, among the unlearning methods{among}: closest to "
            f"{'; to '.join(goals)}.", ""]


def main_section(table: pd.DataFrame, columns: list[tuple[str, str, str]], catalogue: Catalogue) -> list[str]:
    """Mean ± std across training seeds per method for the headline metrics (rows: M_o, M_r, then every method)."""
    names = list(dict.fromkeys(zip(table["role"], table["method"], strict=True)))
    best = {(m, s): best_methods(table, m, s, catalogue) for _, m, s in columns}
    cell_values: dict = {}  # (role, method, metric, split) -> its first row's (mean, std): one pass, not a mask a cell
    for key in zip(table["role"], table["method"], table["metric"], table["split"], table["mean"], table["std"],
                   strict=True):
        cell_values.setdefault(key[:4], key[4:])
    counts = table.groupby(["role", "method"], sort=False)[["I", "n"]].max()
    rows = []
    for role, method in names:
        cells = [row_name(role, method)]
        for _, metric, split in columns:
            hit = cell_values.get((role, method, metric, split))
            if hit is None:
                cells.append("–")
                continue
            text = mean_std(*hit)
            cells.append(f"**{text}**" if role == "unlearned" and method in best[metric, split] else text)
        cells += [str(int(counts.at[(role, method), "I"])), str(int(counts.at[(role, method), "n"]))]
        rows.append(cells)
    return md_table(["", *(h for h, _, _ in columns), "I", "n"], rows)


def main_rows(frame: pd.DataFrame, columns: list[tuple[str, str, str]]) -> pd.DataFrame:
    """The unlearned models' rows of the section's metrics, in the main table's column order."""
    order = {(m, s): i for i, (_, m, s) in enumerate(columns)}
    rank = [order.get((m, s)) for m, s in zip(frame["metric"], frame["split"], strict=True)]
    chosen = frame.assign(_rank=rank)
    chosen = chosen[(chosen["role"] == "unlearned") & chosen["_rank"].notna()]
    return chosen.sort_values(["_rank", "method"], kind="stable").drop(columns="_rank")


def truncated(value: float, flag) -> str:
    """An estimate, marked † where it is a negative one truncated at 0."""
    return f"{fmt(value)}†" if flag is True or flag == 1 else fmt(value)


def variance_section(variance: pd.DataFrame, columns: list[tuple[str, str, str]], catalogue: Catalogue) -> list[str]:
    rows = [[r.method, catalogue.label(r.metric, r.split), str(r.I), fmt(r.J), fmt(r.total),
             interval_text(truncated(r.sigma_t2, r.sigma_t2_truncated), r.sigma_t2_low, r.sigma_t2_high),
             interval(r.sigma_u2, r.sigma_u2_low, r.sigma_u2_high),
             "–" if math.isnan(r.sigma_u2_chi2_low) else f"[{fmt(r.sigma_u2_chi2_low)}, {fmt(r.sigma_u2_chi2_high)}]",
             spread(r), fmt(r.homogeneity_p), fmt(r.icc)]
            for r in main_rows(variance, columns).itertuples()
            if not (math.isnan(r.total) and math.isnan(r.sigma_u2))]
    if not rows:
        return []
    return md_table(["method", "metric", "I", "J", "total", "σ_T² [95% CI]", "σ_U² [95% CI]", "χ² CI",
                     "var(Z | S = s): min–max", "equal var. p", "ICC"], rows)


def interval_text(text: str, low: float, high: float) -> str:
    return text if math.isnan(low) else f"{text} [{fmt(low)}, {fmt(high)}]"


def evaluation_section(split: pd.DataFrame, catalogue: Catalogue) -> list[str]:
    """The unlearned models' rows whose evaluation seed moves them (σ_E² > 0), by method."""
    moved = split[(split["role"] == "unlearned") & (split["sigma_e2"] > 0)].sort_values(["method", "metric"],
                                                                                        kind="stable")
    rows = [[r.method, catalogue.label(r.metric, r.split), str(r.I), fmt(r.J), fmt(r.K), fmt(r.total),
             interval_text(truncated(r.sigma_t2, r.sigma_t2_truncated), r.sigma_t2_low, r.sigma_t2_high),
             interval_text(truncated(r.sigma_u2, r.sigma_u2_truncated), r.sigma_u2_low, r.sigma_u2_high),
             interval(r.sigma_e2, r.sigma_e2_low, r.sigma_e2_high),
             " / ".join("–" if math.isnan(v) else f"{v:.0%}" for v in (r.train_share, r.unlearn_share, r.eval_share)),
             r.estimator] for r in moved.itertuples()]
    if not rows:
        return []
    return md_table(["method", "metric", "I", "J", "K", "total", "σ_T² [95% CI]", "σ_U² [95% CI]", "σ_E² [95% CI]",
                     "shares T / U / E", "estimator"], rows)


def spread(row) -> str:
    """The range of var(Z | S = s_i) over the training seeds with two unlearning seeds, and how many are 0."""
    if not row.seeds_with_spread:
        return "–"
    deterministic = f" ({row.deterministic_seeds} of {row.seeds_with_spread} det.)" if row.deterministic_seeds else ""
    return f"{fmt(row.var_by_seed_min)}–{fmt(row.var_by_seed_max)}{deterministic}"


def rank_section(ranks: pd.DataFrame, catalogue: Catalogue) -> list[str]:
    rows = [[rank_label(r.metric, r.split, catalogue), r.best_all, str(r.I), str(r.methods),
             f"{r.p_best_changes:.0%} [{r.p_low:.0%}, {r.p_high:.0%}]",
             f"{fmt(r.tau_mean)} [{fmt(r.tau_min)}, {fmt(r.tau_max)}]"] for r in ranks.itertuples()]
    if not rows:
        return []
    return md_table(["ranked by", "best over all seeds", "I", "methods", "P(best changes) [95% CI]",
                     "τ: mean [min, max]"], rows)


def grid_size(values: pd.DataFrame) -> str:
    """`I = …, J = …`: the training seeds of a section's methods and the most unlearning seeds one of them has."""
    mine = values[values["role"] == "unlearned"]
    if mine.empty:
        return "no method"
    per_seed = mine.groupby("seed_train")["seed_unlearn"].nunique()
    return f"I = {len(per_seed)}, J = {int(per_seed.max())}"


def design(i, j, k=None) -> str:
    """`I × J` (`× K` where K > 1), or – where there is no plan."""
    if pd.isna(i):
        return "–"
    return f"{int(i)} × {int(j)}" + (f" × {int(k)}" if not pd.isna(k) and int(k) > 1 else "")


def plan_section(plans: pd.DataFrame, columns: list[tuple[str, str, str]], grid: str,
                 catalogue: Catalogue) -> list[str]:
    """The seed plan of the rows where σ_T² and σ_U² are both estimated; one line where none is."""
    chosen = [(h, m, s) for h, m, s in columns if m != "time_s"]
    planned = main_rows(plans.assign(role="unlearned"), chosen)
    if planned.empty:
        return []
    identified = planned[planned["sigma_t2"].notna() & planned["sigma_u2"].notna()]
    if identified.empty:
        return [f"How many seeds to run: not identifiable from this grid: {grid} (σ_T² needs two training seeds, "
                f"σ_U² two unlearning seeds of one; `seed_plan.csv`)."]
    rows = [[r.method, catalogue.label(r.metric, r.split),
             f"{truncated(r.sigma_t2, r.sigma_t2_truncated)} ({fmt(r.sigma_t2_high)})",
             f"{fmt(r.sigma_u2)} ({fmt(r.sigma_u2_high)})"
             + ("" if pd.isna(r.sigma_e2) else f"; σ_E² {fmt(r.sigma_e2)} ({fmt(r.sigma_e2_high)})"),
             fmt(r.cost_train_s), fmt(r.cost_unlearn_s), fmt(r.j_star),
             design(r.upper_I, r.upper_J, r.upper_K), fmt(r.upper_cost_s),
             design(r.point_I, r.point_J, r.point_K), fmt(r.point_cost_s),
             "; ".join(filter(None, (joined(r.upper_note), joined(r.point_note))))]
            for r in identified.itertuples()]
    return md_table(["method", "metric", "σ̂_T² (upper)", "σ̂_U² (upper)", "c_T s", "c_U s", "J*",
                     "I × J at upper limits", "cost s", "I × J at estimates", "cost s", "note"], rows)


def power_section(powers: pd.DataFrame, catalogue: Catalogue) -> list[str]:
    """Per compared pair and leaderboard metric: the difference, its test, the power now and the planned design; one
    line where no pair has the two training seeds a test needs."""
    if powers.empty:
        return []
    tested = powers[powers["I"] >= 2]
    if tested.empty:
        return [f"How many seeds to tell two methods apart: not identifiable from this grid: I = "
                f"{int(powers['I'].max())} (a paired test over training seeds needs two; `seed_power.csv`)."]
    rows = [[f"{r.method_a} − {r.method_b}", catalogue.label(r.metric, r.split), design(r.I, round(r.J)),
             interval(r.mean_difference, r.low, r.high), fmt(r.p), fmt(r.min_difference),
             "–" if pd.isna(r.power_now) else f"{r.power_now:.2f}", design(r.plan_I, r.plan_J),
             "–" if pd.isna(r.plan_power) else f"{r.plan_power:.2f}", fmt(r.plan_cost_s), joined(r.note)]
            for r in tested.itertuples()]
    return md_table(["pair", "metric", "I × J", "d_a − d_b [95% CI]", "p", "δ", "power now", "I × J for 0.8",
                     "power", "cost s", "note"], rows)


def wasserstein_section(wasserstein: pd.DataFrame, columns: list[tuple[str, str, str]],
                        catalogue: Catalogue) -> list[str]:
    rows = [[r.method, catalogue.label(r.metric, r.split), f"{fmt(r.w2_mean)} [{fmt(r.w2_min)}, {fmt(r.w2_max)}]",
             fmt(r.null_95_mean), f"{r.share_above_null:.0%}", str(r.I), fmt(r.J)]
            for r in main_rows(wasserstein, columns).itertuples()]
    if not rows:
        return []
    return md_table(["method", "metric", "W2(A(i), B₋ᵢ): mean [min, max] over i", "null 95% (mean)",
                     "i with W2 > null", "I", "J"], rows)


FORGET_INTRO = ["### Forgetting quality per example (NeurIPS 2023 competition, LiRA, KLOM)", "",
                "Per pool of models sharing one forget set, A(i) (the unlearning seeds of training seed i: one "
                "original model) and B (one job per training seed): F, the mean over forget examples of the points "
                "of each example's ε (1 below 0.5, halving every 0.5 up to the cap ⌈ln(N − 1)⌉, 0 beyond); its null "
                "(the pooled 2N models split at random into two pools of N: median [5th percentile]); "
                "distinguishable: F below the null's 5th percentile. Score = F · the retain accuracies' ratios "
                "(train, test) of M_u to M_r. LiRA (offline, one-sided): AUC and TPR at 1% / 0.1% FPR of "
                "unlearned against retrained models over all (model, forget example) pairs. MIA: the entropy "
                "attack's mean, unlearned / retrained. KLOM (Georgiev et al. 2024): per example the KL divergence "
                "from the unlearned models' histogram of margins to the retrained models' (20 bins, margins clipped "
                "to ±100, floor 1e-5), its 95th percentile over D_f [the null's 95th percentile: above it the "
                "method's models are told from retrained ones at this N] and over the samples of D_r / D'_r; "
                "retraining scores 0, and few models raise the floor (the null's median is in forget_quality.csv). "
                "ε per example in `forget_quality_by_example.csv`.", ""]


def forget_quality_section(forgetting, select: dict) -> list[str]:
    """The per-pool table, F across the A(i) against B, and how often A(i)'s best method by F is not B's."""
    if forgetting is None or forgetting.empty:
        return []
    rows = matching(forgetting.quality, select)
    if rows.empty:
        return []
    def pool(row) -> str:
        return "B" if row.design == "B" else f"A({int(row.seed_train)})"

    table = [[row.method, pool(row), str(int(row.n_models)), str(int(row.epsilon_cap)), fmt(row.forget_quality),
              f"{fmt(row.forget_quality_null_median)} [{fmt(row.forget_quality_null_5pct)}]",
              {True: "yes", False: "no"}.get(row.distinguishable, "–"), fmt(row.score), fmt(row.lira_auc),
              fmt(row.lira_tpr_at_1pct), fmt(row.lira_tpr_at_0_1pct),
              f"{fmt(row.klom_forget)} [{fmt(row.klom_forget_null_95pct)}]",
              f"{fmt(row.klom_retain)} / {fmt(row.klom_test)}",
              f"{fmt(row.mia_unlearned)} / {fmt(row.mia_retrained)}", joined(row.note)]
             for row in rows.rename(columns={"lira_tpr_at_0.1pct": "lira_tpr_at_0_1pct"}).itertuples()]
    lines = [*FORGET_INTRO, *md_table(["method", "pool", "N", "cap", "F", "null median [5%]", "distinguishable",
                                       "score", "LiRA AUC", "TPR@1%", "TPR@0.1%", "KLOM D_f [null 95%]",
                                       "KLOM D_r / D'_r", "MIA u / r", "note"], table)]
    across = matching(forgetting.across, select)
    if not across.empty and (across["designs_A"] > 1).any():
        lines += ["F across the single-original-model pools A(i), against B:", ""]
        lines += md_table(["method", "A(i)", "F under A(i): mean ± std [min, max]", "F under B"],
                          [[r.method, str(int(r.designs_A)),
                            f"{mean_std(r.forget_quality_A_mean, r.forget_quality_A_std)} "
                            f"[{fmt(r.forget_quality_A_min)}, {fmt(r.forget_quality_A_max)}]",
                            fmt(r.forget_quality_B)] for r in across.itertuples()])
    best = matching(forgetting.best, select)
    for r in best.itertuples():
        lines += [f"Best method by F under B: {r.best_B}; under each A(i): {r.best_A}. P(A(i)'s best is not B's) = "
                  f"{interval(r.p_best_differs, r.p_low, r.p_high)} (Wilson 95%, {int(r.designs_A)} pools A(i)).", ""]
    return lines


LEADERBOARD_INTRO = ("Per block (a target and a training seed, the method's values averaged over its unlearning "
                     "seeds), the methods other than `retrain` are ranked by closeness to each metric's ideal (the "
                     "bold rule below) and by their mean rank over the metrics shown. Mean rank [95% interval] and "
                     "P(best): bootstrap over training seeds. Friedman's test, then Wilcoxon signed-rank for each "
                     "pair, Holm-corrected. Every metric in `leaderboard.csv`, every pair in `leaderboard_pairs.csv`.")
MAX_PAIRS = 12


def leaderboard_section(boards: list, figures: dict[str, str], catalogue: Catalogue) -> list[str]:
    """The leaderboard of each configuration: the methods by mean rank, their intervals and per-metric ranks, the
    tests' verdict (or how many training seeds a test would need), and the critical-difference diagram."""
    from unlearnbench.report.compute.leaderboard import AGGREGATE, figure_stem, main_metric

    if not boards:
        return []
    lines = ["## Leaderboard", "", LEADERBOARD_INTRO, ""]
    for board in boards:
        rows = pd.DataFrame(board.rows)
        main, main_split = main_metric(board)
        headline = rows[(rows["metric"] == main) & (rows["split"] == main_split)].sort_values(
            ["mean_rank", "method"], kind="stable")
        parts = [(m, s) for m, s in dict.fromkeys(zip(rows["metric"], rows["split"], strict=True))
                 if m != AGGREGATE] if main == AGGREGATE else []  # the aggregate's parts beside it
        rank_of = {(r.metric, r.split, r.method): r.mean_rank for r in rows.itertuples()}
        table = [[r.method, interval(r.mean_rank, r.rank_low, r.rank_high),
                  "–" if math.isnan(r.p_best) else f"{r.p_best:.2f}",
                  *(fmt(rank_of.get((m, s, r.method))) for m, s in parts)] for r in headline.itertuples()]
        first = headline.iloc[0]
        name = " · ".join(str(v) for v in board.config.values() if v != "")
        ranked_by = "" if main == AGGREGATE else f" by {metric_label(main, main_split, catalogue)}"
        lines += [f"### {name}", "", *md_table(["method", f"mean rank{ranked_by} [95%]", "P(best)",
                                                *(metric_label(m, s, catalogue) for m, s in parts)], table)]
        lines += [verdict(board, (main, main_split), first), ""]
        if figure_stem(board.config) in figures:
            lines += [f"![critical-difference diagram]({figures[figure_stem(board.config)]})", ""]
    return lines


def nothing_to_rank(values: pd.DataFrame) -> list[str]:
    """The leaderboard's heading and why it is empty, where no configuration has two methods to rank (an import of
    M_o and M_r alone, a sweep of one method); nothing where there are no records at all."""
    if values.empty:
        return []
    if not (values["role"] == "unlearned").any():
        why = "no unlearned model among the results, only M_o and M_r"
    else:
        why = ("no configuration has two unlearning methods with values of the leaderboard metrics (and, for a "
               "metric judged against M_r, a retrained model)")
    return ["## Leaderboard", "", f"Nothing to rank: {why}.", ""]


def verdict(board, metric: tuple[str, str], row) -> str:
    """One line: Friedman's p and the pairs that differ, or how many training seeds the tests would need."""
    blocks = f"{int(row.blocks)} block{'s' if row.blocks != 1 else ''} ({int(row.targets)} target" \
             f"{'s' if row.targets != 1 else ''} × {int(row.I)} training seed{'s' if row.I != 1 else ''})"
    friedman = "" if math.isnan(row.friedman_p) else f"Friedman p = {fmt(row.friedman_p)}; "
    if row.note:
        return f"Over {blocks}: {friedman}no pairwise test: {joined(row.note)}."
    pairs = [p for p in board.pairs if (p["metric"], p["split"]) == metric and p["different"]]
    shown = [f"{p['method_a']} {'<' if p['median_difference'] < 0 else '>'} {p['method_b']}" for p in pairs]
    listed = ", ".join(shown[:MAX_PAIRS]) + (f", … {len(shown) - MAX_PAIRS} more" if len(shown) > MAX_PAIRS else "")
    return (f"Over {blocks}: {friedman}pairs that differ (Wilcoxon–Holm, α = 0.05; < reads closer to the ideal): "
            f"{listed or 'none'}.")


def machines(jobs: list[dict]) -> list[str]:
    """Which machines and set-ups the complete jobs ran on (numbers are bit-identical only within one)."""
    identities = {job["numerics"]: job.get("numerics_identity") for job in jobs
                  if job.get("status") == "complete" and job.get("numerics")}
    if not identities:
        return []
    return ["Ran on: " + "; ".join(f"{describe_numerics(identity)} (`{ident}`)"
                                   for ident, identity in identities.items()) + ".", ""]


def render(study: Study, jobs: list[dict], failed: list[dict], folders: list[Path], figures: list[Path],
           warnings: list[str], out: Path, tuning: list[str] = ()) -> str:
    """report.md: what a reader wants first (the leaderboard, a tuning's section, the warnings, the headline table
    per target), then the seed study's sections where the sweep can say something; per-metric detail stays in the
    CSVs it names."""
    complete = sum(1 for job in jobs if job.get("status") == "complete")
    lines = ["# unlearnbench report", "",
             f"Sweep folders: {', '.join(f'`{f}`' for f in folders)}. Jobs: {len(jobs)} ({complete} complete, "
             f"{len(failed)} failed).", "", *machines(jobs)]
    if study.values.empty:
        lines += ["No complete job with records was found.", ""]
    catalogue = study.catalogue
    lines += leaderboard_section(study.leaderboard, {p.stem: p.relative_to(out).as_posix() for p in figures},
                                 catalogue) or nothing_to_rank(study.values)
    lines += tuning  # a tuning sweep's section (render/tuning.py)
    if warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in warnings), ""]
    keys = [*study.keys, "target"]
    table, variance, wasserstein = study.table, study.variance, study.wasserstein
    for ident, part in table.groupby(keys, sort=False):
        select = dict(zip(keys, ident, strict=True))
        lines += [f"## {section_title(ident)}", "",
                  "### Mean ± std across training seeds", "",
                  "Per training seed the values are averaged over its unlearning seeds; then mean ± std (ddof 1) "
                  "over the I training seeds; n = values.", ""]
        columns = section_columns(part, catalogue)
        lines += [*best_rule(columns, catalogue), *main_section(part, columns, catalogue)]
        target_se = study.plans["target_se"].iloc[0] if not study.plans.empty else None
        plan_intro = [line.format(target=fmt(target_se), truncated=TRUNCATED) for line in PLAN_INTRO]
        evaluation_intro = [line.format(truncated=TRUNCATED) for line in EVALUATION_INTRO]
        for intro, section in ((VARIANCE_INTRO, variance_section(matching(variance, select), columns, catalogue)),
                               (evaluation_intro, evaluation_section(matching(study.variance_eval, select),
                                                                     catalogue)),
                               (W2_INTRO, wasserstein_section(matching(wasserstein, select), columns, catalogue)),
                               (RANK_INTRO, rank_section(matching(study.ranks, select), catalogue)),
                               (plan_intro, plan_section(matching(study.plans, select), columns,
                                                         grid_size(matching(study.values, select)), catalogue)),
                               (POWER_INTRO, power_section(matching(study.powers, select), catalogue))):
            lines += [section[0], ""] if len(section) == 1 else [*intro, *section] if section else []
        lines += forget_quality_section(study.forgetting, select)
        lines += ["Every metric and split of every model: `table.csv` (mean ± std across training seeds), "
                  "`summary.csv` (over every seed), `results.csv` (every record).", ""]
    lines += dynamics_section(study)
    shown = [path for path in figures if not path.stem.startswith("leaderboard_")]  # shown in the leaderboard
    if shown:
        lines += ["## Figures", ""]
        for path in shown:
            relative = path.relative_to(out).as_posix()
            lines += [f"![{path.stem}]({relative})", ""]
    lines += [f"## Failed jobs ({len(failed)})", ""]
    if failed:
        for job in failed:
            error = str(job.get("error") or "no error recorded").strip()
            first, *rest = error.splitlines() or [""]
            lines.append(f"- `{job['folder']}` ({job.get('status')}): {first[:500]}")
            if rest:
                shown = rest[:MAX_ERROR_LINES] + ([f"… {len(rest) - MAX_ERROR_LINES} more lines"]
                                                 if len(rest) > MAX_ERROR_LINES else [])
                lines += ["", "  ```", *(f"  {line}" for line in shown), "  ```"]
        lines.append("")
    else:
        lines += ["None.", ""]
    lines += failed_methods_section(failed_methods(jobs))
    return "\n".join(lines)


DYNAMICS_INTRO = ("The jobs recorded their metrics along the methods' steps (`evaluation.during`; step 0 is M_o). Per "
                  "method and headline metric: the step whose mean over training seeds (each seed's unlearning "
                  "seeds averaged first) is closest to the metric's ideal (to M_r's mean for a metric judged against "
                  "the retrained model), that mean with its 95% t-interval across training seeds, the last step's "
                  "mean, and each training seed's own best step (min / median / max over its I seeds). A step "
                  "chosen on the runs it is reported on is optimistic: its value is the best of many looks at the "
                  "same seeds' noise, and the spread of the per-seed best steps shows how little one run's curve "
                  "says about when to stop. Choose the stopping step on some training seeds and judge it on others "
                  "before trusting it. Every step in `dynamics.csv` (per training seed: `dynamics_by_seed.csv`), the "
                  "figures `dynamics_*.png` and, where the task declares a forgetting–utility plane, `plane_*.png`.")


def dynamics_section(study: Study) -> list[str]:
    """Per method and headline metric along the steps: the best step of the mean, and how the seeds' own best steps
    spread (`dynamics_best.csv`); nothing where no job recorded step records."""
    if study.dynamics.empty:
        return []
    lines = ["## Dynamics", "", DYNAMICS_INTRO, ""]
    best = study.dynamics_best
    if best.empty:
        return [*lines, "No headline metric with a best value was recorded along the steps.", ""]
    rows = [[" · ".join(str(getattr(r, k)) for k in study.keys if getattr(r, k) != "") + f" — target {r.target}",
             r.method, study.catalogue.label(r.metric, r.split),
             str(r.best_step) + ("" if pd.isna(r.best_epoch) else f" ({fmt(r.best_epoch)} ep.)"),
             interval(r.best_mean, r.best_low, r.best_high), f"{r.last_step}: {fmt(r.last_mean)}",
             f"{fmt(r.seed_best_min)} / {fmt(r.seed_best_median)} / {fmt(r.seed_best_max)}", str(r.I)]
            for r in best.itertuples()]
    from unlearnbench.report.render.tuning import best_own_lines  # (render/tuning.py imports this module)

    return [*lines, *md_table(["configuration", "method", "metric", "best step", "mean there [95% CI]",
                               "last step: mean", "seeds' best steps: min / median / max", "I"], rows),
            *best_own_lines(study.dynamics_best_own, study.keys, study.catalogue.label)]


def first_line(error: object) -> str:
    return (str(error or "").strip().splitlines() or ["no error recorded"])[0][:500]


def failed_methods_section(failures: list[dict]) -> list[str]:
    """The methods that failed or diverged in jobs that otherwise completed (`collect.failed_methods`), one line
    each; no section when there are none."""
    if not failures:
        return []
    lines = [f"## Failed methods ({len(failures)})", "",
             "Methods that failed or diverged in a job whose other methods completed (the job counts as complete).", ""]
    for failure in failures:
        method, error = failure.get("method") or "–", first_line(failure["error"])
        lines.append(f"- `{failure['folder']}`: target {failure['target']}, method {method}: {error}")
    return [*lines, ""]
