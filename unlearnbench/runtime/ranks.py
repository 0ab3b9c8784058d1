"""The ranks of one job in step: launched together, agreeing after every unit of work, ending together.

Three facts about torch.distributed shape this module:

- A spawned rank that returns without destroying its process group can abort at exit ("terminate called without an
  active exception", SIGABRT): gloo's worker threads still hold finished work whose tensors are freed while the
  interpreter is being torn down. `launch` therefore ends every rank with a barrier (nobody still talks to it) and
  `destroy_process_group()` while the interpreter is whole.
- A rank whose unit of work (a target, or one method on it) raised must not go on alone: its peers may be inside one
  of that unit's collectives, and the next unit's collectives would be matched against them (a gradient all-reduce
  of one method against another's). So after every unit the ranks exchange their status through the rendezvous
  store, outside the process group, which a rank that failed half-way may have left unusable. A failure on any rank
  is the unit's failure on every rank, with the first failing rank's own message.
- A collective that waits for a peer that will never join cannot be interrupted in-process (gloo's `abort` does
  nothing; only the peer's process exiting, or the process group's timeout, ends the wait). When a failed rank's
  peers do not report within its grace (`GRACE_S`, or half of `strategy.timeout_s` where that is shorter: the
  peers' collective must not time out first, which would leave them "in step" on a broken process group), they are
  stuck in such a collective: the ranks leave the round
  (`RoundAbandoned`), the launching process (`supervise`, for `ddp_spawn`) starts them again, and the new round
  records the unit as failed without running it. The units before it run again (their models come from the cache)
  and score what they scored: every random choice derives from the seeds. Ranks that SLURM started cannot be
  started again from inside the job: it stops at that unit, failed, with the records of the units before it.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from lightning_fabric import Fabric

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.files import write_atomically

log = logging.getLogger(__name__)

GRACE_S = 10.0  # how long a failed rank waits for its peers' status before it takes them to be stuck
JOB = "the job"  # the unit of the work outside every target (loading data, training M_o)
ABANDONED = ".abandoned_round.json"  # in the job folder: the unit that ended a round, for the launching process


class RoundAbandoned(BaseException):
    """The ranks cannot go on in step: a failed unit's peers are stuck in its collectives, or a peer stopped
    answering. A BaseException, so that no `except Exception` of a method or a unit swallows it: it ends the round."""

    def __init__(self, unit: str, message: str) -> None:
        super().__init__(f"{unit}: {message}")
        self.unit, self.message = unit, message


@dataclass
class Failure:
    """One rank's failed unit: the message it records and its traceback (for the job log), if any."""

    message: str
    trace: str | None = None


def launch(fabric: Fabric, function: Callable, *args: Any) -> Any:
    """`fabric.launch(function, *args)` whose ranks end in step (module docstring): rank 0's return value."""
    return fabric.launch(_in_step, function, *args)


def _in_step(fabric: Fabric, function: Callable, *args: Any) -> Any:
    global _left
    _left = False
    if spawned(fabric):  # a terminal's Ctrl-C reaches the ranks too: the launching process alone stops them
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = function(fabric, *args)
    except RoundAbandoned:
        if spawned(fabric):  # the launching process reads why from the job folder: no traceback on the terminal
            raise SystemExit(1) from None
        raise
    disband(wait=not _left)  # a round left is no group to wait on: its peers are gone or stuck
    return result


_left = False  # whether this process's ranks left their round (`Lockstep.leave`)


def spawned(fabric: Fabric) -> bool:
    """Whether this job's ranks are processes that Fabric starts itself (`ddp_spawn`), not ones SLURM started."""
    from lightning_fabric.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    return isinstance(fabric.strategy.launcher, _MultiProcessingLauncher)


def disband(wait: bool = True) -> None:
    """Wait for every rank (unless `wait` is false), then destroy the process group (a no-op without one)."""
    if dist.is_available() and dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


class Lockstep:
    """After each unit of work, the ranks' statuses exchanged through the rendezvous store (module docstring).

    Every rank calls `agree` for the same units in the same order; `known` holds the units that failed in an earlier
    round of this job (unit → message): they are recorded as failed and not run again.
    """

    def __init__(self, fabric: Fabric, timeout_s: float, folder: str, known: dict[str, str] | None = None) -> None:
        self.rank, self.world, self.timeout_s = fabric.global_rank, fabric.world_size, timeout_s
        self.folder, self.known = Path(folder), dict(known or {})
        self.spawned = spawned(fabric)  # spawned ranks can be started again; ranks that SLURM started cannot
        self.logs = self.rank == 0 and not self.spawned  # spawned ranks' logging is not the job's log
        self.store = dist.distributed_c10d._get_default_store() if self.world > 1 else None
        self.count = 0

    def together(self, unit: str) -> None:
        """A step inside `unit` that every rank reaches before going on (after a method, before its evaluation's
        collectives): a rank that failed earlier in the unit agrees here, and the others raise `PeerFailed`."""
        failure = self.agree(unit, None)
        if failure is not None:
            raise PeerFailed(failure)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "store": None}  # the outcome that holds it goes back to the launching process

    def agree(self, unit: str, failure: Failure | None) -> Failure | None:
        """The unit's outcome on every rank: None when it succeeded everywhere, else the first failure (its message
        names the rank when not every rank failed alike). Raises `RoundAbandoned` when the ranks cannot go on: a
        failed rank's peers did not report within its grace, a healthy rank's within the timeout, or the ranks
        reached different units."""
        if self.world == 1:
            return failure
        self.count += 1
        prefix = f"unlearnbench/agree/{self.count}"
        status = {"unit": unit, "error": None, "trace": None, "order": None}
        if failure is not None:
            order = self.store.add(f"{prefix}/failures", 1)
            status.update(error=failure.message, trace=failure.trace, order=order)
        keys = [f"{prefix}/rank{rank}" for rank in range(self.world)]
        self.store.set(keys[self.rank], json.dumps(status))
        limit = min(GRACE_S, self.timeout_s / 2) if failure is not None else self.timeout_s
        arrived = self.reported(keys, f"{prefix}/verdict", limit)
        statuses = self.statuses(keys)
        if arrived and all(other["unit"] == unit for other in statuses.values()):
            proposal = "stay"
        else:
            self.store.set(f"{prefix}/reason{self.rank}", json.dumps(self.reason(unit, statuses)))
            proposal = f"leave {self.rank}"
        verdict = self.store.compare_set(f"{prefix}/verdict", "", proposal).decode()
        if verdict != "stay":
            self.leave(json.loads(self.store.get(f"{prefix}/reason{verdict.split()[1]}")), verdict == proposal)
        return self.first_failure(self.statuses(keys))

    def reported(self, keys: list[str], verdict: str, limit_s: float) -> bool:
        """Whether every rank's status arrived within `limit_s`; False as soon as another rank decided to leave.
        Polled (`check` neither blocks nor logs, unlike a timed-out `wait`), at first every millisecond."""
        deadline, delay = time.monotonic() + limit_s, 0.001
        while not self.store.check(keys):
            if self.store.check([verdict]) or time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
        return True

    def statuses(self, keys: list[str]) -> dict[int, dict]:
        return {rank: json.loads(self.store.get(key)) for rank, key in enumerate(keys) if self.store.check([key])}

    def reason(self, unit: str, statuses: dict[int, dict]) -> dict:
        """Why this rank proposes to leave the round: the first failure it knows of, or the peers that did not
        answer, or the ranks' disagreement on where they are."""
        rank = first_failed(statuses)
        silent = [rank for rank in range(self.world) if rank not in statuses]
        if rank is not None:
            message = f"on rank {rank}: {statuses[rank]['error']}"
        elif silent:
            message = (f"rank {', '.join(map(str, silent))} did not finish {unit} within strategy.timeout_s = "
                       f"{self.timeout_s:g} s (it died, hangs or waits in a collective)")
        else:
            message = "the ranks reached different units: " + ", ".join(
                f"rank {rank} {status['unit']}" for rank, status in statuses.items())
        return {"unit": unit, "message": message}

    def leave(self, reason: dict, mine: bool) -> None:
        """End the round; of spawned ranks, the one whose proposal won tells the launching process which unit
        failed and why."""
        global _left
        _left = True
        if mine and self.spawned:
            write_atomically(self.folder / ABANDONED, json.dumps(reason))
        raise RoundAbandoned(reason["unit"], reason["message"])

    def first_failure(self, statuses: dict[int, dict]) -> Failure | None:
        rank = first_failed(statuses)
        if rank is None:
            return None
        first = statuses[rank]
        alike = len(statuses) == self.world and all(status["error"] == first["error"] for status in statuses.values())
        return Failure(first["error"] if alike else f"on rank {rank}: {first['error']}", first["trace"])


def first_failed(statuses: dict[int, dict]) -> int | None:
    """The rank that failed first (the store's counter orders the failures), or None when none failed."""
    failed = sorted((status["order"], rank) for rank, status in statuses.items() if status["error"])
    return failed[0][1] if failed else None


class PeerFailed(Exception):
    """Raised by `Lockstep.together` on the ranks that got through a step that another rank failed: they stop the
    unit there, and record the failure that every rank agreed on."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def abandoned_round(folder: str) -> dict | None:
    """The unit that ended the last round in `folder` and why (removing the record), or None."""
    path = Path(folder) / ABANDONED
    try:
        reason = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return reason


def died(error: Exception) -> str:
    """One line for a spawned rank that ended outside any unit: killed by a signal, exited, or raised."""
    from torch.multiprocessing.spawn import ProcessExitedException

    rank = getattr(error, "error_index", "?")
    if isinstance(error, ProcessExitedException):
        how = f"was killed by {error.signal_name}" if error.signal_name else f"exited with code {error.exit_code}"
        return f"rank {rank} {how} (out of memory, or stopped from outside?); the job's other ranks were stopped"
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"rank {rank} failed: {lines[-1].strip() if lines else error}"


def supervise(make_fabric: Callable[[], Fabric], function: Callable, plan: Any) -> Any:
    """Launch `function(fabric, plan)` on fresh ranks until a round ends in step: a round left at a unit that failed
    (module docstring) is started again with that unit in `plan.known_failures`. A rank that died, or a round left
    outside any target, ends the job: the error says which rank and how."""
    from torch.multiprocessing.spawn import ProcessException

    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # its "Terminating process": ours says why
    while True:
        try:
            return waiting(launch, make_fabric(), function, plan)
        except ProcessException as error:
            reason = abandoned_round(plan.folder)
            if reason is None:
                raise RankDied(died(error)) from None
            if reason["unit"] == JOB or reason["unit"] in plan.known_failures:
                raise RankDied(reason["message"]) from None
            log.warning("%s failed on one rank while the others were inside it: starting the ranks again without "
                        "it", reason["unit"])
            plan.known_failures[reason["unit"]] = reason["message"]


def waiting(launch_ranks: Callable, *args: Any) -> Any:
    """`launch_ranks(*args)` from a process that only waits for the ranks it starts: an interrupt (Ctrl-C, SIGTERM)
    raises at once there, and ends the ranks (runtime/interrupt.py)."""
    import multiprocessing

    before = set(multiprocessing.active_children())
    try:
        with interrupt.immediately():
            return launch_ranks(*args)
    except KeyboardInterrupt:
        ranks = [child for child in multiprocessing.active_children() if child not in before]
        for rank in ranks:
            rank.kill()
        for rank in ranks:
            rank.join(timeout=10)
        raise


class RankDied(Exception):
    """A job that could not go on because one of its ranks died or left: the message says which and how."""
