"""What a job logs to every tracker, read from its result document (`result.json`'s content, as
`unlearnbench.core.job.run_job` returns it) and its resolved config: `job_log`.

The names are the trackers' metric keys: a training curve's point `curve/<model>[/<method>][/<target>]/<name>` at
its epoch, a dynamics point `during/<method>[/<target>]/<metric>[/<split>]` at its step, a final record
`<role>/<method or role>[/<target>]/<metric>[/<split>]` at step 0 (at its round where it has one). The target is
named only where the job has more than one. Every segment keeps only the characters MLflow, W&B and TensorBoard all
accept (letters, digits, `_ . -` and spaces), so one name means the same series in each of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from unlearnbench.core.files import RESULT
from unlearnbench.track.tracker import JobLog, Point

LEFT_OUT = ("hydra", "logger")  # Hydra's own settings, and the trackers' options (a tracking URI may hold a password)
CURVE_FIELDS = ("model", "target", "method", "seed", "cached", "epoch")  # a curve's identity; the rest are series
TAGGED = ("task", "dataset", "model", "scenario", "method", "seed_train", "seed_unlearn", "seed_eval", "seed_forget",
          "strategy", "precision", "devices", "tuning", "tuning_replicate")  # result["job"]'s fields worth a filter
UNSAFE = re.compile(r"[^\w.\- ]")


def segment(part: object) -> str:
    """One part of a metric key, with every character outside MLflow's accepted set as `_` (`ndcg@10` →
    `ndcg_10`), and no part that a path would read as `.` or `..` (MLflow refuses those)."""
    text = UNSAFE.sub("_", str(part))
    return "_" if text in ("", ".", "..") else text


def key(*parts: object) -> str:
    """A metric key from its parts, those that are None left out."""
    return "/".join(segment(part) for part in parts if part is not None)


def text(value: Any) -> str:
    """A param's value as text: strings as they are, anything else as JSON (`true`, `null`, `[2, 5]`)."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def flatten(config: Any, prefix: str = "", left_out: tuple = ()) -> Iterator[tuple[str, str]]:
    """(dotted key, text) for every leaf of a config (a DictConfig or a mapping) but its `left_out` top keys, lists
    as one JSON value. A leaf whose interpolation does not resolve here (`${hydra:…}` in a config read back from
    `.hydra/`) is logged as it is written, rather than losing the whole config."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    for name in (name for name in config if name not in left_out):
        dotted = f"{prefix}{name}"
        try:
            value = config[name]
        except Exception:
            value = config._get_node(name)._value()  # the interpolation's own text
        if isinstance(value, DictConfig | Mapping):
            yield from flatten(value, f"{dotted}.")
        elif isinstance(value, ListConfig):
            try:
                yield dotted, text(OmegaConf.to_container(value, resolve=True))
            except Exception:
                yield dotted, text(OmegaConf.to_container(value, resolve=False))
        else:
            yield dotted, text(value)


def params(config: Any) -> dict[str, str]:
    """The job's resolved config, flattened, without Hydra's node and the trackers' options."""
    return dict(flatten(config, left_out=LEFT_OUT))


def tags(result: Mapping) -> dict[str, str]:
    """The job's identity as tags (seeds, method, dataset, model, scenario, task, …), its status, and the methods
    its records hold (a job of every method has `method: all`)."""
    job = result.get("job") or {}
    found = {name: text(job[name]) for name in TAGGED if job.get(name) is not None}
    methods = dict.fromkeys(r["method"] for r in result.get("records", []) if r.get("method") is not None)
    return found | {"status": str(result.get("status")), "methods": ",".join(methods)}


def curve_points(curves: list[dict], targets: int) -> Iterator[Point]:
    """Every point of every training curve, at its epoch: `curve/<model>[/<method>][/<target>]/<series>`."""
    for curve in curves:
        prefix = ("curve", curve.get("model"), curve.get("method"),
                  curve.get("target") if targets > 1 else None)
        for series, values in curve.items():
            if series in CURVE_FIELDS or not isinstance(values, list):
                continue
            for epoch, value in zip(curve["epoch"], values, strict=False):
                if value is not None:
                    yield Point(key(*prefix, series), int(epoch), float(value))


def record_point(record: dict, targets: int) -> Point:
    """A record as a point: a dynamics record (one with a `step`) under `during/`, a final one under its role."""
    target = record.get("target") if targets > 1 else None
    if record.get("step") is not None:
        name = key("during", record.get("method"), target, record["metric"], record.get("split"))
        return Point(name, int(record["step"]), float(record["value"]))
    owner = record.get("method") or record["role"]
    name = key(record["role"], owner, target, record["metric"], record.get("split"))
    return Point(name, int(record.get("round") or 0), float(record["value"]))


def points(result: Mapping) -> list[Point]:
    """Every training curve point, dynamics point and final record of the result; null values (NaN and ±inf are
    written as null) left out."""
    records = [r for r in result.get("records", []) if r.get("value") is not None]
    curves = result.get("curves") or []
    named = [*(r.get("target") for r in result.get("records", [])), *(c.get("target") for c in curves)]
    targets = len({str(target) for target in named if target is not None})
    return [*curve_points(curves, targets), *(record_point(r, targets) for r in records)]


def job_log(config: Any, result: Mapping, folder: Path, sweep: Path) -> JobLog:
    """What the job in `folder` logs: run name, the sweep's group, params, tags, points and its result.json."""
    folder, sweep = Path(folder), Path(sweep)
    artifacts = [folder / RESULT] if (folder / RESULT).is_file() else []
    return JobLog(name=folder.name, group=sweep.name, folder=folder, params=params(config), tags=tags(result),
                  points=points(result), artifacts=artifacts, started=result.get("started"),
                  finished=result.get("finished"))
