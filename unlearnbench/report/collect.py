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
    and status). Unreadable files count as failed jobs.

    Columns: the job's fields (`task`, `dataset`, …, `seed_train`, `seed_unlearn`, `seed_eval`, …; the job's own
    `method` field, `all` when it ran every method, as `job_method`), `folder`, `status`, then the record's
    `target`, `method` (null for the original and retrained models), `role`, `metric`, `split`, `value`, `round`.
    """
    rows, jobs = [], []
    for path in result_files(folders):
        try:
            result = json.loads(path.read_text())
            if not isinstance(result, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as error:
            jobs.append({"folder": str(path.parent), "status": "unreadable", "error": f"{path.name}: {error}"})
            continue
        fields = dict(result.get("job") or {})
        if "method" in fields:
            fields["job_method"] = fields.pop("method")
        job = {"folder": str(path.parent), "status": result.get("status"), "error": result.get("error"), **fields}
        jobs.append(job)
        columns = {k: v for k, v in job.items() if k != "error"}
        for record in result.get("records") or []:
            rows.append({**columns, **record})
    frame = pd.DataFrame(rows)
    for column in RECORD_COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame, jobs
