"""One method's dynamics in a job (`evaluation.during`): the points runtime/during.py's watch takes along its steps,
as records with a `step` and an `epoch`, beside the final records that stay the ones without a step.

The points are the target's evaluation's (`Evaluation.during`). Step 0 is M_o, taken before the method starts; the
last is M_u as the method returned it. An `epoch` is the count of epochs the loop has ended by the point's step (a
point at an epoch's last step counts that epoch), where the loop announces its epochs, and null otherwise. The
method's `time_s` leaves out the points taken inside its run; a record `during_time_s` holds the time of all of
them. With `evaluation.during.every` null, nothing is watched and nothing is added.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from unlearnbench.core.bench import Evaluation
from unlearnbench.core.outcome import Outcome, as_records
from unlearnbench.runtime import during
from unlearnbench.runtime.errors import invalid
from unlearnbench.runtime.monitor import Cost


def chosen_metrics(asked: list[str] | None, computable: list[str], leaderboard: list[str], why: str) -> list[str]:
    """The metrics each point computes: those `evaluation.during.metrics` names, or (null) the task's leaderboard
    metrics that a point can compute; a name it cannot compute is refused in one line (`why` says what is left to
    the end)."""
    if asked is None:
        return [metric for metric in dict.fromkeys(leaderboard) if metric in computable]
    if any(name not in computable for name in asked):
        raise invalid("metrics", "evaluation.during", f"null or a list of {', '.join(computable)} ({why})",
                      list(asked))
    return list(asked)


class Dynamics:
    def __init__(self, config: dict, outcome: Outcome, evaluation: Evaluation, target: str, method: str) -> None:
        """The method's watch, its first point (M_o at step 0) taken, where `evaluation.during.every` asks."""
        self.outcome, self.evaluation, self.target, self.method = outcome, evaluation, target, method
        self.points: list[dict] = []
        schedule = during.Schedule.parse(config["evaluation"]["during"]["every"])
        self.watch = during.Watch(schedule, self.point) if schedule is not None else None
        if self.watch is not None:
            self.watch.start()

    def point(self, model: Any, step: int, epoch: int | None) -> None:
        records = as_records(self.target, self.method, "unlearned", self.evaluation.during(self.method, model))
        records = [record | {"step": step, "epoch": epoch} for record in records]
        self.points += records
        self.outcome.records += records  # kept if the method fails later

    @contextmanager
    def watching(self) -> Iterator[None]:
        """The method's run, its loops reporting their steps and epochs to the watch."""
        with during.watching(self.watch):
            yield

    def cost(self, measured: Cost) -> Cost:
        """The method's cost without the time the points inside its run took."""
        if self.watch is None or measured.time_s is None:
            return measured
        return replace(measured, time_s=max(measured.time_s - self.watch.inside_s, 0.0))

    def end(self, unlearned: Any) -> None:
        """The last point, M_u at the method's last step, and the points' time."""
        if self.watch is None:
            return
        watch = self.watch
        watch.end(unlearned)
        for record in self.points:  # a point at an epoch's last step belongs to that epoch, which ended after it
            record["epoch"] = bisect_right(watch.epoch_ends, record["step"]) if watch.epoch_ends else None
        self.outcome.add(self.target, self.method, "unlearned", {("during_time_s", None): self.watch.spent_s})
