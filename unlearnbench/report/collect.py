"""Read every `result.json` under sweep folders into one tidy table (pandas; no torch)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)
RECORD_COLUMNS = ["target", "method", "role", "metric", "split", "value", "round"]


def result_files(folders: list[Path]) -> list[Path]:
    return sorted({p for folder in folders for p in Path(folder).rglob("result.json")})


def load_results(folders: list[Path]) -> tuple[pd.DataFrame, list[dict]]:
    """(records of every job, one row each, with the job's fields as columns; the jobs as dicts with their folder
    and status). Unreadable files count as failed jobs."""
    rows, jobs = [], []
    for path in result_files(folders):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            jobs.append({"folder": str(path.parent), "status": "unreadable", "error": str(error)})
            continue
        job = {"folder": str(path.parent), "status": result.get("status"), "error": result.get("error"),
               **result.get("job", {})}
        jobs.append(job)
        for record in result.get("records", []):
            rows.append({**{k: v for k, v in job.items() if k not in ("status", "error")}, **record})
    frame = pd.DataFrame(rows)
    for column in RECORD_COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame, jobs
