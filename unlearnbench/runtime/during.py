"""Evaluation along an unlearning method's steps (`evaluation.during`): the points of its dynamics.

A method's training loop announces each update of the model it unlearns (`stepped(model)`, called by every task's
update step: `runtime.train.descend`, the text task's `step`) and the end of each epoch (`epoch_ended()`); it knows
nothing else of the evaluation. While a `Watch` is active (`watching`, around one method's `unlearn`), every N-th
step or epoch calls the watch's `evaluate(model, step, epoch)` between two updates. The points are step 0 (M_o,
before the first update), every N steps or epochs, and the end; a method without a step loop (SSD, LFSSD) makes one
update, so its end is step 1.

Nothing the method does may change because it was watched (the final records with and without a watch are equal,
bit for bit): `evaluate` must draw no random number from the method's generators or torch's global one and must
not touch the optimizer; the watch itself keeps every module's train/eval flag as it was (an evaluation puts the
model in eval mode: no batch-normalisation statistics updated, no dropout). The time spent evaluating is counted
apart (`spent_s`), so that the method's own time stays comparable.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from unlearnbench.runtime.errors import invalid

EVERY = re.compile(r"^\s*(\d+)\s*(steps?|epochs?)?\s*$")


@dataclass(frozen=True)
class Schedule:
    """When a watch evaluates: every `every` steps (`unit` "step") or epochs ("epoch")."""

    every: int
    unit: str = "step"

    @classmethod
    def parse(cls, value) -> Schedule | None:
        """`evaluation.during.every` read: null (off), N or "N steps" (every N updates), "N epochs"."""
        if value is None:
            return None
        match = EVERY.match(str(value)) if not isinstance(value, bool) else None
        if match is None or int(match.group(1)) < 1:
            raise invalid("every", "evaluation.during", 'null (off), a number of steps N ≥ 1, "N steps" or '
                          '"N epochs"', value)
        unit = "epoch" if (match.group(2) or "").startswith("epoch") else "step"
        return cls(int(match.group(1)), unit)


class Watch:
    """One method's run watched: its step and epoch counts, the points evaluated so far and the time they took."""

    def __init__(self, schedule: Schedule, evaluate: Callable[[Any, int, int | None], None]) -> None:
        self.schedule, self.evaluate = schedule, evaluate
        self.step, self.epoch = 0, 0
        self.spent_s = 0.0  # every point's time
        self.inside_s = 0.0  # the time of the points taken inside the method's run, which its own time leaves out
        self.epoch_ends: list[int] = []  # the step count at each epoch's end, where the loop announces its epochs
        self.model: Any = None  # the model the last update trained
        self.evaluated: set[int] = set()

    def start(self) -> None:
        """The first point: M_o, at step 0."""
        self.point(None)

    def point(self, model: Any, inside: bool = False) -> None:
        """Evaluate `model` (None: M_o, before any update; a torch module, or a task's own kind of model such as
        a federation's weights) at the current step, once per step."""
        if self.step in self.evaluated:
            return
        self.evaluated.add(self.step)
        started = time.perf_counter()
        modules = model.modules() if hasattr(model, "modules") else ()  # a torch module's; a task's own model: none
        flags = [(module, module.training) for module in modules]
        try:
            self.evaluate(model, self.step, self.epoch)
        finally:
            for module, training in flags:
                module.training = training
            spent = time.perf_counter() - started
            self.spent_s += spent
            self.inside_s += spent if inside else 0.0

    def stepped(self, model: Any) -> None:
        self.step += 1
        self.model = model
        if self.schedule.unit == "step" and self.step % self.schedule.every == 0:
            self.point(model, inside=True)

    def epoch_ended(self) -> None:
        self.epoch += 1
        self.epoch_ends.append(self.step)
        if self.schedule.unit == "epoch" and self.epoch % self.schedule.every == 0 and self.model is not None:
            self.point(self.model, inside=True)

    def end(self, model: Any) -> None:
        """The last point: the model the method returned, at its last step (step 1 for a method without steps)."""
        if self.step == 0:
            self.step = 1
        self.point(model)


_active: ContextVar[Watch | None] = ContextVar("during_watch", default=None)


@contextmanager
def watching(watch: Watch | None) -> Iterator[Watch | None]:
    """Make `watch` the one the running loop reports to (None: no watch, every call below does nothing)."""
    token = _active.set(watch)
    try:
        yield watch
    finally:
        _active.reset(token)


def stepped(model: Any) -> None:
    """An update of `model` was taken (called by the update steps every task shares, and by a task's own: a
    federation's round)."""
    watch = _active.get()
    if watch is not None:
        watch.stepped(model)


def epoch_ended() -> None:
    """An epoch of the running loop ended (called by `progress.EpochMeter` and by loops that keep no meter)."""
    watch = _active.get()
    if watch is not None:
        watch.epoch_ended()
