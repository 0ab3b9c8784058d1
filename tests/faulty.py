"""Methods that fail on purpose, for the fault-injection tests (importable by subprocesses through PYTHONPATH)."""

from __future__ import annotations

import errno
import math
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn

from unlearnbench.tasks.image.methods.base import Method, UnlearningTask


class Crashing(Method):
    """Raises inside the method: a bug in one method."""

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        raise RuntimeError("boom inside the method")


class Exploding(Method):
    """Returns a model whose first parameter is +inf and second NaN: a diverged method."""

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        first, second, *_ = model.parameters()
        with torch.no_grad():
            first.fill_(math.inf)
            second.fill_(math.nan)
        return model


class FillingDisk(Method):
    """Fills the filesystem that holds `folder` (a test's tiny tmpfs), then returns the model unchanged: the job
    that follows cannot write its result."""

    def __init__(self, name: str, folder: str) -> None:
        super().__init__(name)
        self.folder = folder

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        block = b"\0" * 4096
        with open(Path(self.folder) / "filler", "ab", buffering=0) as f:
            try:
                while True:
                    f.write(block)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
        os.sync()
        return model


class Gated(Method):
    """Holds the job of training seed `hold` (any other passes straight through): its first start marks
    `folder/started-<seed>` (a line: pid, SLURM job; the file appears whole) and waits for `folder/release`, so
    that a test can requeue or cancel it mid-job; a later start (a requeued or resumed job) adds its line and
    passes."""

    def __init__(self, name: str, folder: str, seed: int, hold: int, wait_s: float = 300.0) -> None:
        super().__init__(name)
        self.folder, self.seed, self.hold, self.wait_s = Path(folder), seed, hold, wait_s

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        if self.seed != self.hold:
            return model
        started = self.folder / f"started-{self.seed}"
        first = not started.exists()
        job = f"{os.environ.get('SLURM_ARRAY_JOB_ID')}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
        lines = started.read_text() if not first else ""
        scratch = started.with_name(f".{started.name}.{os.getpid()}")
        scratch.write_text(f"{lines}{os.getpid()} {job}\n")
        scratch.replace(started)  # whole lines or nothing: a test polls this file for its existence
        deadline = time.monotonic() + self.wait_s
        while first and not (self.folder / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"nobody released {self.folder}")
            time.sleep(0.1)
        return model


class FailingOnRank(Method):
    """Raises on rank `rank` only, as an out-of-memory error on one GPU does. The other ranks return the model, or,
    with `stuck`, first wait in a collective that the failing rank never joins (as ranks mid-way through a training
    step do)."""

    def __init__(self, name: str, rank: int = 1, stuck: bool = False) -> None:
        super().__init__(name)
        self.rank, self.stuck = rank, stuck

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        if task.fabric.global_rank == self.rank:
            raise RuntimeError(f"out of memory on rank {self.rank}")
        if self.stuck:
            task.fabric.all_reduce(torch.ones(3))
        return model


class KillingRank(Method):
    """Kills the process of rank `rank` (SIGKILL, as the out-of-memory killer does); the other ranks go on."""

    def __init__(self, name: str, rank: int = 1) -> None:
        super().__init__(name)
        self.rank = rank

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        if task.fabric.global_rank == self.rank:
            os.kill(os.getpid(), signal.SIGKILL)
        return model


class HangingRank(Method):
    """Rank `rank` sleeps for `sleep_s` (a hung rank: alive, never reaching the next collective); the others go on."""

    def __init__(self, name: str, rank: int = 1, sleep_s: float = 3600.0) -> None:
        super().__init__(name)
        self.rank, self.sleep_s = rank, sleep_s

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        if task.fabric.global_rank == self.rank:
            time.sleep(self.sleep_s)
        return model
