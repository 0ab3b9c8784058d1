"""The per-example table every task writes: `examples.parquet`, one row per (target, model, split, example), beside
`result.json` (`outcome.Examples`).

The report's per-example scores (ε and forgetting quality, LiRA, KLOM) pool many jobs' rows and read only the common
columns (`COLUMNS`): the row's target, the model's role and method, the split, the example's `index` in its pool and
`label`, its logit-scaled confidence `conf`, its `loss` and the prediction `pred`. A task adds columns of its own
after these (the text task's per-example losses and attack scores) and decides which examples it keeps.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from unlearnbench.runtime.files import atomic_path

KEYS = ("target", "role", "method", "split")  # the row's model and split: text columns
COLUMNS = (*KEYS, "index", "label", "conf", "loss", "pred")
INTEGERS = ("index", "label", "pred")  # the numeric columns stored as int64; the others float64


@dataclass
class ExampleTable:
    """The rows of one job's `examples.parquet`, gathered model by model, as NumPy arrays and lists (it goes back
    from a spawned rank to the launching process under ddp_spawn: `__getstate__`). A task's table names its columns
    (`COLUMNS` first) and adds each model's rows with `extend`."""

    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in COLUMNS})

    def extend(self, n: int, keys: Mapping[str, str | None], values: Mapping[str, object]) -> None:
        """`n` rows of one model and split: `keys` (target, role, method, split) repeated, `values` one array of
        `n` per other column."""
        for name, value in keys.items():
            self.columns[name] += [value] * n
        for name, value in values.items():
            self.columns[name].append(np.asarray(value))

    def __len__(self) -> int:
        return len(self.columns["target"])

    def __getstate__(self) -> dict:
        """Pickled as the path of a temporary file that holds it: a spawned rank returns its outcome through a pipe
        that Lightning reads only after the rank has ended, so a table larger than the pipe's buffer (64 KiB) would
        block the rank forever."""
        handle, path = tempfile.mkstemp(prefix="unlearnbench-examples-", suffix=".pickle")
        with os.fdopen(handle, "wb") as file:
            pickle.dump(self.__dict__, file, protocol=pickle.HIGHEST_PROTOCOL)
        return {"spilled": path}

    def __setstate__(self, state: dict) -> None:
        with open(state["spilled"], "rb") as file:
            self.__dict__.update(pickle.load(file))
        os.unlink(state["spilled"])

    def frame(self):
        """The table as a DataFrame: the keys as strings, `INTEGERS` as int64, every other column as float64."""
        import pandas as pd

        frame = pd.DataFrame({name: pd.Series(self.columns[name], dtype="string") for name in KEYS})
        for name in self.columns:
            if name in KEYS:
                continue
            values = np.concatenate(self.columns[name]) if self.columns[name] else np.zeros(0)
            frame[name] = values.astype(np.int64 if name in INTEGERS else np.float64)
        return frame

    def write(self, path: Path) -> None:
        """Publish the table whole (a temporary file renamed into place) or leave no file: a crash while writing
        leaves the previous file or none."""
        frame = self.frame()
        with atomic_path(path) as temporary:
            frame.to_parquet(temporary, index=False)
