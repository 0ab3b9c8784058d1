"""The text task's forget quality against one fixed retain model, beside each job's own.

A text job scores every model's forget truth ratios against its own M_r, trained with its own unlearning seed
(`forget_quality`). OpenUnlearning scores every method against one retain model's logs instead. The report adds that
reading too, from the per-example truth ratios in `examples.parquet`: `forget_quality_first` is the KS p-value
against the M_r of the smallest unlearning seed among the jobs of the same configuration, target and forget set
(the smallest training seed among those), so that the seed report shows how much of forget quality's spread comes
from the reference model. Its records join the report's frame with the columns of the job's own `forget_quality`
records, and every table (summary, seed variance, W2, rank stability) carries it unchanged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from unlearnbench.core.files import EXAMPLES
from unlearnbench.tasks.text.metrics import forget_quality

METRIC, FIRST = "forget_quality", "forget_quality_first"


def truth_ratios(folder: str) -> pd.DataFrame | None:
    """The forget rows of a text job's examples (target, role, method, index, truth_ratio), or None where the job
    has none (an image job, examples off, an unreadable file: those are the per-example scores' to report)."""
    try:
        frame = pd.read_parquet(Path(folder) / EXAMPLES, columns=["target", "role", "method", "split", "index",
                                                                   "truth_ratio"])
    except Exception:  # no file, no such column (another task), or a damaged file
        return None
    forget = frame[frame["split"] == "forget"]
    return forget.drop(columns="split") if len(forget) else None


def signature(rows: pd.DataFrame) -> str:
    return hashlib.sha1(np.sort(rows["index"].unique()).astype(np.int64).tobytes()).hexdigest()


def first_reference_records(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`forget_quality_first` rows for the complete text jobs of `frame` (none where there are none)."""
    if frame.empty or "metric" not in frame:
        return frame.iloc[0:0]
    own = frame[(frame["metric"] == METRIC) & (frame["status"] == "complete")]
    ratios = {folder: truth_ratios(folder) for folder in own["folder"].unique()}
    ratios = {folder: rows for folder, rows in ratios.items() if rows is not None}
    own = own[own["folder"].isin(ratios)]
    added = []
    for _, group in own.groupby([*keys, "target"], dropna=False, sort=False):
        target = group["target"].iloc[0]
        by_set: dict[str, list[str]] = {}
        for folder in group["folder"].unique():
            mine = ratios[folder][ratios[folder]["target"].astype(str) == str(target)]
            by_set.setdefault(signature(mine), []).append(folder)
        for folders in by_set.values():
            added.append(against_first(group[group["folder"].isin(folders)], ratios, str(target)))
    return pd.concat(added, ignore_index=True) if added else frame.iloc[0:0]


def against_first(group: pd.DataFrame, ratios: dict[str, pd.DataFrame], target: str) -> pd.DataFrame:
    """The group's forget-quality rows re-scored against the first job's M_r (smallest unlearning, then training
    seed)."""
    first = group.sort_values(["seed_unlearn", "seed_train", "folder"])["folder"].iloc[0]
    reference = model_ratios(ratios[first], target, "retrained", None)
    rows = group.copy()
    values = []
    for _, row in rows.iterrows():
        mine = model_ratios(ratios[row["folder"]], target, row["role"], row["method"])
        values.append(forget_quality(mine, reference) if len(mine) and len(reference) else None)
    rows["metric"], rows["value"] = FIRST, values
    return rows


def model_ratios(rows: pd.DataFrame, target: str, role: str, method) -> np.ndarray:
    chosen = rows[(rows["target"].astype(str) == target) & (rows["role"] == role)]
    if method is not None and method == method:
        chosen = chosen[chosen["method"] == method]
    return chosen.sort_values("index")["truth_ratio"].to_numpy(dtype=float)
