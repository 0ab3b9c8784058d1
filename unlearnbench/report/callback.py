"""Hydra callback: build the report from the files on disk when a sweep ends, even when jobs failed.

Hydra skips `on_multirun_end` when a job raised, so jobs never raise: they record their errors in `result.json`.
The report is built from those files (not from in-memory job returns, which other launchers do not bring back),
and the console script exits non-zero when any job failed.
"""

from __future__ import annotations

import sys
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


class ReportCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        if not sweep.exists():
            return
        failed = build_report([sweep], sweep / "report")
        total = sum(1 for _ in sweep.rglob("result.json"))
        announce(failed, total)
        print(f"report: {sweep / 'report'}")

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(config.hydra.runtime.output_dir)
        failed = build_report([folder], folder / "report")
        announce(failed, 1)
