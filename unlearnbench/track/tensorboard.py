"""`logger=tensorboard`: each job's params, tags, curves and records as TensorBoard event files in the job's own
folder, written by Lightning Fabric's `TensorBoardLogger` (TensorBoard's `SummaryWriter` underneath), so that
`tensorboard --logdir <sweep>` shows one run per job, named by its folder, and the sweep's report.md as the text of
a run of its own, `_report`.

What goes where: every point a scalar (its key the tag, its epoch, step or round the step); the params and tags as
a text table each, and as hyperparameters with the final records as their metrics (TensorBoard's HPARAMS tab then
compares the jobs). A file of ours ends in `.unlearnbench`: a log cut short (the job's process killed, a full disk)
leaves event files that the next attempt removes before it writes, so that TensorBoard never shows a point twice.
No server, no account: the files are the store.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import ClassVar

from unlearnbench.runtime.errors import UserError
from unlearnbench.track.tracker import JobLog, Point, Tracker

SUFFIX = ".unlearnbench"  # ends the name of every event file this tracker writes (and may remove)
EVENTS = f"events.out.tfevents.*{SUFFIX}"
REPORT_RUN = "_report"  # the sweep's report: a folder of the sweep, a run beside the jobs' (`_` sorts it first)
ESCAPED_BAR = "\\|"  # a `|` inside a markdown table's cell
SERIES = ("curve/", "during/")  # keys of points with many steps; the others are final records


def remove_events(folder: Path) -> None:
    """Remove the event files an earlier attempt of this tracker left in `folder` (ours alone: their suffix)."""
    for found in folder.glob(EVENTS):
        found.unlink()


def writer(folder: Path):
    """Fabric's TensorBoard logger writing straight into `folder` (no `version_N` subfolder: the folder is the
    run), without the placeholder `hp_metric`."""
    from lightning_fabric.loggers import TensorBoardLogger

    return TensorBoardLogger(root_dir=str(folder), name="", version="", default_hp_metric=False,
                             filename_suffix=SUFFIX)


def table(values: dict[str, str]) -> str:
    """A two-column markdown table, as TensorBoard's TEXT tab renders it (a `|` in a value escaped)."""
    rows = [f"| {name} | {value.replace('|', ESCAPED_BAR)} |" for name, value in values.items()]
    return "\n".join(["| name | value |", "|---|---|", *rows])


def final_metrics(points: list[Point]) -> dict[str, float]:
    """The final records with one point each, at step 0: the hyperparameters' metrics (one value per job; a record
    of several rounds stays a series)."""
    finals = [p for p in points if not p.key.startswith(SERIES)]
    once = Counter(p.key for p in finals)
    return {p.key: p.value for p in finals if once[p.key] == 1 and p.step == 0}


class TensorBoardTracker(Tracker):
    name = "tensorboard"
    extra = "tensorboard"
    client = "tensorboard"
    defaults: ClassVar[dict] = {}  # nothing to choose: the files go where the job's results are

    def log_job(self, job: JobLog, kept: dict) -> dict:
        """The job's event files in its folder (an earlier attempt's removed first); the state names them."""
        if kept.get("logged"):
            return kept
        folder = Path(job.folder)
        remove_events(folder)
        logger, finals = writer(folder), final_metrics(job.points)
        try:
            logger.experiment.add_text("params", table(job.params), 0)
            logger.experiment.add_text("tags", table(job.tags), 0)
            if finals:  # logs the finals as scalars at step 0 too
                logger.log_hyperparams({**job.params, **{f"tag.{k}": v for k, v in job.tags.items()}}, finals, step=0)
            for point in job.points:
                if point.key not in finals:
                    logger.log_metrics({point.key: point.value}, step=point.step)
        finally:  # the file closed whatever happens (a partial one is removed by the next attempt)
            logger.finalize("success")
        files = sorted(found.name for found in folder.glob(EVENTS))
        if not files:  # Fabric writes on rank 0 only: a process that thinks it is another rank writes nothing
            raise UserError(f"no event file was written in {folder}")
        return {"run": folder.name, "files": files, "logged": True}

    def end_sweep(self, group: str, report: Path | None) -> None:
        """The report's report.md as the text of the sweep's run `_report` (rewritten on a rerun)."""
        if report is None or not (Path(report) / "report.md").is_file():
            return
        folder = Path(self.sweep) / REPORT_RUN
        folder.mkdir(parents=True, exist_ok=True)
        remove_events(folder)
        logger = writer(folder)
        try:
            logger.experiment.add_text("report", (Path(report) / "report.md").read_text(), 0)
        finally:
            logger.finalize("success")
