"""The objective of a tuning's batches of jobs, and the tables of a tuning sweep (`experiment=tune`, docs/tuning.md).

The objective (`RULE`) is not the leaderboard's rule, which ranks methods against each other (one method's tuning has
no other method to rank against); it takes the leaderboard's per-metric distances (`leaderboard.block_scores`): per
block (a target and a training seed), the method's distance to each metric's ideal (|v − ideal|, or |v − M_r's v|
for a metric judged against the retrained model), divided by the metric's declared `scale` (privleak's percent:
100); the mean over the metrics, then over the blocks. Lower is better: 0 is a method at every ideal. A scaled
distance lies in [0, 1] where the metric's values span at most its scale (accuracies, ΔMIA, forget quality, model
utility, ROUGE); |privleak|/100 can exceed 1. The metrics are the catalogue's leaderboard ones, or those
`tune.objective` names. With `tune.stop_step` a trial's objective is that of its best step record (`step_objective`),
and its held-out jobs, rerun to that step, are scored on their final records as any.

From `tuning.json` (the sweeper's record, core/tuning.py; a record of one replicate without a defaults' trial, as
the sweeper wrote before replicates, reads as replicate 0):

    trials.csv            every trial of every replicate: method, replicate, trial, how its point was drawn
                          (defaults | random | tpe), state (complete | failed), objective on the tuning seeds, its
                          value per tuning seed, the reason of a failed trial, the point (`param_<option>` columns)
    tuning.csv            per method and replicate: the best point and its trial; whether it beat the defaults'
                          trial on the tuning seeds, and by how much; whether the search was random (no point drawn
                          by TPE's model); on the held-out seeds the best point's objective with its 95% t-interval
                          and the defaults'; the optimism (held-out minus tuning objective of the best point) with a
                          95% two-sample t-interval; the gain (defaults minus tuned, held out) with a 95% paired
                          t-interval and the paired t-test's p-value
    tuning_replicates.csv per method, across replicates: the chosen points' held-out objective (mean, std, min,
                          max), whether the chosen points differ, the mean optimism and the mean gain
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
from unlearnbench.core.tuning import DEFAULT, DEFAULTS, RANDOM, TPE, TRIAL, TUNED, TUNING
from unlearnbench.report.compute.leaderboard import block_scores, parse_metrics
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.stats import t_interval
from unlearnbench.report.read.collect import catalogue_of, load_results
from unlearnbench.runtime.errors import UserError


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


RULE = Note("objective_rule")  # its words: render/words.py


def objective_rule(metrics: list[tuple[str, str]], catalogue: Catalogue) -> dict:
    """What tuning.json says of the objective: the rule (a note, worded by whoever writes the file), and each metric
    with its split, ideal and scale."""
    return {"rule": RULE,
            "metrics": [{"metric": metric, "split": split or None, "label": catalogue.label(metric, split),
                         "ideal": catalogue.ideal(metric), "scale": catalogue.metric(metric).scale}
                        for metric, split in metrics]}


@dataclass
class Scored:
    """A batch's objective: the value per block (target, training seed), their mean; or why there is none; and the
    rule it was computed by (`objective_rule`), where the batch's results told the metrics."""

    blocks: dict[tuple[str, int], float] = field(default_factory=dict)
    reason: Note | None = None
    rule: dict | None = None
    step: int | None = None  # with `tune.stop_step`: the chosen step record's step and epoch, and each candidate's
    epoch: float | None = None  # objective (None where it has none), keyed by the unit the method stops at
    steps: dict[int, float | None] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return float(np.mean(list(self.blocks.values()))) if self.blocks and self.reason is None else math.nan

    def as_record(self) -> dict:
        """What tuning.json keeps of it: the state, the objective, its value per training seed, the reason (a note,
        worded by whoever writes the file)."""
        failed = self.reason is not None
        stopped = {"step": self.step, "epoch": self.epoch, "steps": self.steps} if self.steps else {}
        return {"state": "failed" if failed else "complete", "objective": None if failed else self.value,
                "by_seed": {} if failed else self.by_seed(), "reason": self.reason, **stopped}

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
    failed = failed_job(jobs, method)
    if failed is not None:
        return Scored(reason=failed)
    mine = frame[(frame["role"] == "unlearned") & (frame["method"] == method)] if "role" in frame else frame
    blocks = sorted(set(zip(mine.get("target", []), mine.get("seed_train", []), strict=True)), key=str)
    if not blocks:
        return Scored(reason=Note("no_records", {"method": method}))
    values = frame.assign(split=frame["split"].fillna(""), method=frame["method"].fillna(""))  # as the report has
    # them (analysis.prepare): M_r's rows keep their place in the groups
    distances: dict[tuple, list[float]] = {block: [] for block in blocks}
    for metric, split in metrics:
        scores = block_scores(values, metric, split, catalogue)
        column = scores[method] if method in scores else pd.Series(dtype=float)
        for block in blocks:
            value = column.get(block)
            if value is None or not math.isfinite(value):
                return Scored(reason=Note("no_value", {"metric": metric, "split": split, "target": block[0],
                                                       "seed": block[1]}))
            distances[block].append(float(value) / catalogue.metric(metric).scale)
    return Scored({(str(target), int(seed)): float(np.mean(found)) for (target, seed), found in distances.items()})


def failed_job(jobs: list[dict], method: str) -> Note | None:
    """Why the batch has no objective where a job failed, or `method` failed or diverged in one; else None."""
    for job in jobs:
        failures = [f for f in job.get("failures") or [] if f.get("method") == method]
        if job.get("status") != "complete" or failures:
            error = job.get("error") or (failures[0]["error"] if failures else job.get("status"))
            return Note("job_failed", {"folder": Path(job["folder"]).name, "error": str(error).splitlines()[0]})
    return None


def score_folders(folders: Sequence[Path], method: str, names: Sequence[str] | None,
                  unit: str | None = None) -> Scored:
    """The objective of `method` over the jobs in `folders` (each a job folder with its result.json): on their final
    records, or with `unit` ("step" or "epoch", `tune.stop_step`) at the best of their step records
    (`step_objective`)."""
    frame, jobs = load_results(list(folders))
    missing = [f for f in folders if not any(j["folder"].endswith(Path(f).name) for j in jobs)]
    if missing:
        return Scored(reason=Note("no_result", {"folder": Path(missing[0]).name}))
    catalogue = catalogue_of(jobs)
    metrics = objective_metrics(names, catalogue)
    scored = (objective(frame, jobs, catalogue, method, metrics) if unit is None
              else step_objective(frame, jobs, catalogue, method, metrics, unit))
    scored.rule = objective_rule(metrics, catalogue)
    return scored


def step_objective(frame: pd.DataFrame, jobs: list[dict], catalogue: Catalogue, method: str,
                   metrics: list[tuple[str, str]], unit: str) -> Scored:
    """`method`'s objective at the best of its step records (`tune.stop_step`, docs/tuning.md): for each step
    (`unit` "step") or epoch count ("epoch": the image methods stop at a whole epoch) after the first update, the
    same objective as `objective`, computed with the method's step records there in place of its final records
    (M_o's and M_r's final records stay the references); the lowest wins, the earliest on ties. A batch whose every
    candidate lacks a value fails with the first candidate's reason. A `UserError` in one line where the jobs hold
    no step record of the method or none of an objective metric: no step could ever be scored."""
    failed = failed_job(jobs, method)
    if failed is not None:
        return Scored(reason=failed)
    records = step_records(jobs, method, unit)
    held = set(zip(records.get("metric", []), records.get("split", []), strict=True))
    lacking = [f"{metric}:{split}" if split else metric for metric, split in metrics if (metric, split) not in held]
    if lacking:
        recorded = ", ".join(sorted(f"{m}:{s}" if s else m for m, s in held)) or "none"
        raise UserError(f"tune.stop_step=true scores the objective on the trials' step records, which hold no "
                        f"{', '.join(lacking)} (they hold: {recorded}); name recorded metrics with "
                        f"tune.objective=[...] or evaluation.during.metrics=[...]")
    finals = frame[~((frame["role"] == "unlearned") & (frame["method"] == method))]
    scored = {at: objective(pd.concat([finals, part], ignore_index=True), jobs, catalogue, method, metrics)
              for at, part in records.groupby(unit, sort=True)}
    done = {at: one for at, one in scored.items() if one.reason is None}
    steps = {int(at): (one.value if one.reason is None else None) for at, one in scored.items()}
    if not done:
        return Scored(reason=next(iter(scored.values())).reason, steps=steps)
    best = min(done, key=lambda at: (done[at].value, at))
    chosen = records[records[unit] == best]
    epochs = chosen["epoch"].dropna()
    return Scored(done[best].blocks, step=int(chosen["step"].min()),
                  epoch=float(epochs.mean()) if len(epochs) else None, steps=steps)


def step_records(jobs: list[dict], method: str, unit: str) -> pd.DataFrame:
    """`method`'s step records after its first update (step > 0; M_o at step 0 is no stopping point), as rows of the
    records' frame with `step` and `epoch`; with `unit` "epoch", those at a whole epoch count, the first step of
    each (job, epoch) where several share one."""
    rows = [row for job in jobs for row in job.get("steps") or []
            if row.get("role") == "unlearned" and row.get("method") == method and row["step"] > 0]
    frame = pd.DataFrame(rows, columns=None if rows else ["metric", "split", "step", "epoch"])
    if unit == "epoch" and not frame.empty:
        epoch = pd.to_numeric(frame["epoch"], errors="coerce")
        frame = frame[(epoch > 0) & (epoch % 1 == 0)].assign(epoch=epoch)
        frame = frame.sort_values("step", kind="stable").drop_duplicates(
            subset=["folder", "target", "metric", "split", "epoch"], keep="first")
    return frame.assign(split=frame["split"].fillna(""))


TRIAL_COLUMNS = ["method", "replicate", "trial", "drawn", "state", "objective", "by_seed", "reason"]
TUNING_COLUMNS = ["method", "replicate", "best", "best_trial", "trials", "failed_trials", "startup_trials",
                  "tpe_trials", "random_search", "tuning_seeds", "objective_tuning", "defaults_tuning",
                  "beat_defaults", "beat_by", "heldout_seeds", "objective_heldout", "heldout_low", "heldout_high",
                  "objective_default", "optimism", "optimism_low", "optimism_high", "gain", "gain_low", "gain_high",
                  "gain_p", "note"]
STOP_COLUMNS = ["stop_step", "stop_epoch"]  # with `tune.stop_step`: the best trial's step record
REPLICATE_COLUMNS = ["method", "replicates", "heldout_mean", "heldout_std", "heldout_min", "heldout_max",
                     "distinct_points", "points_differ", "beat_defaults", "random_search", "optimism_mean",
                     "optimism_low", "optimism_high", "gain_mean", "gain_low", "gain_high"]
LEVEL = 0.95  # of every interval of the tuning tables
OPTUNA_STARTUP = 10  # TPE's random start-up trials where tuning.json does not say (Optuna's default)


def read_tunings(folders: Sequence[Path]) -> tuple[list[dict], list[Note]]:
    """(the tuning records of the sweep folders that hold one, a note per record that cannot be read): a folder
    without `tuning.json` is no tuning sweep."""
    found, problems = [], []
    for folder in folders:
        path = Path(folder) / TUNING
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            problems.append(Note("tuning_unread", {"path": str(path), "error": str(error)}))
            continue
        if isinstance(record, dict) and isinstance(record.get("methods"), dict):
            found.append(record)
        else:
            problems.append(Note("not_tuning", {"path": str(path)}))
    return found, problems


def replicates_of(tuning: dict, record: dict) -> list[dict]:
    """A method's replicates, each with its `replicate`, tuning `seeds`, `trials` (each with how it was `drawn`),
    `best`, `heldout` or `error`. A record of the single-replicate layout (no `replicates`: the trials, best and
    held-out judgement at the method's level, no defaults' trial, TPE's ten random start-up trials) is replicate 0."""
    if isinstance(record.get("replicates"), list):
        return record["replicates"]
    trials, complete = [], 0
    for trial in record.get("trials", []):  # TPE's model draws once the study holds 10 complete trials
        trials.append({**trial, "drawn": TPE if complete >= OPTUNA_STARTUP else RANDOM})
        complete += trial.get("state") == "complete"
    return [{**record, "replicate": 0, "seeds": tuning.get("seeds", []), "trials": trials,
             "tpe_trials": sum(t["drawn"] == TPE for t in trials)}]


def trial_rows(tunings: list[dict]) -> pd.DataFrame:
    rows = []
    for tuning in tunings:
        for method, record in (tuning.get("methods") or {}).items():
            for replicate in replicates_of(tuning, record):
                for trial in replicate.get("trials", []):
                    rows.append({"method": method, "replicate": replicate["replicate"], "trial": trial["trial"],
                                 "drawn": trial.get("drawn"), "state": trial["state"],
                                 "objective": trial.get("objective"), "by_seed": json.dumps(trial.get("by_seed") or {}),
                                 "reason": trial.get("reason"), **stop_columns(trial),
                                 **{f"param_{k}": v for k, v in trial["params"].items()}})
    return pd.DataFrame(rows, columns=None if rows else TRIAL_COLUMNS)


def optimism_interval(heldout: Sequence[float], tuning: Sequence[float],
                      level: float = LEVEL) -> tuple[float, float]:
    """The two-sample t-interval of mean(heldout) − mean(tuning), the per-seed objectives of the chosen point on
    the held-out and on the tuning training seeds, which are independent draws: Student's pooled variance, df =
    n_h + n_t − 2 (with one tuning seed the held-out seeds' variance alone, df = n_h − 1); NaN where df < 1.

    Its limit: the tuning value is the best of many trials, selected on those very seeds, so it is not a free draw
    of the point's objective there; the interval treats it as one, and covers the optimism of this selection only
    as far as the point's per-seed spread is the same on the tuning and the held-out seeds."""
    held, tuned = np.asarray(heldout, float), np.asarray(tuning, float)
    df = held.size + tuned.size - 2
    if held.size < 1 or tuned.size < 1 or df < 1:
        return math.nan, math.nan
    squares = float(((held - held.mean()) ** 2).sum() + ((tuned - tuned.mean()) ** 2).sum())
    error = math.sqrt(squares / df * (1 / held.size + 1 / tuned.size))
    centre, half = float(held.mean() - tuned.mean()), float(stats.t.ppf((1 + level) / 2, df)) * error
    return centre - half, centre + half


def paired_gain(default: dict, tuned: dict, level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, p) of the gain, the defaults' objective minus the tuned point's on the same held-out training
    seeds (`{seed: objective}` each): the paired t-interval of the mean difference and the two-sided paired t-test
    of a zero mean, df = n − 1 (Student's paired test: a training seed's model is shared by both, so its luck
    cancels). NaN with fewer than two seeds; a difference the same on every seed has a zero-width interval and, as
    scipy's `ttest_rel`, p NaN where it is 0 and 0 otherwise."""
    seeds = [seed for seed in default if seed in tuned]
    if len(seeds) < 2:
        return math.nan, math.nan, math.nan
    differences = np.array([default[seed] - tuned[seed] for seed in seeds], float)
    mean, sem = float(differences.mean()), float(differences.std(ddof=1) / math.sqrt(differences.size))
    if sem == 0:
        return mean, mean, math.nan if mean == 0 else 0.0
    df = differences.size - 1
    half = float(stats.t.ppf((1 + level) / 2, df)) * sem
    return mean - half, mean + half, float(2 * stats.t.sf(abs(mean / sem), df))


def stop_columns(trial: dict) -> dict:
    """A trial's chosen step and epoch where the stopping step was tuned (`tune.stop_step`), else nothing: a tuning
    without it keeps its columns."""
    return {"stop_step": trial.get("step"), "stop_epoch": trial.get("epoch")} if "steps" in trial else {}


def tuning_rows(tunings: list[dict]) -> pd.DataFrame:
    rows = []
    for tuning in tunings:
        for method, record in (tuning.get("methods") or {}).items():
            for replicate in replicates_of(tuning, record):
                rows.append(replicate_row(method, tuning, replicate))
    stopped = any("stop_step" in row for row in rows)
    return pd.DataFrame(rows, columns=[*TUNING_COLUMNS, *(STOP_COLUMNS if stopped else [])])


def replicate_row(method: str, tuning: dict, replicate: dict) -> dict:
    """One replicate's row of tuning.csv; its `best` and `note` cells hold notes (`NOTE_COLUMNS`)."""
    trials = replicate.get("trials", [])
    tpe = sum(t.get("drawn") == TPE for t in trials)
    row = {"method": method, "replicate": replicate["replicate"], "trials": len(trials),
           "failed_trials": sum(t["state"] != "complete" for t in trials),
           "startup_trials": tuning.get("startup_trials", OPTUNA_STARTUP), "tpe_trials": tpe,
           "random_search": tpe == 0, "tuning_seeds": " ".join(map(str, replicate.get("seeds", []))),
           "heldout_seeds": " ".join(map(str, tuning.get("heldout", [])))}
    best = replicate.get("best")
    if best is None:
        error = replicate.get("error")  # the sweeper's words in tuning.json
        why = Note("tuning_error", {"error": error}) if "error" in replicate else Note("no_trial_completed")
        return {**row, "note": (why,)}
    point = {"point": point_label({**best["params"], **stop_label(best)})}
    chosen = Note("defaults_point", point) if best.get("drawn") == DEFAULTS else Note("point", point)
    return {**row, "best": (chosen,), **stop_columns(best),
            "best_trial": best["trial"], "objective_tuning": best["objective"], **against_defaults(trials, best),
            **judgement(best, replicate.get("heldout", {}))}


def judgement(best: dict, held: dict) -> dict:
    """The held-out columns of a replicate's row: the tuned point's and the defaults' objective, the held-out
    interval, the optimism and the gain with their intervals, the gain's p-value, and the notes."""
    tuned, default = held.get(TUNED, {}), held.get(DEFAULT, {})
    value, baseline = tuned.get("objective"), default.get("objective")
    tuned_seeds, tuning_seeds = seed_values(tuned), seed_values(best)
    optimism = optimism_interval(list(tuned_seeds.values()), list(tuning_seeds.values()))
    gain = paired_gain(seed_values(default), tuned_seeds)
    notes = [Note("heldout_failed", {"stage": stage, "reason": part["reason"]})
             for stage, part in held.items() if part.get("reason")]
    return {"objective_heldout": value, **dict(zip(("heldout_low", "heldout_high"),
                                                   t_interval(list(tuned_seeds.values()), LEVEL), strict=True)),
            "objective_default": baseline, "optimism": None if value is None else value - best["objective"],
            "optimism_low": optimism[0], "optimism_high": optimism[1],
            "gain": None if value is None or baseline is None else baseline - value,
            "gain_low": gain[0], "gain_high": gain[1], "gain_p": gain[2],
            "note": (*notes, *interval_notes(len(tuned_seeds), len(tuning_seeds)))}


def seed_values(part: dict) -> dict[str, float]:
    """A batch's objective per training seed (tuning.json's `by_seed`)."""
    return {str(seed): float(value) for seed, value in (part.get("by_seed") or {}).items()}


def stop_label(trial: dict) -> dict:
    """The chosen stopping step as the point's label shows it beside the options: its step, and its epoch where
    the method stops at an epoch count."""
    if "steps" not in trial:
        return {}
    epoch = trial.get("epoch")
    whole = epoch is not None and float(epoch).is_integer()
    return {"stop_step": trial["step"], **({"stop_epoch": int(epoch)} if whole else {})}


def point_label(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def against_defaults(trials: list[dict], best: dict) -> dict:
    """The defaults' trial's objective on the tuning seeds, whether the best trial beat it (the best trial is
    another trial: it scored lower, or the defaults failed) and by how much (defaults minus best, on the tuning
    seeds); NaN where the record has no defaults' trial."""
    defaults = next((t for t in trials if t.get("drawn") == DEFAULTS), None)
    if defaults is None:
        return {"defaults_tuning": math.nan, "beat_defaults": None, "beat_by": math.nan}
    value = defaults.get("objective") if defaults["state"] == "complete" else None
    return {"defaults_tuning": math.nan if value is None else value,
            "beat_defaults": best["trial"] != defaults["trial"],
            "beat_by": math.nan if value is None else value - best["objective"]}


def interval_notes(heldout: int, tuning: int) -> list[Note]:
    """Where too few seeds leave an interval out (NaN), or the optimism's rests on the held-out seeds alone."""
    if heldout == 0:
        return []
    notes = [] if heldout >= 2 else [Note("one_heldout_seed")]
    if heldout + tuning < 3:
        notes.append(Note("no_optimism_interval"))
    elif tuning == 1:
        notes.append(Note("heldout_variance_only"))
    return notes


def replicate_rows(table: pd.DataFrame) -> pd.DataFrame:
    """tuning_replicates.csv from tuning.csv: per method, across its replicates, the chosen point's held-out
    objective (mean, std, min, max), the number of distinct chosen points, how many replicates beat the defaults on
    their tuning seeds and how many were random search, the mean optimism and the mean gain with their
    t-intervals over the replicates (df R − 1). The replicates share the held-out seeds, so the spread is that of
    the search (its sampler seed and tuning seeds), not of the held-out judgement, and the intervals are those of a
    new tuning's optimism and gain judged on these held-out seeds."""
    rows = []
    for method, mine in table.groupby("method", sort=False):
        held = pd.to_numeric(mine["objective_heldout"], errors="coerce").dropna()
        optimism, gain = (pd.to_numeric(mine[c], errors="coerce").dropna().tolist() for c in ("optimism", "gain"))
        points = mine["best"].dropna().map(repr)  # a point's notes (read back from tuning.csv: its words) as a key
        rows.append({"method": method, "replicates": len(mine), "heldout_mean": held.mean(),
                     "heldout_std": held.std(ddof=1) if len(held) > 1 else math.nan, "heldout_min": held.min(),
                     "heldout_max": held.max(), "distinct_points": points.nunique(),
                     "points_differ": points.nunique() > 1,
                     "beat_defaults": sum(bool(v) for v in mine["beat_defaults"] if v is not None and v == v),
                     "random_search": int(mine["random_search"].astype(bool).sum()),
                     "optimism_mean": np.mean(optimism) if optimism else math.nan,
                     **dict(zip(("optimism_low", "optimism_high"), t_interval(optimism, LEVEL), strict=True)),
                     "gain_mean": np.mean(gain) if gain else math.nan,
                     **dict(zip(("gain_low", "gain_high"), t_interval(gain, LEVEL), strict=True))})
    return pd.DataFrame(rows, columns=REPLICATE_COLUMNS)


def without_trials(frame: pd.DataFrame, jobs: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """The results but a tuning's trial jobs (job field `tuning`: trial): each trial is a row of trials.csv, and a
    trial that failed is a finding of the tuning, not a failed job of the sweep."""
    kept = [job for job in jobs if job.get("tuning") != TRIAL]
    if len(kept) == len(jobs) or "tuning" not in frame:
        return frame, kept
    return frame[frame["tuning"] != TRIAL].reset_index(drop=True), kept
