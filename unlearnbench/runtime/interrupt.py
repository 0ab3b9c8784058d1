"""Ctrl-C and SIGTERM stop a sweep at the next safe point, never in the middle of whatever the process was doing.

A signal handler that raises lands wherever the main thread happens to be: inside Hydra composing the next job's
config (omegaconf then prints a traceback and the sweep exits 1), inside a cache entry being published, inside a
collective. So the console script's handler only records the request, and the work stops at the next safe point,
where `check()` raises `Interrupted` (a KeyboardInterrupt: no `except Exception` of a job or a method swallows it):

- at the start of a job and between jobs (after each job's count line);
- between the stages of a job (`progress.stage`);
- at every batch of every training, unlearning and evaluation loop and at every round of the ranking task, each
  loop iterating through `checked` (`train.batch_positions`, the image task's `evaluate.predict`, the ranking task's
  `federation.run_rounds`, the text task's `Items.batches`, `TextTask.pairs` and evaluation batches), so that a long
  stage stops within one step;
- at every generated token (`text.evaluate.StopOnInterrupt`, a stopping criterion of Hugging Face's `generate`).

Where the process only waits, for the local launcher's workers, SLURM's array tasks or a job's spawned ranks, or
while the report is built from the files on disk, nothing can be left half-done and the handler raises at once
(`immediately`). A second Ctrl-C also raises at once, wherever the process is: the way out of a step that never
ends. A raise that lands in a finalizer (a weakref callback run by the garbage collector) would be printed as
"Exception ignored in …" with a traceback and lost: it is raised again instead, as soon as the finalizer returns.

The console script then prints one line and exits 130: every finished job's result.json is whole, and the same
command resumes the sweep. A signal that was ignored when the process started stays ignored (a background job of a
non-interactive shell ignores SIGINT, so that a Ctrl-C meant for the foreground does not reach it).

A terminal sends Ctrl-C to every process of its foreground process group: the processes the sweep starts get it too.
Those that the launching process stops (a launcher's workers, spawned ranks) ignore SIGINT (`leave_to_parent`), and
must never see it before they do: a Python process raises KeyboardInterrupt wherever its start-up is, and prints
the traceback. multiprocessing's forkserver imports torch and the job loop for seconds before it ignores SIGINT
(CPython's own fix, bpo-30185, covers its loop, not its preload), and its children get Python's default handler back
at the fork: so a process is started inside `sigint_blocked`, with SIGINT blocked, which it inherits. A Ctrl-C then
waits in it, and is discarded once it ignores SIGINT.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

SIGNALS = (signal.SIGINT, signal.SIGTERM)

RETRY_S = 0.01  # after an interrupt lost in a finalizer, when to raise it again
requested: int | None = None  # the signal that asked to stop, once one did
_immediate = 0  # depth of the `immediately` regions the process is in


class Interrupted(KeyboardInterrupt):
    """Raised at a safe point after Ctrl-C or SIGTERM (a KeyboardInterrupt, which the console script reports)."""


def install() -> None:
    """Handle SIGINT and SIGTERM in this process by recording them (module docstring), unless ignored."""
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handle)
    if sys.unraisablehook is not _unraisable:
        global _previous_hook
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable


_previous_hook = sys.unraisablehook


def _unraisable(unraisable) -> None:
    """An `Interrupted` raised inside a finalizer cannot leave it: trip the signal again a moment later, once the
    finalizer has returned, so that the handler raises in the code it interrupted (module docstring; tripped at
    once, the handler would run inside this hook). Anything else is reported as Python reports it."""
    if isinstance(unraisable.exc_value, Interrupted) and requested is not None:
        while True:
            try:
                threading.Timer(RETRY_S, _thread.interrupt_main, args=(requested,)).start()
                return
            except Interrupted:  # on a loaded machine the retry can fire before this hook returns: trip it again
                continue
    _previous_hook(unraisable)


def _handle(signum: int, frame) -> None:
    global requested
    again = requested is not None
    requested = signum
    if again or _immediate:
        raise Interrupted(signal.Signals(signum).name)


def check() -> None:
    """A safe point: stop here if an interrupt was asked for."""
    if requested is not None:
        raise Interrupted(signal.Signals(requested).name)


Item = TypeVar("Item")


def checked(items: Iterable[Item]) -> Iterator[Item]:
    """`items`, one at a time, with a safe point before each: the loop helper every training, unlearning and
    evaluation loop iterates through, so that none can run a step after an interrupt was asked for."""
    for item in items:
        check()
        yield item


@contextmanager
def immediately() -> Iterator[None]:
    """A region where the process only waits or reads and writes whole files: an interrupt raises at once."""
    global _immediate
    check()
    _immediate += 1
    try:
        yield
    finally:
        _immediate -= 1


def leave_to_parent() -> None:
    """In a process that its launching process stops (a launcher's worker, a spawned rank; module docstring): ignore
    SIGINT, which a terminal's Ctrl-C sends to every process of the group, and unblock it where the process was
    started blocked (`sigint_blocked`): one that waited is discarded."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """A region where the processes this thread starts begin with SIGINT blocked, which they inherit (module
    docstring): a Ctrl-C waits in them until they ignore it. This thread's own Ctrl-C waits as well, to the end of
    the region (the milliseconds of starting a process; the process's other threads take it at once), and is then
    handled as usual: nothing is lost."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
