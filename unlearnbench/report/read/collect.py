"""Read every `result.json` under sweep folders into one tidy table (pandas; no torch).

Whatever a file holds, the report is built: a file that cannot be read, is not JSON, is larger than any result or
does not have the shape of a result (the contract's one reader decides: `core.result.read_result`), or has a job
field named as one of the report's own columns, counts as a failed job, listed with a one-line reason naming the
file and the problem; a damaged metric catalogue costs only its declarations (`catalogue.py`). Non-finite values
(JSON `Infinity`, `NaN`) are treated as missing, and counted for a warning, so that one diverged run cannot turn
every mean into inf.

A record with a `step` (an evaluation along a method's unlearning, issue 58's `evaluation.during`) is no final
record: it never enters the frame, so no statistic of the final models sees it. Its job dict keeps it (`steps`), for
`compute/dynamics.py` alone.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.files import RESULT, TRACKER_STORES
from unlearnbench.core.result import INT64, SchemaError, check_failures, read_result
from unlearnbench.report.read.catalogue import disagreement_warning, merged, result_catalogue, result_legacy

log = logging.getLogger(__name__)
RECORD_COLUMNS = ["target", "method", "role", "metric", "split", "value", "round"]
# Columns the collector sets itself: a job field of one of these names would overwrite them.
COST_COLUMNS = ["cost_original_s", "cost_retrained_s"]  # training time of M_o, and of the row's target's M_r
RESERVED = {"folder", "status", "error", "numerics", "job_method", *RECORD_COLUMNS, *COST_COLUMNS} - {"method"}
SHOWN = 5  # jobs (and metrics per job) a warning names before "… more"


def check_columns(job: dict) -> None:
    """A `SchemaError` where a job field bears the name of a column the report sets itself (it would overwrite it)."""
    for key in job:
        if key in RESERVED:
            raise SchemaError(f"job.{key}: a name the reporter keeps for its own column, not a job field")


def failed_methods(jobs: list[dict]) -> list[dict]:
    """The methods that failed or diverged inside jobs that completed otherwise, one dict each (folder, target,
    method, error); a failed job's own failures are already told by its error."""
    return [{"folder": job["folder"], **failure} for job in jobs if job.get("status") == "complete"
            for failure in job.get("failures") or []]


def result_files(folders: list[Path]) -> list[Path]:
    """Every job's result file under `folders`, leaving out the copies in trackers' stores (`TRACKER_STORES`)."""
    return sorted({path for folder in folders for path in Path(folder).rglob(RESULT)
                   if TRACKER_STORES.isdisjoint(path.relative_to(folder).parts[:-1])})


def load_results(folders: list[Path]) -> tuple[pd.DataFrame, list[dict]]:
    """(records of every job, one row each, with the job's fields as columns; the jobs as dicts with their folder
    and status). Files that cannot be read (status `unreadable`) or do not hold a result (`invalid`) count as failed
    jobs, with the reason as their error.

    Columns: the job's fields (`task`, `dataset`, …, `seed_train`, `seed_unlearn`, `seed_eval`, …; the job's own
    `method` field, `all` when it ran every method, as `job_method`), `folder`, `status`, `numerics` (the id of
    the machine's numerics identity, see `mixed_numerics`), then the record's
    `target`, `method` (null for the original and retrained models), `role`, `metric`, `split`, `value` (null where
    the file holds a non-finite number), `round`, and the job's training times `cost_original_s` (M_o) and
    `cost_retrained_s` (the record's target's M_r), for the seed plan. Other keys of a record are ignored.

    Besides its fields, a job dict holds `numerics_identity`, `catalogue` (the declarations of its metrics, see
    `catalogue_of`), and where they apply `non_finite` ({metric: count} of the values treated as missing),
    `damaged_catalogue` (why its own catalogue was not read), `failures` (its methods that failed, from the file's
    `failures` list), `problems` (parts of the file that were ignored; see `read_warnings`), `curves` (the file's
    training curves as written, checked only by `curves.curve_table`: a malformed curve costs no job) and `steps`
    (its records with a `step`, as rows like the frame's with `step` and `epoch`: `step_record`).
    """
    rows, jobs = [], []
    for path in result_files(folders):
        folder = printable(path.parent)
        try:
            result = read_result(path)
            check_columns(result["job"])
        except (OSError, ValueError) as error:
            status = "invalid" if isinstance(error, SchemaError) else "unreadable"
            jobs.append({"folder": folder, "status": status, "error": f"{path.name}: {error}"})
            continue
        job, records = job_rows(result, folder)
        jobs.append({**job, **declarations(result)})
        rows += records
    frame = pd.DataFrame(rows)
    for column in [*RECORD_COLUMNS, *COST_COLUMNS]:
        if column not in frame:
            frame[column] = None
    return frame, jobs


def declarations(result: dict) -> dict:
    """{"catalogue": the result's metric declarations}, with {"damaged_catalogue": why} where its own could not be
    read and its task's legacy catalogue stands in."""
    try:
        return {"catalogue": result_catalogue(result)}
    except ValueError as error:
        return {"catalogue": result_legacy(result), "damaged_catalogue": str(error)}


def catalogue_of(jobs: list[dict]) -> Catalogue:
    """The declarations of every metric the readable results hold, merged in folder order."""
    return merged(job["catalogue"] for job in jobs if "catalogue" in job)


def printable(path: Path) -> str:
    """The path as text every report file can hold (a folder name of undecodable bytes is shown escaped)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def job_rows(result: dict, folder: str) -> tuple[dict, list[dict]]:
    """(the job dict, its records as rows) of a checked result."""
    fields = dict(result["job"])
    if "method" in fields:
        fields["job_method"] = fields.pop("method")
    numerics = result.get("numerics") or {}
    job = {"folder": folder, "status": result["status"], "error": result.get("error"), **fields,
           "numerics": numerics.get("id")}
    columns = {k: v for k, v in job.items() if k != "error"}
    original_s, retrained_s = training_times(result.get("cache"))
    rows, non_finite, steps, problems = [], {}, [], []
    for index, record in enumerate(result.get("records") or []):
        if record.get("step") is not None:
            step, problem = step_record(record, columns, f"records[{index}]")
            steps += [step] if step else []
            problems += [problem] if problem else []
            continue
        row = {**columns, **{k: v for k, v in record.items() if k in RECORD_COLUMNS}}
        row["cost_original_s"], row["cost_retrained_s"] = original_s, retrained_s.get(str(record.get("target")))
        row["value"] = finite(record["value"])
        if row["value"] is None and record["value"] is not None:
            non_finite[record["metric"]] = non_finite.get(record["metric"], 0) + 1
        rows.append(row)
    job = {**job, "numerics_identity": numerics, **({"non_finite": non_finite} if non_finite else {}),
           **({"curves": result["curves"]} if result.get("curves") is not None else {}),
           **({"steps": steps} if steps else {})}
    job = {**job, **failures_of(result)}
    if problems:
        job["problems"] = [*job.get("problems", []), *problems]
    return job, rows


def step_record(record: dict, columns: dict, where: str) -> tuple[dict | None, str | None]:
    """(the row of a record with a `step`: the job's columns, the record's, its `step` (an integer ≥ 0, 0 being M_o
    before any step) and `epoch` (a number, None where missing), or None; why it is ignored, or None)."""
    step, epoch = record["step"], record.get("epoch")
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step < INT64):
        return None, f"{where}.step: {str(step)[:40]!r} is not an integer ≥ 0; the record is ignored"
    row = {**columns, **{k: v for k, v in record.items() if k in RECORD_COLUMNS}, "value": finite(record["value"]),
           "step": step}
    number = isinstance(epoch, int | float) and not isinstance(epoch, bool)
    return {**row, "epoch": finite(epoch) if number else None}, None


def training_times(cache) -> tuple[float | None, dict[str, float | None]]:
    """(seconds to train M_o, {target: seconds to train its M_r}) from a result's `cache` section, as recorded when
    the model was first trained (a cache hit keeps them); None where missing or malformed (the seed plan then has no
    cost)."""
    if not isinstance(cache, dict):
        return None, {}
    def seconds(entry) -> float | None:
        value = entry.get("train_s") if isinstance(entry, dict) else None
        return finite(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    retrained = cache.get("retrained")
    entries = retrained if isinstance(retrained, list) else []
    return seconds(cache.get("original")), {str(entry.get("target")): seconds(entry) for entry in entries
                                            if isinstance(entry, dict)}


def finite(value: float | None) -> float | None:
    """The value as a float, None where it is missing or not finite (inf, nan, or an integer beyond float range)."""
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def failures_of(result: dict) -> dict:
    """{"failures": the file's failed methods} or, where the list is malformed, {"problems": [why it is ignored]}."""
    failures = result.get("failures")
    if failures is None:
        return {}
    try:
        check_failures(failures)
    except SchemaError as error:
        return {"problems": [f"{error}"]}
    return {"failures": [{"target": f["target"], "method": f.get("method"), "error": f["error"]} for f in failures]}


def read_warnings(jobs: list[dict]) -> list[str]:
    """The report's warnings about what the files held: non-finite values, failed methods, ignored parts, damaged
    metric catalogues."""
    return [w for w in (non_finite_warning(jobs), failures_warning(jobs), problems_warning(jobs),
                        catalogue_warning(jobs),
                        disagreement_warning(job["catalogue"] for job in jobs if "catalogue" in job)) if w]


def _listed(items: list[str], unit: str) -> str:
    more = f"; … {len(items) - SHOWN} more {unit}" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def non_finite_warning(jobs: list[dict]) -> str | None:
    found = [(Path(job["folder"]).name, job["non_finite"]) for job in jobs if job.get("non_finite")]
    if not found:
        return None
    total = sum(sum(counts.values()) for _, counts in found)
    described = [f"{name} ({', '.join(f'{m} ×{n}' if n > 1 else m for m, n in list(counts.items())[:SHOWN])}"
                 f"{', …' if len(counts) > SHOWN else ''})" for name, counts in found]
    return (f"{total} non-finite value{'s' if total > 1 else ''} (Infinity or NaN) in {len(found)} job"
            f"{'s' if len(found) > 1 else ''} treated as missing (left out of every statistic): "
            f"{_listed(described, 'jobs')}")


def failures_warning(jobs: list[dict]) -> str | None:
    count = sum(len(job.get("failures") or []) for job in jobs)
    if not count:
        return None
    return (f"{count} method run{'s' if count > 1 else ''} failed or diverged in jobs whose other methods completed: "
            "see \"Failed methods\"; the statistics hold only what finished")


def problems_warning(jobs: list[dict]) -> str | None:
    found = [f"{Path(job['folder']).name}: {problem}" for job in jobs for problem in job.get("problems") or []]
    if not found:
        return None
    return f"ignored malformed parts of {len(found)} result file(s): {_listed(found, 'files')}"


def catalogue_warning(jobs: list[dict]) -> str | None:
    found = [f"{Path(job['folder']).name}/{RESULT} ({job['damaged_catalogue']})" for job in jobs
             if job.get("damaged_catalogue")]
    if not found:
        return None
    return (f"damaged metric catalogue in {len(found)} result file{'s' if len(found) > 1 else ''}, read with the "
            f"legacy catalogue instead: {_listed(found, 'files')}")


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
        threads = identity.get("threads")
        plural = "" if threads == 1 else "s"
        machine = f"{identity.get('cpu')} ({identity.get('cpu_capability')}), {threads} thread{plural}"
    else:
        machine = f"{identity.get('device')} on {identity.get('machine')}"
    world = identity.get("world_size") or 1
    ranks = f" × {world} ranks ({identity.get('strategy')})" if world > 1 else ""
    return f"{machine}{ranks}, torch {identity.get('torch')}, precision {identity.get('precision')}"


def _short(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
