"""A job's `result.json`: one schema, its writer (`result_document`, `publish`) and its reader (`read_result`)."""

from __future__ import annotations

import json
import math
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from unlearnbench import __version__
from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.files import EXAMPLES, WriteError, remove_file, write_atomically
from unlearnbench.core.outcome import Examples, Outcome

SCHEMA = 2  # 2: the `catalogue` of the recorded metrics' declarations (core/catalogue.py)


def job_fields(cfg: DictConfig) -> dict:
    """The job's identity in `result.json` (whatever of it resolves: a job with a broken config still reports)."""
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
    stage = OmegaConf.select(cfg, "tune.stage", default=None)
    replicate = OmegaConf.select(cfg, "tune.replicate", default=None)
    return ({} if stage is None else {"tuning": stage}) | ({} if replicate is None else {"tuning_replicate": replicate})


def versions() -> dict:
    import lightning_fabric

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


def read_result(path: Path) -> dict | None:
    """The result at `path`, or None where there is none (or none readable: the job is then run again)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def finished(path: Path) -> bool:
    return (read_result(path) or {}).get("status") == "complete"


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
        raise SystemExit(f"unlearnbench: {what}; the sweep stops (finished jobs are kept: rerun the same command to "
                         f"resume)") from None


def recorded_catalogue(outcome: Outcome) -> dict:
    """The declarations of the metrics the job recorded (result.json's `catalogue`)."""
    declared = Catalogue.from_dict(outcome.catalogue)
    return declared.holding(record["metric"] for record in outcome.records).as_dict()
