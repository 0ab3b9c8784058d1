"""The contract between the sweep's tracking (track/callback.py) and each experiment tracker's client (MLflow, W&B,
TensorBoard): what one job logs (`JobLog`, built from its result document by track/content.py) and what a tracker
does with it (`Tracker`). A tracker reads nothing but a `JobLog` and the sweep's report folder, so every tracker
logs the same content under the same names, and adding one is one module and one YAML (conf/logger/).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from unlearnbench.runtime.errors import UserError


@dataclass(frozen=True)
class Point:
    """One value of a series: a metric name as the trackers show it, its step (an epoch of a training curve, a step
    of the dynamics, 0 for a final record) and its value."""

    key: str
    step: int
    value: float


@dataclass
class JobLog:
    """What one job logs, whichever tracker takes it.

    name: the job's folder name (the run's name); group: the sweep's name (a W&B group, an MLflow experiment);
    params: the job's resolved config flattened to dotted keys, values as text (no `logger` options: a tracking
    URI may hold a password); tags: seeds, method(s), dataset, model, scenario, task, status; points: every training
    curve point, dynamics point and final record; artifacts: the job's files to upload (result.json); started,
    finished: the job's own times (ISO 8601, result.json's), so that a run shows when the job ran, not when it was
    logged."""

    name: str
    group: str
    folder: Path
    params: dict[str, str]
    tags: dict[str, str]
    points: list[Point] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)
    started: str | None = None
    finished: str | None = None


class Tracker(ABC):
    """One tracker's client for one sweep, built from its options (`logger.<name>` in the config: the group's YAML
    and the command line's overrides) and the sweep's folder. Every method may raise: the callback turns any error
    into one warning line and the job's results stay on disk. `kept` is what this tracker returned for the same job
    folder before (the job's `tracking.json`), so that a rerun resumes the same run instead of starting another."""

    name: str  # the option of the `logger` group, and the key in `tracking.json`
    extra: str  # `pip install unlearnbench[<extra>]` installs its client
    client: str = ""  # the module its client library imports as: checked before any job (`missing_client`)
    defaults: ClassVar[dict | None] = None  # its options and their defaults, where it declares them: others are refused

    def __init__(self, options: dict, sweep: Path) -> None:
        self.options, self.sweep = {**(self.defaults or {}), **options}, sweep
        self.sweep_state: dict = {}  # what `begin_sweep` returned for this sweep folder (set by the callback)
        unknown = [key for key in options if self.defaults is not None and key not in self.defaults]
        if unknown:
            raise UserError(f"logger.{self.name}: unknown option {', '.join(unknown)}; valid options: "
                            f"{', '.join(self.defaults)}")

    @classmethod
    def missing_client(cls) -> str | None:
        """One line naming the extra to install where the tracker's client library does not import, else None:
        said before any job runs, not once per job."""
        if not cls.client:
            return None
        try:
            importlib.import_module(cls.client)
        except ImportError:
            return f"logger={cls.name} needs its client: pip install 'unlearnbench[{cls.extra}]'"
        return None

    def begin_sweep(self, group: str) -> dict:
        """Before any job: whatever the sweep's jobs need to find the sweep's own run (kept in the sweep folder's
        `tracking.json`, read back by `log_job` and `end_sweep` through `self.sweep_state`). On a rerun into the
        same sweep folder `self.sweep_state` already holds what the first run returned, so that the sweep's run is
        resumed, not started again."""
        return {}

    @abstractmethod
    def log_job(self, job: JobLog, kept: dict) -> dict:
        """Log one job (its run named `job.name`, resumed where `kept` names one) and return the state to keep for
        it: at least its run's id and `"logged": True` once every point and artifact went through."""

    def end_sweep(self, group: str, report: Path | None) -> None:
        """After the report: the report folder (report.md, CSVs, figures) to the sweep's own run, where the tracker
        has one."""
        return None  # a tracker without a run of the sweep's own (TensorBoard) has nothing to add
