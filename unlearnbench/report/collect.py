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
    `method` field, `all` when it ran every method, as `job_method`), `folder`, `status`, `numerics` (the id of
    the machine's numerics identity, see `mixed_numerics`), then the record's
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
        numerics = result.get("numerics") if isinstance(result.get("numerics"), dict) else {}
        job = {"folder": str(path.parent), "status": result.get("status"), "error": result.get("error"), **fields,
               "numerics": numerics.get("id")}
        jobs.append({**job, "numerics_identity": numerics})
        columns = {k: v for k, v in job.items() if k != "error"}
        for record in result.get("records") or []:
            rows.append({**columns, **record})
    frame = pd.DataFrame(rows)
    for column in RECORD_COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame, jobs


def mixed_numerics(jobs: list[dict]) -> str | None:
    """A warning when the complete jobs ran under more than one numerics identity (CPU or GPU model, thread count,
    library versions, …): their models follow different float trajectories, so seed statistics over them mix
    machines with seeds. None when all agree (jobs from before identities were recorded are not counted)."""
    identities: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for job in jobs:
        identity = job.get("numerics_identity") or {}
        if job.get("status") == "complete" and identity.get("id"):
            identities[identity["id"]] = identity
            counts[identity["id"]] = counts.get(identity["id"], 0) + 1
    if len(identities) < 2:
        return None
    keys = sorted({k for identity in identities.values() for k in identity if k != "id"})
    differing = [k for k in keys if len({json.dumps(i.get(k), sort_keys=True) for i in identities.values()}) > 1]
    described = "; ".join(
        f"{counts[ident]} job(s) with " + ", ".join(f"{k}={_short(identity.get(k))}" for k in differing)
        for ident, identity in sorted(identities.items(), key=lambda item: -counts[item[0]]))
    return (f"the jobs ran under {len(identities)} different numerics identities ({described}): another CPU or GPU "
            f"model, thread count or library version trains other models, so these statistics mix machines with "
            f"seeds; rerun on one kind of machine with one runtime.threads, or report each group separately")


def describe_numerics(identity: dict | None) -> str:
    """One line naming the machine and set-up behind a result, e.g. `AMD EPYC (AVX2), 2 threads, torch 2.14.1`."""
    if not identity:
        return "unknown machine (the result predates numerics identities)"
    if identity.get("device") == "cuda":
        machine = f"{identity.get('gpu')} (sm {identity.get('capability')}, CUDA {identity.get('cuda')})"
    elif identity.get("device") == "cpu":
        machine = f"{identity.get('cpu')} ({identity.get('cpu_capability')}), {identity.get('threads')} threads"
    else:
        machine = f"{identity.get('device')} on {identity.get('machine')}"
    world = identity.get("world_size") or 1
    ranks = f" × {world} ranks ({identity.get('strategy')})" if world > 1 else ""
    return f"{machine}{ranks}, torch {identity.get('torch')}, precision {identity.get('precision')}"


def _short(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
