"""What one job found (`Outcome`): its records, cache use, timings, failures and per-example outputs, with the rules
that isolate one target's or one method's failure from the rest of the job and keep the ranks in step."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lightning_fabric import Fabric

from unlearnbench.core.catalogue import declared
from unlearnbench.core.plan import JobPlan
from unlearnbench.runtime import progress
from unlearnbench.runtime.errors import FILE_ONLY, UserError
from unlearnbench.runtime.monitor import Cost, process_started
from unlearnbench.runtime.numerics import numerics_identity
from unlearnbench.runtime.ranks import JOB, Failure, Lockstep, PeerFailed, RoundAbandoned
from unlearnbench.runtime.seeding import configure_determinism

log = logging.getLogger(__name__)
idle_since = process_started()  # start of this process, then the end of its last job


class Examples(Protocol):
    """A task's per-example outputs, written beside result.json as examples.parquet (`result.publish`)."""

    def __len__(self) -> int: ...

    def write(self, path: Path) -> None: ...


@dataclass
class Outcome:
    """What one job found, as rank 0 reports it in result.json (`core.result.result_document`)."""

    records: list[dict] = field(default_factory=list)
    cache: dict = field(default_factory=lambda: {"original": None, "retrained": []})
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    trace: str | None = None
    numerics: dict | None = None  # the float trajectory's identity (runtime/numerics.py), once the job set it up
    dataset: dict | None = None  # the loaded data's identity, sizes and split (`ImageData.describe`)
    failures: list[dict] = field(default_factory=list)  # (target, method) that failed alone, with the reason
    succeeded: int = 0  # (target, method) pairs scored
    lockstep: Lockstep | None = None  # how the ranks agree on each unit's outcome (one rank: trivially)
    unreported: list[tuple[str, Failure]] = field(default_factory=list)  # failures not logged yet
    examples: Examples | None = None  # the per-example outputs (`evaluation.examples`)
    curves: list[dict] = field(default_factory=list)  # per epoch: loss, accuracy, lr of each trained model
    # the declarations of the metrics the job may record, as `Catalogue.as_dict()`: under ddp_spawn the outcome goes
    # back through Lightning's `apply_to_collection`, which refuses a frozen dataclass such as `Catalogue`
    catalogue: dict = field(default_factory=dict)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - start

    @contextmanager
    def stage(self, title: str, timing: str) -> Iterator[progress.Stage]:
        """A stage of the job: timed into `timings[timing]`, with a line in the log when it starts and ends."""
        with self.timed(timing), progress.stage(title) as current:
            yield current

    @classmethod
    def begin(cls, fabric: Fabric, plan: JobPlan) -> Outcome:
        """An outcome whose first timing is the start-up (from the process start or the previous job's end), with
        this process's determinism switches set for the job and its numerics identity taken after them."""
        outcome = cls()
        outcome.timings["startup"] = time.time() - max(idle_since, process_started())
        runtime, config = plan.config["runtime"], plan.config
        configure_determinism(runtime["deterministic"], runtime["threads"], runtime["matmul_precision"])
        outcome.numerics = numerics_identity(fabric.device, config["precision"]["name"], fabric.world_size,
                                             config["strategy"]["name"])
        outcome.lockstep = Lockstep(fabric, config["strategy"]["timeout_s"], plan.folder, plan.known_failures)
        outcome.catalogue = declared(config["task"]).as_dict()
        return outcome

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Record an error instead of raising it (a job never raises: the sweep's report must still be built);
        a `UserError` is the whole message, anything else also keeps its traceback for the job log. With several
        ranks, an error on any of them is the job's error."""
        failure = None
        try:
            yield
        except RoundAbandoned as left:
            if self.lockstep.spawned:  # the launching process starts the ranks again (runtime/ranks.py)
                raise
            self.error = (f"{left.unit}: {left.message}; the ranks could not go on in step, so the job stopped there "
                          f"(rerun it to run the rest)")
            return  # no agreement: the peers are gone or stuck
        except Exception as error:
            failure = failure_of(error)
        failure = self.agreed(JOB, failure)
        if failure is not None:
            self.error, self.trace = failure.message, failure.trace

    def unsettled(self, items: list, target: str | None = None) -> Iterator:
        """The targets (or, for `target`, the methods) still to run; one that failed in an earlier round of the job
        (ranks.py) is recorded with its message and not run again."""
        for item in items:
            method = None if target is None else item.name
            known = self.lockstep.known.get(unit_name(target or item, method)) if self.lockstep else None
            if known is None:
                yield item
            else:
                self.fail(target or item, method, Failure(known))

    @contextmanager
    def isolated(self, target: str, method: str | None = None) -> Iterator[None]:
        """Run one target's (method None) or one method's work so that its failure is recorded and the rest of the
        job goes on: one diverging or crashing method never takes the other methods or targets with it. Every rank
        learns whether the unit succeeded on all of them before any goes on (ranks.py)."""
        unit, failure = unit_name(target, method), None
        try:
            yield
        except PeerFailed as peer:  # the ranks agreed on this failure inside the unit
            failure = peer.failure
        except Exception as error:
            failure = self.agreed(unit, failure_of(error))
        else:
            failure = self.agreed(unit, None)
        if failure is not None:
            self.fail(target, method, failure)
        elif method is not None:
            self.succeeded += 1

    def agreed(self, unit: str, failure: Failure | None) -> Failure | None:
        return self.lockstep.agree(unit, failure) if self.lockstep else failure

    def fail(self, target: str, method: str | None, failure: Failure) -> None:
        self.failures.append({"target": target, "method": method, "error": failure.message})
        self.unreported.append((unit_name(target, method), failure))
        if self.lockstep is None or self.lockstep.logs:
            self.report_failures()

    def report_failures(self) -> None:
        """Log the failures not logged yet: at once in the job's own process, after the launch for spawned ranks
        (their logging is not the job's: it would reach the terminal, tracebacks and all)."""
        for unit, failure in self.unreported:
            log.warning("%s failed: %s", unit, failure.message)
            if failure.trace:
                log.error("the traceback:\n%s", failure.trace, extra=FILE_ONLY)
        self.unreported.clear()

    @property
    def status(self) -> tuple[str, str | None]:
        """("complete", None) when the job ran and at least one method was scored (failures are listed beside);
        ("failed", why) when the job itself failed or nothing could be scored."""
        if self.error:
            return "failed", self.error
        if self.failures and not self.succeeded:
            first = self.failures[0]
            where = f"target {first['target']}" + (f", method {first['method']}" if first["method"] else "")
            return "failed", f"{first['error']} ({where}" + (f"; {len(self.failures) - 1} more failures)"
                                                               if len(self.failures) > 1 else ")")
        return "complete", None

    def keep_curve(self, model: str, seed: int, curve: dict | None, target: str | None = None,
                   method: str | None = None, cached: bool = False) -> None:
        """A trained model's per-epoch curve for result.json's `curves` (a model that trained no epoch has none)."""
        if curve and curve.get("epoch"):
            self.curves.append({"model": model, "target": target, "method": method, "seed": seed, "cached": cached,
                                **curve})

    def add(self, target: str, method: str | None, role: str, scores: dict) -> None:
        self.records += as_records(target, method, role, scores)


def as_records(target: str, method: str | None, role: str, scores: dict) -> list[dict]:
    """One model's records: a record per (metric, split) of `scores`."""
    return [{"target": target, "method": method, "role": role, "metric": metric, "split": split, "value": value}
            for (metric, split), value in scores.items()]


def job_ended() -> None:
    """This process's job is over: the next job's start-up (`Outcome.begin`) is counted from now."""
    global idle_since
    idle_since = time.time()


class Diverged(Exception):
    """A model whose weights or outputs are not finite: its metrics are null and the reason is recorded."""


def failure_of(error: Exception) -> Failure:
    """What a unit's error records: a `UserError`'s or `Diverged`'s message alone; anything else is a bug, named by
    its type, with its traceback for the job log."""
    if isinstance(error, UserError | Diverged):
        return Failure(str(error))
    return Failure(f"{type(error).__name__}: {error}", traceback.format_exc())


def unit_name(target: str, method: str | None) -> str:
    return f"target {target}" + (f", method {method}" if method else "")


def cost_scores(cost: Cost) -> dict:
    return {(metric, None): value for metric, value in cost.as_dict().items()}
