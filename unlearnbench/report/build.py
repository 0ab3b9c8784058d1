"""`unlearnbench-report DIR…` and the end-of-sweep callback share this: collect, analyse, write `DIR/report/`.

    results.parquet, results.csv   every record of every job (tidy), the job's fields and status as columns
    summary.csv                    mean, std, n per configuration × target × role × method × metric × split (× round)
    table.csv                      mean ± std across training seeds (per-seed means first), the report's tables
    seed_variance.csv              σ_T², σ_U² with intervals, ICC, I, J per row of the study
    wasserstein.csv                W2(A(i), B) spread over the training seeds i, with the permutation null
    wasserstein_by_seed.csv        W2(A(i), B) and its null for every training seed i
    report.md                      the tables in Markdown, warnings, figures, failed jobs
    figures/*.png
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from unlearnbench.report import stats
from unlearnbench.report.analysis import Study, analyse
from unlearnbench.report.collect import load_results, mixed_numerics


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


def build_report(folders: list[Path], out: Path, figures: bool = True,
                 permutations: int = stats.NULL_PERMUTATIONS) -> Report:
    """Build the report of the `result.json` files under `folders` into `out`; the jobs that did not complete are
    listed in its failed section and returned in `Report.failed`."""
    from unlearnbench.report.markdown import render

    frame, jobs = load_results(folders)
    failed = [job for job in jobs if job["status"] != "complete"]
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "results.csv", index=False)
    _parquet_safe(frame).to_parquet(out / "results.parquet", index=False)
    study = analyse(frame, permutations)
    study.summary.to_csv(out / "summary.csv", index=False)
    study.table.to_csv(out / "table.csv", index=False)
    study.variance.to_csv(out / "seed_variance.csv", index=False)
    study.wasserstein.to_csv(out / "wasserstein.csv", index=False)
    study.wasserstein_by_seed.to_csv(out / "wasserstein_by_seed.csv", index=False)
    warnings = list(study.warnings)
    mixed = mixed_numerics(jobs)
    if mixed:
        warnings.append(mixed)
    if failed:
        warnings.append(f"{len(failed)} of {len(jobs)} jobs did not complete: see \"Failed jobs\"; the statistics "
                        "use the complete jobs only")
    paths: list[Path] = []
    if figures and study.wants_figures:  # (matplotlib is imported only then)
        from unlearnbench.report.figures import draw

        paths, problems = draw(study, out / "figures")
        warnings += problems
    text = render(study, jobs, failed, [Path(f) for f in folders], paths, warnings, out)
    (out / "report.md").write_text(text)
    return Report(out, jobs, failed, study, paths, warnings)


def failure_lines(failed: list[dict], total: int) -> list[str]:
    if not failed:
        return []
    lines = [f"{len(failed)} of {total} jobs failed:"] if total > 1 else []
    return lines + [f"FAILED {Path(job['folder']).name}: {job['error']}" for job in failed]
