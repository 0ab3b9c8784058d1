"""The training curves of a sweep's models (a result's `curves`) as one tidy table (pandas; no torch).

A job lists, per model it trained or took from the model cache, its loss, training accuracy and learning rate per
epoch: M_o (`original`, the training seed), M_r (`retrained`, per target, the unlearning seed) and the methods that
train (`unlearned`, per target and method). The cache puts the same curve in every job that shares the model (M_o
in every job of its training seed, M_r in every job of its unlearning seed): a curve is kept once, from the first
job in folder order, where configuration, model, target, method, seed and every value agree.

Whatever a file holds, the report is built: a curve that is not an object, has lists of unequal length or a value
that is not a number is skipped and named in one warning; results written before curves existed contribute nothing.
Non-finite values (a diverged loss) are missing values, gaps in the figure. Curves of failed jobs are kept: a model
that diverged is what the figure is there to show.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from unlearnbench.core.result import INT64, ROLES
from unlearnbench.report.compute.analysis import ROLE_ORDER
from unlearnbench.report.read.collect import SHOWN, finite
from unlearnbench.runtime.errors import UserError

SERIES = ("loss", "train_acc", "lr")
CURVE_COLUMNS = ["folder", "curve", "role", "target", "method", "seed", "epoch", *SERIES]

Curve = tuple  # (role, target, method, seed, epochs, loss, train_acc, lr): hashable, the identity of a curve


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64


def _number(value) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _text(value, where: str, allow_int: bool = False) -> str:
    """A target or method as the record tables spell it: a string, "" where null."""
    if value is None:
        return ""
    if isinstance(value, str) or (allow_int and _integer(value)):
        return str(value)
    raise UserError(f"{where}: {value!r:.40} is not a string{' or an integer' if allow_int else ''} or null")


def _series(curve: dict, key: str, length: int) -> tuple:
    """The values of one series as floats (None where missing or not finite); an absent series is all missing (a
    method that has no learning rate)."""
    values = curve.get(key)
    if values is None:
        return (None,) * length
    if not isinstance(values, list):
        raise UserError(f"{key}: {values!r:.40} is not a list")
    if len(values) != length:
        raise UserError(f"{key} has {len(values)} values for {length} epochs")
    bad = next((v for v in values if not _number(v)), None)
    if bad is not None:
        raise UserError(f"{key}: {bad!r:.40} is not a number or null")
    return tuple(finite(v) for v in values)


def parse_curve(curve) -> Curve:
    """The checked curve as a hashable tuple, or a UserError naming what is wrong with it."""
    if not isinstance(curve, dict):
        raise UserError(f"{curve!r:.40} is not an object")
    role = curve.get("model")
    if role not in ROLES:
        raise UserError(f"model: {role!r:.40} is not one of {', '.join(ROLES)}")
    seed = curve.get("seed")
    if not _integer(seed):
        raise UserError(f"seed: {seed!r:.40} is not an integer")
    epochs = curve.get("epoch")
    if not isinstance(epochs, list) or not all(_integer(e) for e in epochs):
        raise UserError(f"epoch: {epochs!r:.40} is not a list of integers")
    values = tuple(_series(curve, key, len(epochs)) for key in SERIES)
    return (role, _text(curve.get("target"), "target", allow_int=True), _text(curve.get("method"), "method"), seed,
            tuple(epochs), *values)


def job_curves(job: dict) -> tuple[list[Curve], list[str]]:
    """(the job's well-formed curves, a reason for each one skipped); a job without `curves` has neither."""
    curves = job.get("curves")
    if curves is None:
        return [], []
    if not isinstance(curves, list):
        return [], [f"curves: {curves!r:.40} is not a list"]
    parsed, problems = [], []
    for k, curve in enumerate(curves):
        try:
            parsed.append(parse_curve(curve))
        except UserError as error:
            problems.append(f"curves[{k}]: {error}")
    return parsed, problems


def configuration(job: dict, keys: list[str]) -> tuple[str, ...]:
    """The job's configuration as the report's groups spell it (`forget_quality.targets_of` alike)."""
    return tuple("" if job.get(k) is None else str(job.get(k)) for k in keys)


def unique_curves(jobs: list[dict], keys: list[str]) -> tuple[list[tuple[tuple, str, Curve]],
                                                              list[tuple[str, str]]]:
    """([(configuration, folder of its first job, curve)] once each in folder order, [(job folder, why a curve was
    skipped)]). A job whose curves cannot be read at all costs only its own curves."""
    seen: dict[tuple, tuple[tuple, str, Curve]] = {}
    problems: list[tuple[str, str]] = []
    for job in jobs:
        folder = str(job.get("folder", ""))
        try:
            parsed, reasons = job_curves(job)
            ident = configuration(job, keys)
        except Exception as error:  # a job's curves never cost the report
            parsed, reasons = [], [f"curves: {type(error).__name__}: {error}"]
        problems += [(folder, reason) for reason in reasons]
        for curve in parsed:
            seen.setdefault((ident, curve), (ident, folder, curve))
    return list(seen.values()), problems


def curve_table(jobs: list[dict], keys: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """(the tidy table, warnings): one row per curve and epoch with the columns `keys` (the study's configuration),
    `folder` (the first job holding the curve), `curve` (a number per distinct curve: its lines in the figure),
    `role` (the curve's `model`: original, retrained, unlearned; `model` is the architecture's column), `target` and
    `method` ("" where null), `seed`, `epoch`, `loss`, `train_acc`, `lr` (NaN where missing or not finite)."""
    found, problems = unique_curves(jobs, keys)
    columns: dict[str, list] = {c: [] for c in [*keys, *CURVE_COLUMNS]}
    for number, (ident, folder, (role, target, method, seed, epochs, *values)) in enumerate(found):
        for key, value in [*zip(keys, ident, strict=True), ("folder", folder), ("curve", number), ("role", role),
                           ("target", target), ("method", method), ("seed", seed)]:
            columns[key] += [value] * len(epochs)
        columns["epoch"] += epochs
        for key, series in zip(SERIES, values, strict=True):
            columns[key] += series
    table = pd.DataFrame(columns).astype({"curve": "int64", "seed": "int64", "epoch": "int64",
                                          **dict.fromkeys(SERIES, "float64")})
    return sort_curves(table, keys), [curve_warning(problems)] if problems else []


def sort_curves(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Configurations in the order the jobs came, then M_o, M_r, the methods; target, method, seed, epoch."""
    if table.empty:
        return table
    order = table.groupby(keys, sort=False).ngroup() if keys else 0
    ranked = table.assign(_config=order, _role=table["role"].map(ROLE_ORDER))
    by = ["_config", "_role", "target", "method", "seed", "curve", "epoch"]
    return ranked.sort_values(by, kind="stable").drop(columns=["_config", "_role"]).reset_index(drop=True)


def curve_warning(problems: list[tuple[str, str]]) -> str:
    """One warning for every skipped curve, naming the job folders (the first `SHOWN` reasons)."""
    files = len({folder for folder, _ in problems})
    shown = "; ".join(f"{Path(folder).name}: {reason}" for folder, reason in problems[:SHOWN])
    more = f"; … {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return (f"ignored {len(problems)} malformed training curve{'s' if len(problems) > 1 else ''} in {files} result "
            f"file{'s' if files > 1 else ''} (the other curves are drawn): {shown}{more}")
