"""The metrics the report derives across jobs (the catalogue's `Derived`), beside each job's own.

A job scores its models against its own M_r, trained with its own unlearning seed (the text task's forget quality).
OpenUnlearning scores every method against one retain model's logs instead. The report adds that reading for each
derived metric its results declare, from the per-example values in `examples.parquet`: every record of the derived
metric's `source` (on its `split`) is re-scored with its `statistic` (`STATISTICS`) between the model's values of
`column` and those of the M_r of the first job (smallest unlearning seed, then training seed) among the jobs of the
same configuration, target and forget set, so that the seed report shows how much of the source metric's spread
comes from the reference model. The derived records join the report's frame with the columns of the source records,
and every table (summary, seed variance, W2, rank stability) carries them unchanged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from unlearnbench.core.catalogue import STATISTICS, Catalogue, Derived
from unlearnbench.core.files import EXAMPLES
from unlearnbench.core.result import read_examples


def derived_records(frame: pd.DataFrame, keys: list[str], catalogue: Catalogue) -> pd.DataFrame:
    """The records of every derived metric of `catalogue` for the complete jobs of `frame` (none where none
    applies)."""
    if frame.empty or "metric" not in frame:
        return frame.iloc[0:0]
    added = [records_of(frame, keys, derived) for derived in catalogue.derived]
    added = [records for records in added if not records.empty]
    return pd.concat(added, ignore_index=True) if added else frame.iloc[0:0]


def per_example(folder: str, derived: Derived) -> pd.DataFrame | None:
    """A job's per-example values of the derived metric's column on its split (target, role, method, index, value),
    or None where the job has none (another task, examples off, an unreadable file: those are the per-example
    scores' to report)."""
    try:
        frame = read_examples(Path(folder) / EXAMPLES, columns=["target", "role", "method", "split", "index",
                                                                  derived.column])
    except (OSError, ValueError):  # no file, no such column (another task), or a damaged file
        return None
    chosen = frame[frame["split"] == derived.split]
    return chosen.drop(columns="split").rename(columns={derived.column: "value"}) if len(chosen) else None


def signature(rows: pd.DataFrame) -> str:
    """The forget set of a job's examples: a digest of its sorted example indices."""
    return hashlib.sha1(np.sort(rows["index"].unique()).astype(np.int64).tobytes()).hexdigest()


def records_of(frame: pd.DataFrame, keys: list[str], derived: Derived) -> pd.DataFrame:
    """The derived metric's records: the complete jobs' `source` records re-scored, per configuration, target and
    forget set, against that group's first M_r."""
    split = frame["split"].fillna("")
    own = frame[(frame["metric"] == derived.source) & (split == derived.split) & (frame["status"] == "complete")]
    examples = {folder: per_example(folder, derived) for folder in own["folder"].unique()}
    examples = {folder: rows for folder, rows in examples.items() if rows is not None}
    own = own[own["folder"].isin(examples)]
    added = []
    for _, group in own.groupby([*keys, "target"], dropna=False, sort=False):
        target = group["target"].iloc[0]
        by_set: dict[str, list[str]] = {}
        for folder in group["folder"].unique():
            mine = examples[folder][examples[folder]["target"].astype(str) == str(target)]
            by_set.setdefault(signature(mine), []).append(folder)
        for folders in by_set.values():
            added.append(against_first(group[group["folder"].isin(folders)], examples, str(target), derived))
    return pd.concat(added, ignore_index=True) if added else frame.iloc[0:0]


def against_first(group: pd.DataFrame, examples: dict[str, pd.DataFrame], target: str,
                  derived: Derived) -> pd.DataFrame:
    """The group's source records re-scored against the first job's M_r (smallest unlearning, then training seed,
    among the jobs whose examples hold an M_r: a run imported alone may hold only its own model)."""
    folders = group.sort_values(["seed_unlearn", "seed_train", "folder"])["folder"].unique()
    references = (model_values(examples[folder], target, "retrained", None) for folder in folders)
    reference = next((values for values in references if len(values)), np.zeros(0))
    statistic = STATISTICS[derived.statistic]
    rows = group.copy()
    values = []
    for _, row in rows.iterrows():
        mine = model_values(examples[row["folder"]], target, row["role"], row["method"])
        values.append(statistic(mine, reference) if len(mine) and len(reference) else None)
    rows["metric"], rows["value"] = derived.name, values
    return rows


def model_values(rows: pd.DataFrame, target: str, role: str, method) -> np.ndarray:
    """One model's per-example values, in example order."""
    chosen = rows[(rows["target"].astype(str) == target) & (rows["role"] == role)]
    if method is not None and method == method:
        chosen = chosen[chosen["method"] == method]
    return chosen.sort_values("index")["value"].to_numpy(dtype=float)
