"""unlearnbench from Python: run a sweep and get its records, or load a finished sweep's report.

`run_sweep(["+method=ssd", "seeds.train=range(3)"])` is `unlearnbench +method=ssd seeds.train=range(3)` in a shell:
the same jobs, folders, cache, launchers and report. It runs the command line in a child process rather than in
this one, so a notebook keeps no Hydra state between sweeps, a job's threads and signal handlers stay its own, and
Ctrl-C stops the sweep as it does in a terminal. `load_report(folder)` reads the report's tables (pandas only, no
torch), whoever built them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from unlearnbench.runtime.errors import UserError, invalid

SWEEP_DIR = "hydra.sweep.dir="
# The report's tables, by file name without `.csv` (`results` is read from results.parquet, which keeps the types).
TABLES = ("results", "summary", "table", "seed_variance", "seed_variance_by_seed", "wasserstein",
          "wasserstein_by_seed", "rank_stability", "rank_stability_by_seed", "seed_plan", "seed_power",
          "forget_quality", "forget_quality_by_example", "forget_quality_across_seeds", "curves", "leaderboard",
          "leaderboard_pairs")


class SweepError(UserError):
    """The sweep ran no job: the command line was refused (a bad override, an unknown option) or stopped early.
    The message is the command's own one-line reason. Its own kind of UserError, so that a notebook can tell a
    refused sweep from a refused call."""


def run_sweep(overrides: Sequence[str] = (), sweep_dir: str | os.PathLike | None = None, *,
              config_dir: str | os.PathLike | None = None, quiet: bool = False) -> pd.DataFrame:
    """Run `unlearnbench OVERRIDES` and return the sweep's records, one row per record of every job.

    `overrides` are what the command line takes, one string each: `["+method=ssd,finetune",
    "seeds.train=range(3)"]`. The sweep goes to `sweep_dir` (or a `hydra.sweep.dir=` override; by default
    `multirun_outputs/<date>/<time>` under the current folder); running the same call again resumes it, running
    only the jobs that have no complete result. `config_dir` adds a folder of your own configs (`--config-dir`).
    The command's output is echoed line by line unless `quiet`.

    The frame has the columns of the report's `results.parquet`: `target`, `method`, `role`, `metric`, `split`,
    `value`, `round`, the job's fields (`dataset`, `seed_train`, `seed_unlearn`, …), `status` and `folder`.
    `frame.attrs` holds `sweep_dir` and `failed` (the folders of the jobs that did not complete; a warning names
    how many). Raises `SweepError` when no job ran, `KeyboardInterrupt` when interrupted (finished jobs are kept).
    """
    arguments = command_arguments(overrides, sweep_dir, config_dir)
    folder = Path(next(a for a in reversed(arguments) if a.startswith(SWEEP_DIR))[len(SWEEP_DIR):])
    before = written(folder)
    returncode, last_lines = run_command([sys.executable, "-m", "unlearnbench", *arguments], quiet)
    if returncode == 130:
        raise KeyboardInterrupt(f"the sweep in {folder} was interrupted; finished jobs are kept, and the same call "
                                f"resumes it")
    after = written(folder)
    if not after or (returncode != 0 and after == before):  # refused before any job (a resumed sweep's old files)
        raise SweepError(reason(last_lines) or f"the sweep ran no job (exit status {returncode})")
    from unlearnbench.report.read.collect import RECORD_COLUMNS, load_results

    frame, jobs = load_results([folder])
    if frame.empty:  # no job wrote a record (every one failed before its first): the columns still hold
        frame = frame.reindex(columns=["folder", "status", *RECORD_COLUMNS])
    failed = [job["folder"] for job in jobs if job["status"] != "complete"]
    if failed:
        warnings.warn(f"{len(failed)} of {len(jobs)} jobs of {folder} did not complete (their rows have status "
                      f"'failed'; frame.attrs['failed'] lists them): {reason(last_lines)}", stacklevel=2)
    frame.attrs.update(sweep_dir=str(folder), failed=failed)
    return frame


def written(folder: Path) -> dict[Path, int]:
    """The sweep's result files and when each was written."""
    return {path: path.stat().st_mtime_ns for path in folder.glob("**/result.json")} if folder.is_dir() else {}


def command_arguments(overrides: Sequence[str], sweep_dir: str | os.PathLike | None,
                      config_dir: str | os.PathLike | None) -> list[str]:
    """The command line's arguments, with exactly one `hydra.sweep.dir=`; a UserError with one line for arguments
    the command line would not take as overrides."""
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise invalid("overrides", "run_sweep", "a list of strings, one per command-line argument, e.g. "
                      "['+method=ssd', 'seeds.train=range(3)']", repr(overrides))
    overrides = list(overrides)
    flags = [o for o in overrides if o.startswith("-")]
    if flags:
        raise invalid("overrides", "run_sweep", "key=value overrides only (config_dir= stands for --config-dir; run "
                      "other flags, such as --cfg or --help, in a shell)", repr(flags[0]))
    given = [o for o in overrides if o.startswith(SWEEP_DIR)]
    if given and sweep_dir is not None:
        raise UserError(f"the sweep folder is given twice, as sweep_dir={str(sweep_dir)!r} and {given[-1]!r}; "
                        f"give one")
    if not given:
        folder = sweep_dir if sweep_dir is not None else Path("multirun_outputs") / datetime.now().strftime(
            "%Y-%m-%d/%H-%M-%S-%f")  # the config's default, named here so that the records can be found
        overrides.append(f"{SWEEP_DIR}{folder}")
    if config_dir is not None:
        overrides = ["--config-dir", str(Path(config_dir).absolute()), *overrides]
    return overrides


def run_command(command: list[str], quiet: bool) -> tuple[int, list[str]]:
    """Run `command`, echoing its output (stdout and stderr in order) unless `quiet`; its exit status and its last
    lines. Ctrl-C here is passed on to the sweep, which stops its jobs, and then raised."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    last_lines: deque[str] = deque(maxlen=20)
    # Its own session: a terminal's Ctrl-C reaches this process only, which passes the stop on (a notebook's
    # interrupt reaches only this process anyway) as SIGTERM, which the sweep takes as it takes Ctrl-C: a SIGINT
    # would be lost where this process was started with SIGINT ignored (a background job), as the sweep then is.
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          env=environment, start_new_session=True) as process:
        try:
            echo(process.stdout, last_lines, quiet)
        except KeyboardInterrupt:
            process.send_signal(signal.SIGTERM)
            echo(process.stdout, last_lines, quiet)  # to its end: what was kept, how to resume
            process.wait()
            raise
        return process.wait(), list(last_lines)


def echo(stream, last_lines: deque[str], quiet: bool) -> None:
    for line in stream:
        last_lines.append(line.rstrip("\n"))
        if not quiet:
            print(line, end="", flush=True)


def reason(lines: list[str]) -> str:
    """The command's own one-line reason: its last `unlearnbench…` or `FAILED` line, else its last line."""
    text = [line.strip() for line in lines if line.strip()]
    own = [line for line in text if line.startswith(("unlearnbench", "FAILED"))]
    return (own or text or [""])[-1]


@dataclass(frozen=True)
class Report:
    """A sweep's report: every table as a DataFrame (`report.seed_variance`, `report.tables["wasserstein"]`),
    `report.md`'s text and the figures' paths. A table the report does not hold (e.g. `forget_quality` of a sweep
    without per-example outputs) is an empty frame."""

    folder: Path
    tables: dict[str, pd.DataFrame]
    markdown: str
    figures: list[Path] = field(default_factory=list)

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(f"a report has no table {name!r}; its tables: {', '.join(tables)}")


def load_report(folder: str | os.PathLike, rebuild: bool = False) -> Report:
    """The report of a finished sweep: `folder` is the sweep folder (its report is in `folder/report/`) or the report
    folder itself. `rebuild=True` (re)builds it from the sweep folder's result files first, as
    `unlearnbench-report` does; a `FileNotFoundError` names what is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder: {folder}")
    is_report = (folder / "report.md").is_file()
    if is_report and rebuild:
        raise UserError(f"{folder} is a report folder; rebuild=True needs the sweep folder, which holds the job "
                        f"folders (for a report of several sweeps: unlearnbench-report SWEEP… --out {folder})")
    report = folder if is_report else folder / "report"
    if rebuild:
        from unlearnbench.report.build import build_report

        build_report([folder], report)
    if not (report / "report.md").is_file():
        raise FileNotFoundError(f"{folder} holds no report (no report.md in it or in {report}); build it with "
                                f"load_report({str(folder)!r}, rebuild=True) or unlearnbench-report {folder}")
    tables = {name: read_table(report, name) for name in TABLES}
    figures = sorted((report / "figures").glob("*.png"))
    return Report(report, tables, (report / "report.md").read_text(encoding="utf-8"), figures)


def read_table(report: Path, name: str) -> pd.DataFrame:
    """One table of the report; an empty frame when the report has none (or wrote it without rows)."""
    if name == "results" and (report / "results.parquet").is_file():
        return pd.read_parquet(report / "results.parquet")
    path = report / f"{name}.csv"
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()
