"""Methods that fail on purpose, for the fault-injection tests (importable by subprocesses through PYTHONPATH)."""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path

import torch
from torch import nn

from unlearnbench.methods.base import Method, UnlearningTask


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
