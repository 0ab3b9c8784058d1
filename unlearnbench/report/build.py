"""`unlearnbench-report DIR…` and the end-of-sweep callback share this: collect, analyse, write `DIR/report/`.

    results.parquet, results.csv   every record of every job (tidy), the job's fields and status as columns; the
                                   statistics below also carry the metrics the results' catalogue derives across
                                   jobs (e.g. the text task's forget quality against one fixed retain model,
                                   derived.py)
    summary.csv                    mean, std, n per configuration × target × role × method × metric × split (× round)
    table.csv                      mean ± std across training seeds (per-seed means first), the report's tables
    seed_variance.csv              σ_T², σ_U² with intervals, ICC, I, J, the per-seed variances' range and their
                                   homogeneity test, per row of the study
    seed_variance_by_seed.csv      var(Z | S = s_i) for every training seed i with two or more unlearning seeds
    seed_variance_eval.csv         where the sweep varies the evaluation seed within (training, unlearning) seed
                                   pairs: σ_T², σ_U², σ_E² with their intervals, truncation flags and shares
    wasserstein.csv                W2(A(i), B₋ᵢ) spread over the training seeds i, with the permutation null
    wasserstein_by_seed.csv        W2(A(i), B₋ᵢ) and its null for every training seed i
    rank_stability.csv             how often one training seed's best method differs from the other seeds' best
    rank_stability_by_seed.csv     both rankings' best methods and Kendall's τ for every training seed
    seed_variance.csv              (where the sweep varies the evaluation seed: σ_T², σ_U², σ_E² of the three-stage
                                   split, so that neither of the first two picks up the evaluation seed's variance)
    seed_plan.csv                  the cheapest (I, J, K) reaching `target_se` per method and main metric, at the
                                   components' estimates and at their upper confidence limits (the headline)
    seed_power.csv                 per pair of methods next to each other on a leaderboard (and of `compare`), per
                                   target and leaderboard metric: their paired difference, its test over training
                                   seeds, and the cheapest (I, J) with power 0.8 to detect `min_difference`
    leaderboard.csv                per configuration, each metric of `report.leaderboard.metrics` (by default the
                                   catalogue's declared ones) and their mean rank: every method's mean rank over
                                   the blocks (target, training seed), its bootstrap 95% interval and P(best),
                                   Friedman's p (leaderboard.py)
    leaderboard_pairs.csv          every pair of methods: Wilcoxon signed-rank p, Holm-adjusted, and the verdict
    trials.csv, tuning.csv         of a tuning sweep (`experiment=tune`): every trial; per method and replicate the
                                   best point, its objective on the tuning and on the held-out training seeds, the
                                   defaults' on both, the optimism and the gain with their intervals
                                   (compute/tuning.py); the trial jobs are in no other table
    tuning_replicates.csv          per method, across a tuning's replicates: the spread of the chosen points'
                                   held-out objective, the mean optimism and gain
    forget_quality.csv             per pool of models (A(i), B) and method: the NeurIPS 2023 competition's forgetting
                                   quality F with N, the ε cap and F's permutation null, the final score, LiRA, and
                                   KLOM per split (D_f, D_r, D'_r) with its permutation null
    forget_quality_by_example.csv  ε per forget example, pool and method
    forget_quality_across_seeds.csv  F of the A(i) (mean, std, range) against B's, per method
    curves.csv                     training loss, accuracy and learning rate per epoch of every distinct M_o, M_r
                                   and training method's model (a cached model's curve once)
    dynamics.csv                   where jobs record metrics along the methods' steps (`step` records, issue 58's
                                   `evaluation.during`): per method, metric, split and step the mean over training
                                   seeds (unlearning seeds pooled within a training seed first), its 95% t-interval
                                   across training seeds, I, the epoch, and M_o's and M_r's means as references
                                   (compute/dynamics.py); step records enter no other table
    dynamics_by_seed.csv           the same per training seed (its unlearning seeds' mean)
    dynamics_best.csv              per method and headline metric: the step whose mean is closest to the ideal, and
                                   the spread of each training seed's own best step
    report.md                      the tables in Markdown, warnings, figures, failed jobs and methods
    figures/*.png

What the report knows of each metric (label, best value, gold standards, headline, leaderboard and figure metrics)
is read from the results themselves (`read/catalogue.py`). Every file is written whole or not at all (a temporary
file renamed into place): a crash or a full disk leaves the previous version or none, never a part. A file that
cannot be written stops the build with one `WriteError` line naming it and the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from unlearnbench.report.compute import stats
from unlearnbench.report.compute.analysis import CONFIG, OPTIONAL_CONFIG, Study, analyse
from unlearnbench.report.compute.derived import derived_records
from unlearnbench.report.compute.dynamics import analyse_dynamics
from unlearnbench.report.compute.forget_quality import FORGET_PERMUTATIONS, forget_quality, load_examples
from unlearnbench.report.compute.leaderboard import RESAMPLES, chosen_metrics, leaderboards
from unlearnbench.report.compute.leaderboard import tables as leaderboard_tables
from unlearnbench.report.compute.seed_design import TARGET_SE, check_compare, extend, seed_powers
from unlearnbench.report.compute.tuning import (
    read_tunings,
    replicate_rows,
    trial_rows,
    tuning_rows,
    without_trials,
)
from unlearnbench.report.read.collect import catalogue_of, load_results, mixed_numerics, read_warnings
from unlearnbench.report.read.curves import curve_table
from unlearnbench.runtime.files import atomic_path, make_folder


@dataclass
class Report:
    out: Path
    jobs: list[dict]
    failed: list[dict]
    study: Study
    figures: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns mixing Python types (a target written as 3 by one job and "3" by another) as strings."""
    frame = frame.copy()
    for column in [c for c in frame.columns if pd.api.types.is_object_dtype(frame[c])]:
        kinds = {type(v) for v in frame[column] if v is not None and v == v}
        if len(kinds) > 1:
            frame[column] = frame[column].map(lambda v: v if v is None or v != v else str(v))
    return frame


def write(path: Path, writer: Callable[[Path], object]) -> Path:
    """`writer(temporary path)`, then the file renamed into place; a `WriteError` if it cannot be written."""
    with atomic_path(path) as temporary:
        writer(temporary)
    return path


def build_report(folders: list[Path], out: Path, figures: bool = True,
                 permutations: int = stats.NULL_PERMUTATIONS, target_se: float = TARGET_SE,
                 forget_permutations: int = FORGET_PERMUTATIONS,
                 leaderboard_metrics: Sequence[str] | None = None, resamples: int = RESAMPLES,
                 compare: Sequence[str] | None = None, min_difference: float | None = None,
                 best_step: bool = False) -> Report:
    """Build the report of the `result.json` files under `folders` into `out`; the jobs that did not complete (and
    the files that are not results) are listed in its failed section and returned in `Report.failed`.
    `leaderboard_metrics` (`metric:split` or `metric`): None for the declared leaderboard metrics of the results.
    `compare`: methods whose every pair seed_power.csv plans for, beside each leaderboard's neighbours;
    `min_difference`: the difference those plans detect (None: each pair's observed difference).

    Raises `UserError` (one line) before writing anything when a leaderboard metric has no best value or is not
    recorded, or `compare` names fewer than two ranked methods, and `WriteError` (an `OSError`; its message:
    `cannot write <file>: <reason>`) when a report file cannot be written; no partial or temporary file is left
    behind."""
    from unlearnbench.report.render.markdown import render
    from unlearnbench.report.render.words import text, worded

    frame, jobs = without_trials(*load_results(folders))
    catalogue = catalogue_of(jobs)
    examples = load_examples(jobs, frame)  # a damaged examples.parquet makes its job failed
    failed = [job for job in jobs if job["status"] != "complete"]
    configuration = [c for c in (*CONFIG, *OPTIONAL_CONFIG) if c in frame]
    derived = derived_records(frame, configuration, catalogue)
    ranked_by = chosen_metrics(leaderboard_metrics, catalogue, set(pd.concat([frame, derived])["metric"].dropna()))
    check_compare(None if compare is None else list(compare), frame, catalogue.gold_standards)
    make_folder(out)
    write(out / "results.csv", lambda path: frame.to_csv(path, index=False))
    write(out / "results.parquet", lambda path: _parquet_safe(frame).to_parquet(path, index=False))
    frame = pd.concat([frame, derived], ignore_index=True)
    study = extend(analyse(frame, catalogue, permutations), target_se)
    study.forgetting = forget_quality(jobs, examples, frame, study.keys, forget_permutations,
                                      catalogue.gold_standards)
    study.curves, curve_warnings = curve_table(jobs, study.keys)
    study.leaderboard = leaderboards(study.values, study.keys, ranked_by, catalogue, resamples)
    study.powers = seed_powers(study, None if compare is None else list(compare), min_difference)
    analyse_dynamics(study, jobs, best_step)
    ranked, pairs = leaderboard_tables(study.leaderboard, study.keys)
    for name, table in (("summary", study.summary), ("table", study.table), ("seed_variance", study.variance),
                        ("seed_variance_by_seed", study.variance_by_seed),
                        ("seed_variance_eval", study.variance_eval), ("wasserstein", study.wasserstein),
                        ("wasserstein_by_seed", study.wasserstein_by_seed), ("rank_stability", study.ranks),
                        ("rank_stability_by_seed", study.ranks_by_seed), ("seed_plan", study.plans),
                        ("seed_power", study.powers),
                        ("forget_quality", study.forgetting.quality),
                        ("forget_quality_by_example", study.forgetting.by_example),
                        ("forget_quality_across_seeds", study.forgetting.across), ("curves", study.curves),
                        ("leaderboard", ranked), ("leaderboard_pairs", pairs), ("dynamics", study.dynamics),
                        ("dynamics_by_seed", study.dynamics_by_seed), ("dynamics_best", study.dynamics_best),
                        *([("dynamics_best_own", study.dynamics_best_own)] if best_step else [])):
        write(out / f"{name}.csv", lambda path, table=table: worded(table).to_csv(path, index=False))
    warnings = [*map(text, study.warnings), *read_warnings(jobs), *map(text, study.forgetting.left_out),
                *curve_warnings]
    mixed = mixed_numerics(jobs)
    if mixed:
        warnings.append(mixed)
    if failed:
        warnings.append(f"{len(failed)} of {len(jobs)} jobs did not complete: see \"Failed jobs\"; the statistics "
                        "use the complete jobs only")
    paths: list[Path] = []
    if figures and study.wants_figures:  # (matplotlib is imported only then)
        from unlearnbench.report.render.figures import draw

        paths, problems = draw(study, out / "figures")
        warnings += problems
    tuning = tuning_report(folders, out, figures, warnings)
    text = render(study, jobs, failed, [Path(f) for f in folders], paths, warnings, out, tuning)
    write(out / "report.md", lambda path: path.write_text(text, encoding="utf-8"))
    return Report(out, jobs, failed, study, paths, warnings)


def tuning_report(folders: list[Path], out: Path, figures: bool, warnings: list[str]) -> list[str]:
    """trials.csv, tuning.csv and figures/tuning.png of the tuning sweeps among `folders` (compute/tuning.py); its
    report.md section (none where no folder holds a tuning)."""
    from unlearnbench.report.render.tuning import draw, section
    from unlearnbench.report.render.words import text, worded

    tunings, problems = read_tunings(folders)
    warnings += map(text, problems)
    if not tunings:
        return []
    trials, table = trial_rows(tunings), tuning_rows(tunings)
    replicates = replicate_rows(table)
    write(out / "trials.csv", lambda path: trials.to_csv(path, index=False))
    write(out / "tuning.csv", lambda path: worded(table).to_csv(path, index=False))
    write(out / "tuning_replicates.csv", lambda path: replicates.to_csv(path, index=False))
    figure = draw(trials, table, out / "figures" / "tuning.png") if figures else None
    return section(table, figure.relative_to(out).as_posix() if figure else None, replicates)


def failure_lines(failed: list[dict], total: int) -> list[str]:
    if not failed:
        return []
    lines = [f"{len(failed)} of {total} jobs failed:"] if total > 1 else []
    return lines + [f"FAILED {Path(job['folder']).name}: {job['error']}" for job in failed]


def method_failure_lines(failures: list[dict]) -> list[str]:
    return [f"FAILED {Path(f['folder']).name}: target {f['target']}, method {f['method']}: "
            f"{str(f['error']).splitlines()[0] if f['error'] else ''}" for f in failures]
