"""Hydra callback: build the report from the files on disk when a sweep ends, even when jobs failed.

Hydra skips `on_multirun_end` when a job raised, so jobs never raise: they record their errors in `result.json`
(and a method that failed inside a job that went on, in its `failures`).
The report is built from those files (not from in-memory job returns, which other launchers do not bring back),
and the console script exits non-zero when any job failed. An error while building the report is reported the same
way: the sweep's results stay on disk, and `unlearnbench-report DIR` rebuilds the report.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from unlearnbench.report.build import build_report, failure_lines, method_failure_lines
from unlearnbench.report.read.collect import failed_methods
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import EndSweep, UserError
from unlearnbench.runtime.files import WriteError

failed_jobs: list[dict] = []  # read by the console script after Hydra returns


def announce(failed: list[dict], total: int, methods: list[dict] = ()) -> None:
    """Print one line per failed job and per failed method; remember them for the exit code."""
    failed_jobs.extend([*failed, *methods])
    for line in [*failure_lines(failed, total), *method_failure_lines(list(methods))]:
        print(line, file=sys.stderr)


def report(folder: Path, config: DictConfig) -> None:
    """Build `folder/report/` from every result.json under `folder`; announce failed jobs and methods."""
    from unlearnbench.runtime.progress import duration

    print("report: started", flush=True)
    start = time.perf_counter()
    try:
        with interrupt.immediately():  # it reads the files on disk and writes each of its own whole
            built = build_report([folder], folder / "report", figures=config.report.figures,
                                 target_se=config.report.target_se, forget_permutations=config.report.permutations,
                                 leaderboard_metrics=leaderboard_metrics(config),
                                 resamples=config.report.leaderboard.resamples,
                                 compare=None if config.report.compare is None else list(config.report.compare),
                                 min_difference=config.report.min_difference,
                                 best_step=bool(config.report.get("best_step", False)))
    except (WriteError, UserError) as error:  # a full disk, a read-only folder, an unrankable leaderboard metric:
        # one line, the results stay on disk
        announce([{"folder": str(folder / "report"), "error": f"the report was not written: {error}"}], 1)
        return
    except Exception as error:
        traceback.print_exc()
        announce([{"folder": str(folder / "report"), "error": f"the report failed: {type(error).__name__}: "
                                                                f"{error}"}], 1)
        return
    announce(built.failed, len(built.jobs), failed_methods(built.jobs))
    print(f"report: done in {duration(time.perf_counter() - start)} ({len(built.jobs)} jobs)")
    print(f"report: {folder / 'report'}")


def leaderboard_metrics(config: DictConfig) -> list[str] | None:
    """`report.leaderboard.metrics` as a list, None (the declared ones) where it is not set."""
    names = config.report.leaderboard.metrics
    return None if names is None else list(names)


def check_methods(config: DictConfig) -> None:
    """`methods=[…]` names method configs and is not combined with `+method` (which task serves each is checked by
    the job)."""
    from hydra.core.global_hydra import GlobalHydra

    names = config.get("methods")
    if names is None:
        return
    if config.get("method") is not None:
        raise UserError("give either +method=… (one method per job) or methods=[…] (several in one job), not both")
    known = GlobalHydra.instance().config_loader().get_group_options("method")
    unknown = [name for name in names if name not in known] or ([] if names else ["(none given)"])
    if unknown:
        raise UserError(f"methods: unknown method {unknown[0]}; valid: {', '.join(known)}")


def sweep_size(config: DictConfig) -> int | None:
    """The number of jobs of the sweep, as Hydra's basic sweeper expands it (its params, then the command line's
    overrides); None where it cannot be told."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if config.get("tune") is not None:
        return None  # a tuning's batches follow from its trials' outcomes (hydra_plugins/…/tune.py)
    try:
        params = [f"{key}={value}" for key, value in (config.hydra.sweeper.get("params") or {}).items()]
        overrides = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
        return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))
    except Exception:
        return None


class ReportCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check the sweep's options before any job starts: one line and exit code 1 for a value out of range."""
        from omegaconf import OmegaConf

        from unlearnbench.core.components import build
        from unlearnbench.core.config import validate

        try:
            validate(config)
            if config.get("method") is not None:  # its options' ranges (the method's own `check_options`)
                build(OmegaConf.to_container(config.method, resolve=True), "method")
            check_methods(config)
        except UserError as error:
            raise EndSweep(error) from None
        from unlearnbench.runtime import progress

        progress.begin_sweep(sweep_size(config), live=bool(config.runtime.progress))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """The sweep's count and ETA after a job that ran in this process (the basic launcher's); then a safe point
        for an interrupt, before Hydra composes the next job."""
        from hydra.core.utils import JobStatus

        from unlearnbench.runtime import interrupt, progress

        progress.job_finished(job_return._return_value if job_return.status == JobStatus.COMPLETED else None)
        interrupt.check()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        if not any(sweep.glob("*/result.json")):
            announce([{"folder": str(sweep), "error": "the sweep ran no job (an empty sweep range, such as "
                                                      "range(0)?)"}], 1)
            return
        report(sweep, config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        report(Path(config.hydra.runtime.output_dir), config)
