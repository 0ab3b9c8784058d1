"""Hydra callback: build the report from the files on disk when a sweep ends, even when jobs failed.

Hydra skips `on_multirun_end` when a job raised, so jobs never raise: they record their errors in `result.json`.
The report is built from those files (not from in-memory job returns, which other launchers do not bring back),
and the console script exits non-zero when any job failed. An error while building the report is reported the same
way: the sweep's results stay on disk, and `unlearnbench-report DIR` rebuilds the report.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from unlearnbench.report.build import build_report, failure_lines

failed_jobs: list[dict] = []  # read by the console script after Hydra returns


def announce(failed: list[dict], total: int) -> None:
    failed_jobs.extend(failed)
    for line in failure_lines(failed, total):
        print(line, file=sys.stderr)


def report(folder: Path) -> None:
    """Build `folder/report/` from every result.json under `folder`; announce failed jobs."""
    try:
        built = build_report([folder], folder / "report")
    except Exception as error:
        traceback.print_exc()
        announce([{"folder": str(folder / "report"), "error": f"the report failed: {type(error).__name__}: "
                                                                f"{error}"}], 1)
        return
    announce(built.failed, len(built.jobs))
    print(f"report: {folder / 'report'}")


class ReportCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        if sweep.exists():
            report(sweep)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        report(Path(config.hydra.runtime.output_dir))
