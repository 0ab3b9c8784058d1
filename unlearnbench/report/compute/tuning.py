"""The objective of a tuning's batches of jobs, and the tables of a tuning sweep (`experiment=tune`, docs/tuning.md).

The objective is the leaderboard's rule (`leaderboard.block_scores`): per block (a target and a training seed), the
method's distance to each metric's ideal (|v − ideal|, or |v − M_r's v| for a metric judged against the retrained
model), divided by the metric's declared `scale` (privleak's percent: 100) so that every metric counts in [0, 1]; the
mean over the metrics, then over the blocks. Lower is better: 0 is a method at every ideal. The metrics are the
catalogue's leaderboard ones, or those `tune.objective` names.

From `tuning.json` (the sweeper's record, core/tuning.py):

    trials.csv   every trial: method, trial, state (complete | failed), objective on the tuning seeds, its value per
                 tuning seed, the reason of a failed trial, and the point (a column `param_<option>` per option)
    tuning.csv   per method: the best point and its trial, its objective on the tuning seeds; on the held-out seeds
                 the objective of the best point (its 95% t-interval over the held-out training seeds) and of the
                 method's defaults; the optimism (held-out minus tuning objective of the best point: how much the
                 tuning seeds flattered it) and the gain (defaults minus tuned, held out)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.errors import UserError
from unlearnbench.core.tuning import DEFAULT, TRIAL, TUNED, TUNING
from unlearnbench.report.compute.leaderboard import block_scores, parse_metrics
from unlearnbench.report.read.collect import catalogue_of, load_results


def objective_metrics(names: Sequence[str] | None, catalogue: Catalogue) -> list[tuple[str, str]]:
    """The objective's (metric, split): `tune.objective`'s, else the catalogue's leaderboard metrics; a `UserError`
    where one has no ideal to be near."""
    chosen = parse_metrics(list(names)) if names else parse_metrics(catalogue.leaderboard())
    wrong = [f"{m}:{s}" if s else m for m, s in chosen if catalogue.ideal(m) is None]
    if wrong or not chosen:
        ideal = ", ".join(m.name for m in catalogue.metrics if m.ideal is not None)
        raise UserError(f"the 'tune.objective' option must name metrics with an ideal (metric or metric:split of "
                        f"{ideal}); got {', '.join(wrong) or 'none'} instead")
    return chosen


@dataclass
class Scored:
    """A batch's objective: the value per block (target, training seed), their mean; or why there is none."""

    blocks: dict[tuple[str, int], float] = field(default_factory=dict)
    reason: str | None = None

    @property
    def value(self) -> float:
        return float(np.mean(list(self.blocks.values()))) if self.blocks and self.reason is None else math.nan

    def as_record(self) -> dict:
        """What tuning.json keeps of it: the state, the objective, its value per training seed, the reason."""
        failed = self.reason is not None
        return {"state": "failed" if failed else "complete", "objective": None if failed else self.value,
                "by_seed": {} if failed else self.by_seed(), "reason": self.reason}

    def by_seed(self) -> dict[int, float]:
        """The objective per training seed (its targets' blocks averaged): the held-out interval's draws."""
        seeds: dict[int, list[float]] = {}
        for (_, seed), value in self.blocks.items():
            seeds.setdefault(seed, []).append(value)
        return {seed: float(np.mean(values)) for seed, values in sorted(seeds.items())}


def objective(frame: pd.DataFrame, jobs: list[dict], catalogue: Catalogue, method: str,
              metrics: list[tuple[str, str]]) -> Scored:
    """The objective of `method` over the jobs of one batch (`collect.load_results`' frame and jobs). A failed job, a
    method that failed or diverged, or a metric without a value in a block fails the batch, with the reason."""
    for job in jobs:
        failures = [f for f in job.get("failures") or [] if f.get("method") == method]
        if job.get("status") != "complete" or failures:
            error = job.get("error") or (failures[0]["error"] if failures else job.get("status"))
            return Scored(reason=f"{Path(job['folder']).name}: {str(error).splitlines()[0]}")
    mine = frame[(frame["role"] == "unlearned") & (frame["method"] == method)] if "role" in frame else frame
    blocks = sorted(set(zip(mine.get("target", []), mine.get("seed_train", []), strict=True)), key=str)
    if not blocks:
        return Scored(reason=f"no records of method {method}")
    values = frame.assign(split=frame["split"].fillna(""), method=frame["method"].fillna(""))  # as the report has
    # them (analysis.prepare): M_r's rows keep their place in the groups
    distances: dict[tuple, list[float]] = {block: [] for block in blocks}
    for metric, split in metrics:
        scores = block_scores(values, metric, split, catalogue)
        column = scores[method] if method in scores else pd.Series(dtype=float)
        for block in blocks:
            value = column.get(block)
            if value is None or not math.isfinite(value):
                label = f"{metric}:{split}" if split else metric
                return Scored(reason=f"{label} has no value for target {block[0]}, training seed {block[1]}")
            distances[block].append(float(value) / catalogue.metric(metric).scale)
    return Scored({(str(target), int(seed)): float(np.mean(found)) for (target, seed), found in distances.items()})


def score_folders(folders: Sequence[Path], method: str, names: Sequence[str] | None) -> Scored:
    """The objective of `method` over the jobs in `folders` (each a job folder with its result.json)."""
    frame, jobs = load_results(list(folders))
    missing = [f for f in folders if not any(j["folder"].endswith(Path(f).name) for j in jobs)]
    if missing:
        return Scored(reason=f"{Path(missing[0]).name}: no result.json")
    return objective(frame, jobs, catalogue_of(jobs), method, objective_metrics(names, catalogue_of(jobs)))


TRIAL_COLUMNS = ["method", "trial", "state", "objective", "by_seed", "reason"]
TUNING_COLUMNS = ["method", "best", "best_trial", "trials", "failed_trials", "tuning_seeds", "objective_tuning",
                  "heldout_seeds", "objective_heldout", "heldout_low", "heldout_high", "objective_default",
                  "optimism", "gain", "note"]


def read_tunings(folders: Sequence[Path]) -> tuple[list[dict], list[str]]:
    """(the tuning records of the sweep folders that hold one, a line per record that cannot be read): a folder
    without `tuning.json` is no tuning sweep."""
    found, problems = [], []
    for folder in folders:
        path = Path(folder) / TUNING
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            problems.append(f"{path}: not read ({error}); its tuning tables are left out")
            continue
        if isinstance(record, dict) and isinstance(record.get("methods"), dict):
            found.append(record)
        else:
            problems.append(f"{path}: not a tuning record; its tuning tables are left out")
    return found, problems


def trial_rows(tunings: list[dict]) -> pd.DataFrame:
    rows = []
    for tuning in tunings:
        for method, record in (tuning.get("methods") or {}).items():
            for trial in record.get("trials", []):
                rows.append({"method": method, "trial": trial["trial"], "state": trial["state"],
                             "objective": trial.get("objective"),
                             "by_seed": json.dumps(trial.get("by_seed") or {}), "reason": trial.get("reason"),
                             **{f"param_{k}": v for k, v in trial["params"].items()}})
    return pd.DataFrame(rows, columns=None if rows else TRIAL_COLUMNS)


def t_interval(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return math.nan, math.nan
    mean, sem = float(np.mean(values)), float(stats.sem(values))
    half = float(stats.t.ppf(0.975, len(values) - 1)) * sem
    return mean - half, mean + half


def tuning_rows(tunings: list[dict]) -> pd.DataFrame:
    rows = []
    for tuning in tunings:
        for method, record in (tuning.get("methods") or {}).items():
            trials = record.get("trials", [])
            failed = sum(t["state"] != "complete" for t in trials)
            base = {"method": method, "trials": len(trials), "failed_trials": failed,
                    "tuning_seeds": " ".join(map(str, tuning.get("seeds", []))),
                    "heldout_seeds": " ".join(map(str, tuning.get("heldout", [])))}
            best = record.get("best")
            if best is None:
                rows.append({**base, "note": record.get("error", "no trial completed")})
                continue
            held = record.get("heldout", {})
            tuned, default = held.get(TUNED, {}), held.get(DEFAULT, {})
            low, high = t_interval(list((tuned.get("by_seed") or {}).values()))
            value, baseline = tuned.get("objective"), default.get("objective")
            notes = [f"{stage}: {part['reason']}" for stage, part in held.items() if part.get("reason")]
            rows.append({**base, "best": ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in best["params"].items()),
                         "best_trial": best["trial"], "objective_tuning": best["objective"],
                         "objective_heldout": value, "heldout_low": low, "heldout_high": high,
                         "objective_default": baseline,
                         "optimism": None if value is None else value - best["objective"],
                         "gain": None if value is None or baseline is None else baseline - value,
                         "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=TUNING_COLUMNS)



def without_trials(frame: pd.DataFrame, jobs: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """The results but a tuning's trial jobs (job field `tuning`: trial): each trial is a row of trials.csv, and a
    trial that failed is a finding of the tuning, not a failed job of the sweep."""
    kept = [job for job in jobs if job.get("tuning") != TRIAL]
    if len(kept) == len(jobs) or "tuning" not in frame:
        return frame, kept
    return frame[frame["tuning"] != TRIAL].reset_index(drop=True), kept
