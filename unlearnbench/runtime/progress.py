"""What a running sweep tells the person watching it, and the training curves it keeps.

- Every stage of a job (loading the data, M_o, each M_r, each method, each evaluation) logs a line when it starts
  and one when it ends, with its time and whether its model came from the cache (`Stages`).
- Every training loop reports each epoch (loss, training accuracy, learning rate, images/s) to the training run
  being watched (`training`): one line per epoch in the job's log file and the epoch's values in the run's curve,
  which the model cache keeps beside the weights and result.json copies (`curves`). On a terminal a live bar shows
  the run instead of the epoch lines; never in a file, under CI or when stdout is not a terminal.
- After every finished job the sweep's count and ETA, `[17/125 done, 1 failed, ETA 12 min]` (`SweepProgress`).

`runtime.progress=false` silences the live parts (the bar, the epoch lines on the console, the sweep's count); the
job's log file keeps its lines. Only rank 0 of a job logs.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from unlearnbench.runtime import during, interrupt
from unlearnbench.runtime.errors import FILE_ONLY, FileOnly

log = logging.getLogger("unlearnbench.progress")


@dataclass
class Settings:
    """This process's share of the job's progress: whether it logs (rank 0) and whether it shows live output."""

    logs: bool = True
    live: bool = True
    tag: str = ""  # prefixes this process's lines where jobs run side by side (the local launcher's job number)


settings = Settings()


def configure(progress: bool, rank_zero: bool) -> None:
    """Set this process's progress for the job about to run (`runtime.progress`, and whether it is rank 0)."""
    settings.logs, settings.live = rank_zero, progress


def terminal() -> bool:
    """Whether live bars may be drawn: stdout is a terminal and this is not a CI run."""
    return sys.stdout.isatty() and not os.environ.get("CI")


def say(message: str, console: bool = True) -> None:
    if settings.logs:
        log.info(settings.tag + message, extra={} if console else FILE_ONLY)


def duration(seconds: float) -> str:
    """A time as a person reads it: 0.4 s, 12 s, 3.2 min, 1 h 05 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


class Stage:
    """A running stage: `note` adds what its end line says besides its time (e.g. where its model came from)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


@contextmanager
def stage(title: str) -> Iterator[Stage]:
    """Log `title: started`, run the stage, then `title: done in 1.2 s (notes)`; a stage that raises logs nothing
    more (its failure is the job's or the unit's, reported once by the job). Its start and end are safe points for
    an interrupt (runtime/interrupt.py)."""
    interrupt.check()
    say(f"{title}: started")
    start, current = time.perf_counter(), Stage()
    yield current
    notes = f" ({'; '.join(current.notes)})" if current.notes else ""
    say(f"{title}: done in {duration(time.perf_counter() - start)}{notes}")
    interrupt.check()


@dataclass
class TrainingRun:
    """One model's training: its title in the log and its curve, epoch by epoch, across every loop it runs."""

    title: str
    curve: dict[str, list] = field(default_factory=lambda: {"epoch": [], "loss": [], "train_acc": [], "lr": []})

    def add(self, loss: float, accuracy: float, lr: float | None) -> int:
        epoch = len(self.curve["epoch"]) + 1
        for key, value in (("epoch", epoch), ("loss", loss), ("train_acc", accuracy), ("lr", lr)):
            self.curve[key].append(value if value is None or math.isfinite(value) else None)
        return epoch


_watched: TrainingRun | None = None


@contextmanager
def training(title: str) -> Iterator[TrainingRun]:
    """Watch the training loops run inside: their epochs go to this run's log lines, bar and curve."""
    global _watched
    outer, _watched = _watched, TrainingRun(title)
    try:
        yield _watched
    finally:
        _watched = outer


class EpochMeter:
    """One training loop's per-epoch loss, accuracy and learning rate, reported to the watched run (if any).

    Sums stay on the device during an epoch and are read once at its end (one synchronisation per epoch, none per
    step); with several ranks they are summed over the ranks first, so the curve is the global batch's."""

    def __init__(self, fabric, epochs: int, steps_per_epoch: int, unit: str = "images") -> None:
        self.fabric, self.unit = fabric, unit  # what a step counts: images, or the text task's answer tokens
        self.run = _watched
        self.last_epoch = (len(self.run.curve["epoch"]) if self.run else 0) + epochs  # the run's, at this loop's end
        self.bar = LiveBar(self.run.title, epochs * steps_per_epoch, unit) if self.run and self.live_bar() else None
        self.sums = torch.zeros(2, dtype=torch.float64, device=fabric.device)  # Σ loss·n, Σ correct
        self.seen = 0
        self.lr: float | None = None
        self.started = time.perf_counter()
        self.accuracy = 0.0  # the last epoch's training accuracy

    @staticmethod
    def live_bar() -> bool:
        return settings.live and settings.logs and terminal()

    def batch(self, loss: Tensor, logits: Tensor, labels: Tensor, optimizer=None) -> None:
        """Count one step's batch: its mean loss, its predictions and the learning rate it used."""
        count = labels.numel()
        correct = (logits.detach().argmax(1) == labels).sum()
        self.sums += torch.stack([loss.detach().double() * count, correct.double()])
        self.seen += count
        if optimizer is not None:
            self.lr = float(optimizer.param_groups[0]["lr"])
        if self.bar:
            self.bar.advance()

    def end_epoch(self) -> float:
        """Read the epoch's sums, report them, start the next epoch's; returns the epoch's training accuracy."""
        sums = torch.cat([self.sums, self.sums.new_tensor([self.seen])])
        if self.fabric.world_size > 1:
            sums = self.fabric.all_reduce(sums, reduce_op="sum")
        loss_sum, correct, seen = sums.tolist()
        self.sums.zero_()
        self.seen = 0
        self.accuracy = correct / seen if seen else 0.0
        elapsed, self.started = time.perf_counter() - self.started, time.perf_counter()
        if self.run is not None:
            loss = loss_sum / seen if seen else math.nan
            epoch = self.run.add(loss, self.accuracy, self.lr)
            rate = seen / elapsed if elapsed > 0 else math.nan
            lr = f"{self.lr:.3g}" if self.lr is not None else "n/a"
            left = f", {duration((self.last_epoch - epoch) * elapsed)} left" if epoch < self.last_epoch else ""
            line = (f"{self.run.title}: epoch {epoch}/{self.last_epoch}, loss {loss:.4g}, train acc "
                    f"{self.accuracy:.1%}, lr {lr}, {rate:,.0f} {self.unit}/s{left}")
            say(line, console=settings.live and not self.bar)
            if self.bar:
                self.bar.epoch_done(f"{epoch}/{self.last_epoch}", loss, self.accuracy, rate)
        during.epoch_ended()
        return self.accuracy

    def __enter__(self) -> EpochMeter:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.close()


class LiveBar:
    """A transient rich bar for one training loop on the terminal: epoch k/N, loss, accuracy, images/s (tokens/s
    for text), ETA."""

    def __init__(self, title: str, steps: int, unit: str = "images") -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[stats]}"),
                                 TimeRemainingColumn(), transient=True)
        self.task = self.progress.add_task(title, total=max(steps, 1), stats="epoch 1")
        self.progress.start()
        self.unit = "img" if unit == "images" else unit

    def advance(self) -> None:
        self.progress.advance(self.task)

    def epoch_done(self, epoch: str, loss: float, accuracy: float, rate: float) -> None:
        self.progress.update(self.task, stats=f"epoch {epoch} done, loss {loss:.3g}, acc {accuracy:.1%}, "
                                              f"{rate:,.0f} {self.unit}/s")

    def close(self) -> None:
        self.progress.stop()


def join_job_log(log_file: str | None, log_format: str | None) -> None:
    """Log into the job's log file (and the console) from a rank that Fabric spawned: a fresh process with no
    logging of its own, whose lines would otherwise be lost."""
    root = logging.getLogger()
    if log_file is None or root.handlers:
        return
    formatter = logging.Formatter(log_format or "[%(asctime)s] %(message)s")
    to_file = logging.FileHandler(log_file, mode="a")
    console = logging.StreamHandler(sys.stdout)
    console.addFilter(FileOnly())
    for handler in (to_file, console):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)


def job_log() -> tuple[str | None, str | None]:
    """The job's log file and its line format, as Hydra set them up in this process (None where there is none)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename, getattr(handler.formatter, "_fmt", None)
    return None, None


class SweepProgress:
    """The sweep's count of finished jobs and its ETA, printed after every job by the process that launched it.

    The ETA divides the time since the sweep started by the jobs run so far (jobs found complete from an earlier
    run take no time and are not counted), so it accounts for jobs that run at once."""

    def __init__(self, total: int | None, live: bool = True) -> None:
        self.total, self.live = total, live
        self.started = time.time()
        self.done = self.failed = self.ran = 0

    def finished(self, result: dict | None) -> str:
        """Count a finished job (its result.json content, None if it left none) and print the sweep's line."""
        self.done += 1
        status = (result or {}).get("status")
        self.failed += status != "complete"
        self.ran += not skipped(result, self.started)
        line = self.line()
        if self.live:
            print(line, flush=True)
        return line

    def line(self) -> str:
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        parts = [f"{count} done"] + ([f"{self.failed} failed"] if self.failed else [])
        remaining = (self.total - self.done) if self.total else None
        if remaining and self.ran:
            parts.append(f"ETA {eta(remaining * (time.time() - self.started) / self.ran)}")
        return f"[{', '.join(parts)}]"


def skipped(result: dict | None, since: float) -> bool:
    """Whether a job's result was already complete before this sweep started (resumed, not run)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(result["finished"]).timestamp() < math.floor(since)
    except (TypeError, KeyError, ValueError):
        return False


def eta(seconds: float) -> str:
    return "<1 min" if seconds < 60 else (f"{round(seconds / 60)} min" if seconds < 5940 else duration(seconds))


sweep: SweepProgress | None = None  # in the process that launched the sweep
launcher_reports = False  # the launcher counts its jobs itself (they finish in other processes)


def begin_sweep(total: int | None, live: bool) -> None:
    global sweep, launcher_reports
    sweep, launcher_reports = SweepProgress(total, live), False


def job_finished(result: dict | None, by_launcher: bool = False) -> None:
    """A job of this process's sweep ended: print the count (once, whether the launcher or the callback tells)."""
    if sweep is not None and by_launcher == launcher_reports:
        sweep.finished(result)
