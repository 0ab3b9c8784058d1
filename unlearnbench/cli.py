"""Console scripts: `unlearnbench` (always a Hydra multirun) and `unlearnbench-report DIR…`."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import hydra
from omegaconf import DictConfig

# Arguments after which Hydra must not be forced into a multirun (they inspect or choose the mode themselves).
MODE_ARGUMENTS = ("-m", "--multirun", "--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "-sc",
                  "--shell-completion", "--run", "-r")


GROUPS = ("dataset", "model", "method", "scenario", "strategy", "precision", "experiment", "seeds", "paths")


def wants_own_mode(arguments: list[str]) -> bool:
    return any(a in MODE_ARGUMENTS or a.startswith(("--cfg=", "--info=", "hydra.mode=")) for a in arguments)


def merged_group_choice(arguments: list[str]) -> str | None:
    """The message for `group=[a,b]`: Hydra would merge the configs into one (the last one winning, silently)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for argument in arguments:
        if argument.startswith("-"):
            continue
        try:
            override = OverridesParser.create().parse_override(argument)
        except HydraException:
            continue  # Hydra reports it
        if override.key_or_group in GROUPS and isinstance(override.value(), list):
            sweep = f"{argument.split('=', 1)[0]}={','.join(map(str, override.value()))}"
            return (f"unlearnbench: {argument} would merge several {override.key_or_group} configs into one job; "
                    f"use {sweep} to sweep them, one job each")
    return None


def print_job_table(result: dict) -> None:
    """A complete job's table on the terminal (`runtime.print_table`), drawn by the report's console renderer: the
    printer the console script hands the job."""
    from unlearnbench.report.render.console import job_table

    print(job_table(result))


@hydra.main(version_base="1.3", config_path="pkg://unlearnbench.conf", config_name="config")
def hydra_job(cfg: DictConfig) -> dict:
    from unlearnbench.core.job import run_job  # torch is imported here, not for --help

    return run_job(cfg, show=print_job_table)


def unwritable_sweep_folder(arguments: list[str]) -> str | None:
    """The message for a sweep folder that cannot be created (checked before Hydra, which would answer with a
    traceback): its nearest existing ancestor must be a writable folder."""
    given = [a.split("=", 1)[1] for a in arguments if a.startswith("hydra.sweep.dir=")]
    folder = Path(given[-1] if given else "multirun_outputs").absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return None
    why = "is not a folder" if not existing.is_dir() else "is not writable"
    return (f"unlearnbench: cannot create the sweep folder {folder}: {existing} {why}; choose another with "
            f"hydra.sweep.dir=DIR")


def register_launchers() -> None:
    """Register `hydra/launcher=local` and `=slurm`, and `hydra/sweeper=tune`, with Hydra, which finds plugins by
    listing the `hydra_plugins` namespace: an editable install's namespace packages cannot be listed, so the scan
    alone would miss them."""
    import importlib.util

    from hydra.core.plugins import Plugins

    from hydra_plugins.unlearnbench_launcher.local import LocalLauncher
    from hydra_plugins.unlearnbench_launcher.tune import TuneSweeper

    Plugins.instance().register(LocalLauncher)
    Plugins.instance().register(TuneSweeper)
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return  # the `slurm` extra is not installed: Hydra says so when the preset is chosen
    from hydra_plugins.unlearnbench_launcher.slurm import SlurmLauncher

    Plugins.instance().register(SlurmLauncher)


@contextlib.contextmanager
def mode_unread() -> Iterator[None]:
    """Hydra without its first composition of the config (`Hydra.get_mode`, 0.25 s): it composes the whole config
    only to read `hydra.mode`, which no config of this project sets (Hydra's default, null), so that it answers None
    and Hydra adds `hydra.mode=MULTIRUN` to the `--multirun` this script gave; answering None without composing
    takes that same path. (A config of the user's that set the mode would be overridden by `--multirun` either way.)
    """
    from hydra._internal.hydra import Hydra

    composing = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = composing


INTERRUPTED = ("\nunlearnbench: interrupted; finished jobs are kept (each job's result.json is written whole or not at "
               "all): rerun the same command with the same hydra.sweep.dir to resume\n")


def main() -> None:
    """`unlearnbench [overrides]`: one job per seed combination; exits non-zero if any job failed. Ctrl-C or
    SIGTERM stops the sweep at the next safe point (runtime/interrupt.py) and exits 130."""
    from unlearnbench.runtime import interrupt

    interrupt.install()
    forced = not wants_own_mode(sys.argv[1:])
    if forced:
        sys.argv.insert(1, "--multirun")
    sweeps = any(a in ("-m", "--multirun") for a in sys.argv[1:])
    message = merged_group_choice(sys.argv[1:]) or (unwritable_sweep_folder(sys.argv[1:]) if sweeps else None)
    if message:
        sys.exit(message)
    register_launchers()
    logging.raiseExceptions = False  # a log line that cannot be written (a full disk) must not print a traceback
    from unlearnbench.runtime.errors import EndSweep

    try:
        with mode_unread() if forced else contextlib.nullcontext():
            hydra_job()
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED)
        sys.exit(130)
    except EndSweep as stop:
        sys.exit(f"unlearnbench: {stop}")
    if interrupt.requested is not None:  # asked for after the last safe point: the sweep had nothing left to do
        sys.stderr.write(INTERRUPTED)
        sys.exit(130)
    from unlearnbench.report.callback import failed_jobs

    sys.exit(1 if failed_jobs else 0)


def run_script(main: Callable[[], int | None]) -> None:
    """The end of every script of scripts/ and benchmarks/, their `main`s' one way out: a UserError becomes its one
    line on stderr and status 1, and a status `main` returns becomes the process's (None: it goes on, as a return)."""
    from unlearnbench.runtime.errors import UserError

    try:
        status = main()
    except UserError as error:
        sys.exit(str(error))
    if status is not None:
        sys.exit(status)


def report_main() -> None:
    """`unlearnbench-report DIR [DIR…]`: (re)build the report of sweep folders (every result.json under them) into
    the first one's `report/`, or `--out`. Failed jobs are listed in the report and on stderr."""
    import argparse

    from unlearnbench.core.config import leaderboard_problems
    from unlearnbench.report.compute.forget_quality import FORGET_PERMUTATIONS
    from unlearnbench.report.compute.leaderboard import RESAMPLES
    from unlearnbench.report.compute.seed_design import TARGET_SE
    from unlearnbench.runtime.errors import UserError

    def positive(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not value > 0 or value == math.inf:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    def count(text: str) -> int:
        if not text.strip().isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
        return int(text)

    parser = argparse.ArgumentParser(prog="unlearnbench-report", description=report_main.__doc__)
    parser.add_argument("folders", nargs="*", type=Path, help="sweep folders holding job folders with result.json")
    parser.add_argument("--out", type=Path, default=None,
                        help="report folder (default: FIRST_DIR/report); with --openunlearning, the folder that "
                             "receives one job folder per manifest row, and the report in OUT/report (new, empty, or "
                             "a former import, which is replaced whole)")
    parser.add_argument("--openunlearning", type=Path, default=None, metavar="MANIFEST.csv",
                        help="import OpenUnlearning evaluations listed in MANIFEST.csv (path, role, method, "
                             "seed_train, seed_unlearn[, seed_eval, model]; docs/openunlearning.md), then report")
    parser.add_argument("--no-figures", action="store_true", help="tables and report.md only")
    parser.add_argument("--target-se", type=positive, default=TARGET_SE, metavar="SE",
                        help=f"the standard error of a method's mean the seed plan aims at (default {TARGET_SE})")
    parser.add_argument("--permutations", type=count, default=FORGET_PERMUTATIONS, metavar="K",
                        help=f"random splits behind each forgetting quality's null (default {FORGET_PERMUTATIONS})")
    parser.add_argument("--leaderboard-metrics", default=None, metavar="M[:SPLIT],…",
                        help="the metrics of the leaderboard's mean rank, each with a best value (default: those the "
                             "results' tasks declare, docs/comparing.md)")
    parser.add_argument("--resamples", type=count, default=RESAMPLES, metavar="B",
                        help=f"bootstrap resamples behind the leaderboard's rank intervals (default {RESAMPLES})")
    parser.add_argument("--compare", default=None, metavar="A,B[,…]",
                        help="methods whose every pair seed_power.csv plans for, beside each leaderboard's "
                             "neighbours")
    parser.add_argument("--min-difference", type=positive, default=None, metavar="D",
                        help="the difference (in each metric's units) the power plans detect (default: each pair's "
                             "observed difference)")
    args = parser.parse_args()

    def refuse(problem: str) -> NoReturn:
        for option, flag in (("report.leaderboard.metrics", "--leaderboard-metrics"), ("report.compare", "--compare")):
            problem = problem.replace(option, flag)
        parser.exit(2, f"unlearnbench-report: {problem}\n")

    given = args.leaderboard_metrics
    metrics = None if given is None else [m for m in given.split(",") if m]
    for problem in leaderboard_problems(metrics):
        refuse(problem)
    if args.openunlearning is not None:
        args.folders = [import_openunlearning(parser, args.openunlearning, args.folders, args.out)]
        args.out = args.folders[0] / "report"
    elif not args.folders:
        parser.exit(2, "unlearnbench-report: give the sweep folders to report on, or --openunlearning MANIFEST.csv "
                       "--out DIR\n")
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        parser.exit(2, f"unlearnbench-report: not a folder: {', '.join(missing)}\n")
    from unlearnbench.report.build import build_report, failure_lines, method_failure_lines
    from unlearnbench.report.read.collect import failed_methods, result_files
    from unlearnbench.runtime.files import WriteError

    if not result_files(args.folders):  # an empty report would look like a sweep whose jobs left no trace
        parser.exit(2, f"unlearnbench-report: no result.json under {', '.join(map(str, args.folders))}; give the "
                       f"sweep folder (hydra.sweep.dir) whose job folders hold result.json, once a job has finished\n")

    out = args.out or args.folders[0] / "report"
    try:
        built = build_report(args.folders, out, figures=not args.no_figures, target_se=args.target_se,
                             forget_permutations=args.permutations, leaderboard_metrics=metrics,
                             resamples=args.resamples,
                             compare=None if args.compare is None else [m for m in args.compare.split(",") if m],
                             min_difference=args.min_difference)
    except UserError as error:  # a leaderboard metric the results do not rank by, a method they do not rank
        refuse(str(error))
    except WriteError as error:
        sys.exit(f"unlearnbench-report: {error}")
    for line in [*failure_lines(built.failed, len(built.jobs)), *method_failure_lines(failed_methods(built.jobs))]:
        print(line, file=sys.stderr)
    print(f"report: {out}")


def import_openunlearning(parser, manifest: Path, folders: list[Path], out: Path | None) -> Path:
    """`--openunlearning`: write the manifest's runs as job folders into `out` (replacing a former import whole; one
    line per run that lacks a metric, on stderr; the failed runs are listed by the report), and return `out` for the
    report. Exits 2 on a manifest or an `--out` it refuses, 1 where no row could be imported or a file could not be
    written: nothing is written then."""
    from unlearnbench.runtime.errors import UserError
    from unlearnbench.runtime.files import WriteError
    from unlearnbench.tasks.text.openunlearning import NothingImported, import_runs

    if folders:
        parser.exit(2, "unlearnbench-report: --openunlearning reads its runs from the manifest; give no sweep "
                       f"folders beside it (got {', '.join(map(str, folders))})\n")
    if out is None:
        parser.exit(2, "unlearnbench-report: --openunlearning needs --out DIR, the folder for the imported runs and "
                       "their report\n")
    try:
        imported = import_runs(manifest, out)
    except NothingImported as error:
        for line in error.lines:
            print(f"unlearnbench-report: {line}", file=sys.stderr)
        parser.exit(1, f"unlearnbench-report: {error}\n")
    except UserError as error:
        parser.exit(2, f"unlearnbench-report: {str(error).replace('the output folder', '--out')}\n")
    except WriteError as error:
        parser.exit(1, f"unlearnbench-report: {error}\n")
    for line in imported.lines:
        print(f"unlearnbench-report: {line}", file=sys.stderr)
    total = len(imported.folders)
    print(f"imported {total - imported.failed} of {total} OpenUnlearning runs into {out}"
          + (f" ({imported.failed} failed: listed below and in the report)" if imported.failed else ""))
    return out
