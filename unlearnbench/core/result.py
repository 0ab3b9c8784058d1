"""A job's `result.json`: one schema, its writer (`result_document`, `publish`) and its one reader (`read_result`,
and `stored_result` where a missing or damaged file means "run the job again"), and the reader of the per-example
outputs beside it (`read_examples`). The report, resume, SLURM's record of a killed job, the tuning's objective and
the importers all read them here, so one set of checks decides what a result is. This module imports no torch,
Fabric, OmegaConf or pandas at import time: the report imports it.
"""

from __future__ import annotations

import json
import math
import platform
import re
import reprlib
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from unlearnbench import __version__
from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.files import EXAMPLES, RESULT, SchemaError
from unlearnbench.runtime.errors import EndSweep
from unlearnbench.runtime.files import WriteError, remove_file, write_atomically

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from unlearnbench.core.outcome import Examples, Outcome

SCHEMA = 2  # 2: the `catalogue` of the recorded metrics' declarations (core/catalogue.py)
STATUSES = ("complete", "failed")
ROLES = ("original", "retrained", "unlearned")
MAX_RESULT_BYTES = 256 * 2**20  # a real result holds a few MiB: a larger file is refused without reading it
INT64 = 2**63  # seeds, rounds and numbers in job fields must fit the int64 columns of the report's tables
SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # a surrogate escape: lone ones cannot be written to any file
EXAMPLE_KINDS = {"target": "string", "role": "string", "method": "string", "split": "string", "index": "integer",
                 "label": "integer", "conf": "float", "loss": "float", "pred": "integer"}  # examples.parquet's columns


def job_fields(cfg: DictConfig) -> dict:
    """The job's identity in `result.json` (whatever of it resolves: a job with a broken config still reports)."""
    from omegaconf import OmegaConf

    try:
        return _job_fields(cfg)
    except Exception as error:
        return {"task": OmegaConf.select(cfg, "task.name", default=None), "config_error": str(error).splitlines()[0]}


def _job_fields(cfg: DictConfig) -> dict:
    return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name,
            "scenario": cfg.scenario.name, "method": cfg.method.name if cfg.method is not None else "all",
            "seed_train": cfg.seeds.train, "seed_unlearn": cfg.seeds.unlearn, "seed_eval": cfg.seeds.eval,
            "seed_forget": cfg.seeds.forget,
            "strategy": cfg.strategy.name, "precision": cfg.precision.name,
            "devices": cfg.strategy.devices * cfg.strategy.num_nodes, **tuning_field(cfg)}


def tuning_field(cfg: DictConfig) -> dict:
    """A tuning job's stage (`tune.stage`: trial, tuned or default; core/tuning.py) and, in a tuning of several
    replicates, the replicate whose trial or best point it runs (`tune.replicate`): job fields the report reads."""
    from omegaconf import OmegaConf

    stage = OmegaConf.select(cfg, "tune.stage", default=None)
    replicate = OmegaConf.select(cfg, "tune.replicate", default=None)
    return ({} if stage is None else {"tuning": stage}) | ({} if replicate is None else {"tuning_replicate": replicate})


def versions() -> dict:
    import lightning_fabric
    import torch

    return {"unlearnbench": __version__, "torch": torch.__version__, "lightning": lightning_fabric.__version__,
            "python": platform.python_version()}


def finite(value: float | None) -> float | None:
    """NaN (a metric of an empty split or a diverged model) and ±inf become None: strict JSON holds neither."""
    return None if value is None or not math.isfinite(value) else value


def json_safe(value):
    """`value` with every non-finite float (NaN, ±inf) as None: strict JSON has no such numbers, and a metric that
    overflowed is not a measurement."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def write_json(path: Path, content: dict) -> None:
    write_atomically(path, json.dumps(json_safe(content), indent=1, allow_nan=False))


def read_result(where: Path) -> dict:
    """The checked result of a job, given its folder or its result.json. An `OSError` where the file cannot be read
    (none there: the job has not finished), a `ValueError` with a one-line reason where it is not a result: not JSON
    (a file cut short), or a `SchemaError` for valid JSON of the wrong shape or of a schema this version does not
    know. Oversized files are refused unread, and nesting deeper than the parser's recursion limit is a reason, not
    a crash. Results of schema 1 (no `catalogue`; no `schema` field at all is schema 1) are read as they are: the
    report reads them with its legacy catalogue."""
    where = Path(where)
    path = where / RESULT if where.name != RESULT and where.is_dir() else where
    size = path.stat().st_size
    if size > MAX_RESULT_BYTES:
        raise SchemaError(f"{size / 2**20:.0f} MiB, larger than a result can be (at most {MAX_RESULT_BYTES // 2**20} "
                          "MiB): not read")
    try:
        raw = path.read_bytes()
        result = json.loads(raw)
        if SURROGATE.search(raw):
            json.dumps(result, ensure_ascii=False).encode()
    except RecursionError:
        raise SchemaError("nested too deeply to be a result") from None
    except MemoryError:
        raise SchemaError("too large to read into memory") from None
    except UnicodeEncodeError:
        raise SchemaError("holds text with a lone surrogate (an invalid \\ud800-\\udfff escape)") from None
    check_result(result)
    return result


def stored_result(where: Path) -> dict | None:
    """The checked result of a job (its folder or its result.json), or None where there is none or it is not a
    valid result: the job then counts as not run (resume runs it again, SLURM's launcher records a killed job)."""
    try:
        return read_result(where)
    except (OSError, ValueError):
        return None


def finished(where: Path) -> bool:
    """Whether the job's result (its folder or its result.json) is valid and complete: resume skips the job."""
    return (stored_result(where) or {}).get("status") == "complete"


def read_examples(where: Path, columns: list[str] | None = None):
    """A job's `examples.parquet` (given its folder or the file) as a pandas frame, of `columns` alone where given,
    checked against the contract: each of its columns present with its kind (`EXAMPLE_KINDS`), known roles, a
    method on the unlearned rows alone, no negative index. An `OSError` where the file cannot be read, a
    `SchemaError` with a one-line reason where it is not an examples table. Which splits a task writes, and what
    their values must be, are its declarations' (the report checks them)."""
    import pandas as pd

    where = Path(where)
    path = where / EXAMPLES if where.name != EXAMPLES and where.is_dir() else where
    try:
        frame = pd.read_parquet(path, columns=columns)
    except OSError:
        raise
    except Exception as error:  # pyarrow's own errors for a damaged file (or a column it does not hold)
        raise SchemaError(f"not a readable Parquet file ({type(error).__name__}: {str(error).splitlines()[0]})") \
            from None
    for column, kind in EXAMPLE_KINDS.items():
        if columns is not None and column not in columns:
            continue
        if column not in frame:
            raise SchemaError(f"no column {column!r}")
        series = frame[column]
        fits = {"string": pd.api.types.is_string_dtype(series) or pd.api.types.is_object_dtype(series),
                "integer": pd.api.types.is_integer_dtype(series),
                "float": pd.api.types.is_float_dtype(series)}[kind]
        if not fits:
            raise SchemaError(f"column {column!r} is {series.dtype}, not {kind}")
    if "role" in frame:
        bad_role = ~frame["role"].isin(ROLES)
        if bad_role.any():
            raise SchemaError(f"role {frame['role'][bad_role].iloc[0]!r} is not one of {', '.join(ROLES)}")
    if "method" in frame and "role" in frame and (frame["method"].isna() != (frame["role"] != "unlearned")).any():
        raise SchemaError("a method on an original or retrained row, or none on an unlearned one")
    if "index" in frame and (frame["index"] < 0).any():
        raise SchemaError("a negative example index")
    return frame


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _scalar(value) -> bool:
    return value is None or isinstance(value, (str, bool, float)) or _int(value)


def _flat(value) -> bool:
    """A scalar, or a list or object of scalars (the fields of a numerics identity)."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    return all(_scalar(item) for item in items)


def _require(ok: bool, where: str, value, expected: str) -> None:
    if not ok:
        raise SchemaError(f"{where}: {reprlib.repr(value)} is not {expected}")


# (key, test, what it must be); `round` alone may be absent. A point of the dynamics (`evaluation.during`) adds
# `step` and `epoch`, checked record by record where they are read (report/read/collect.py): a bad one drops its
# record with a warning, not the whole result.
RECORD_SCHEMA = [
    ("metric", lambda v: isinstance(v, str), "a string"),
    ("role", lambda v: v in ROLES, "one of " + ", ".join(ROLES)),
    ("target", lambda v: isinstance(v, str) or _int(v), "a string or an integer"),
    ("method", lambda v: v is None or isinstance(v, str), "a string or null"),
    ("split", lambda v: v is None or isinstance(v, str), "a string or null"),
    ("value", lambda v: v is None or _number(v), "a number or null"),
    ("round", lambda v: v is None or _int(v), "an integer or null"),
]


def check_result(result) -> None:
    """Raise a `SchemaError` naming the first field of `result` (parsed JSON) that a result cannot hold: the
    reporter's tables and statistics rely on these types (seeds as int64, a known role, a number or null as value),
    and a schema newer than this version's may mean something else by them."""
    _require(isinstance(result, dict), "the file", result, "a JSON object")
    schema = result.get("schema", 1)  # a file from before the field: the first schema
    _require(_int(schema) and 1 <= schema <= SCHEMA, "schema", schema, f"one this version reads (1 to {SCHEMA})")
    _require(result.get("status") in STATUSES, "status", result.get("status"), " or ".join(STATUSES))
    check_job(result.get("job"), complete=result["status"] == "complete")
    records = result.get("records")
    _require(records is None or isinstance(records, list), "records", records, "a list")
    for k, record in enumerate(records or []):
        check_record(record, f"records[{k}]")
    check_numerics(result.get("numerics"))


def check_job(job, complete: bool) -> None:
    """The job's fields: scalars, seeds as integers. A failed job may lack its seeds (a config that did not resolve):
    its error is what the report shows, and its records never enter the statistics."""
    _require(isinstance(job, dict), "job", job, "an object")
    if complete:
        _require(_int(job.get("seed_train")), "job.seed_train", job.get("seed_train"), "an integer")
    for key in ("seed_train", "seed_unlearn", "seed_eval", "seed_forget"):
        _require(job.get(key) is None or _int(job[key]), f"job.{key}", job.get(key), "an integer or null")
    for key, value in job.items():
        _require(_scalar(value), f"job.{key}", value, "a string, number, boolean or null")


def check_record(record, where: str) -> None:
    _require(isinstance(record, dict), where, record, "an object")
    for key, test, expected in RECORD_SCHEMA:
        if key not in record and key != "round":
            raise SchemaError(f"{where}: no {key!r}")
        _require(test(record.get(key)), f"{where}.{key}", record.get(key), expected)


def check_numerics(numerics) -> None:
    if numerics is None:
        return
    _require(isinstance(numerics, dict), "numerics", numerics, "an object or null")
    for key, value in numerics.items():
        _require(_flat(value), f"numerics.{key}", value, "a value, or a list or object of values")
    _require(numerics.get("id") is None or isinstance(numerics["id"], str), "numerics.id", numerics.get("id"),
             "a string")
    _require(numerics.get("world_size") is None or _int(numerics["world_size"]), "numerics.world_size",
             numerics.get("world_size"), "an integer")


def check_failures(failures) -> None:
    """The optional `failures` list: one {target, method, error} per method that failed or diverged in a job whose
    other methods completed. Not part of `check_result`: a malformed list costs the report only the list."""
    _require(isinstance(failures, list), "failures", failures, "a list")
    for k, failure in enumerate(failures):
        where = f"failures[{k}]"
        _require(isinstance(failure, dict), where, failure, "an object")
        _require(isinstance(failure.get("target"), str) or _int(failure.get("target")), f"{where}.target",
                 failure.get("target"), "a string")
        _require(failure.get("method") is None or isinstance(failure["method"], str), f"{where}.method",
                 failure.get("method"), "a string or null")
        _require(isinstance(failure.get("error"), str), f"{where}.error", failure.get("error"), "a string")


def result_document(cfg: DictConfig, outcome: Outcome, started: str | None) -> dict:
    """`result.json`'s content: the job's identity and what its outcome holds."""
    return document(job_fields(cfg), outcome, started)


def document(job: dict, outcome: Outcome, started: str | None) -> dict:
    """`result.json`'s content for the job fields `job` (a job of this tool's, or a run another tool made)."""
    status, error = outcome.status
    return {"schema": SCHEMA, "status": status, "error": error,
            "job": job, "versions": versions(), "numerics": outcome.numerics,
            **({"dataset": outcome.dataset} if outcome.dataset else {}), "started": started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cache": outcome.cache, "timings": outcome.timings, "failures": outcome.failures,
            "curves": outcome.curves, "records": outcome.records,
            "catalogue": recorded_catalogue(outcome)}


def failed_result(cfg: DictConfig, error: str) -> dict:
    """The result of a job that ended without reporting (e.g. one SLURM killed), written for it by the launcher."""
    from unlearnbench.core.outcome import Outcome

    return result_document(cfg, Outcome(error=error), started=None)


def publish(path: Path, result: dict, examples: Examples | None = None) -> None:
    """Write `result.json` whole or not at all, after the job's `examples.parquet` beside it (so that a complete
    result always has its examples; a stale file of an earlier run is removed). Where they cannot be written (a full
    disk, a read-only folder) the sweep cannot record anything more: stop it with one line, leaving every file
    already written intact."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        examples_path = path.with_name(EXAMPLES)
        if examples is not None and len(examples):
            examples.write(examples_path)
        else:
            remove_file(examples_path)
        write_json(path, result)
    except OSError as error:
        what = str(error) if isinstance(error, WriteError) else f"cannot write {path}: {error.strerror or error}"
        raise EndSweep(f"{what}; the sweep stops (finished jobs are kept: rerun the same command to resume)") from None


def recorded_catalogue(outcome: Outcome) -> dict:
    """The declarations of the metrics the job recorded (result.json's `catalogue`)."""
    declared = Catalogue.from_dict(outcome.catalogue)
    return declared.holding(record["metric"] for record in outcome.records).as_dict()
