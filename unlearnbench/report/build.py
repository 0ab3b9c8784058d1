"""`unlearnbench-report DIR…` and the end-of-sweep callback share this: collect, write `DIR/report/`, summarise."""

from __future__ import annotations

from pathlib import Path

from unlearnbench.report.collect import load_results


def build_report(folders: list[Path], out: Path) -> list[dict]:
    """Write `results.csv` and `results.parquet` under `out`; return the jobs that did not complete."""
    frame, jobs = load_results(folders)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "results.csv", index=False)
    frame.to_parquet(out / "results.parquet", index=False)
    return [job for job in jobs if job["status"] != "complete"]


def failure_lines(failed: list[dict], total: int) -> list[str]:
    if not failed:
        return []
    lines = [f"{len(failed)} of {total} jobs failed:"] if total > 1 else []
    return lines + [f"FAILED {Path(job['folder']).name}: {job['error']}" for job in failed]
