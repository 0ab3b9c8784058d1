"""Forgetting quality per example, from the jobs' `examples.parquet`: the NeurIPS 2023 unlearning competition's score,
LiRA and KLOM, per pool of models, for one original model and across training seeds (docs/forget-quality.md).

A *pool* is a set of jobs of one configuration and target that share one forget set D_f: its N unlearned models of
a method and the same jobs' N retrained models. The designs:
- A(i): the jobs of training seed i (its unlearning seeds), the competition's design: every M_u comes from one M_o;
- B: one job per training seed (the one with the smallest unlearning seed), the multi-training-seed design.
Jobs whose D_f is not the configuration's most common one are left out (a random-sample sweep without a fixed
`seeds.forget` draws a new D_f per job), and the report says which and why: a per-example statistic never mixes
examples of different forget sets.

Which splits of examples.parquet hold D_f, D_r and D'_r, and which records scale the score, each task declares in
its catalogue (`Catalogue.per_example`, carried by every job's result.json): the report names no task's split or
metric. A job whose task declares none (it writes no examples the report can score) has no per-example scores.

Per pool and method (`forgetting` holds the formulas): ε per forget example, its points, F, the final score
F · (acc_u(D_r)/acc_r(D_r)) · (acc_u(D'_r)/acc_r(D'_r)) with the declared accuracy averaged over the pool (from
result.json, on the whole of D_r and D'_r; NaN where the task declares none), N and the resolution cap
⌈ln(N − 1)⌉, F's permutation null, and LiRA's AUC and TPR at low FPR; the declared MIA of result.json beside them.
KLOM (Georgiev et al. 2024) per split, D_f, D_r and D'_r: the 95th percentile over the split's examples of the
per-example KL divergence between the pool's unlearned and retrained margin histograms, with a permutation null
drawn as F's is. It compares the examples that every model of the pool holds: an example is identified by its split
and `index`, D_r and D'_r are the jobs' samples of `evaluation.examples_per_split` (the same in every job with the
same D_f and data), and a NaN margin leaves its example out.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from unlearnbench.core.catalogue import PerExample
from unlearnbench.core.files import EXAMPLES
from unlearnbench.core.result import SchemaError
from unlearnbench.core.result import read_examples as examples_table
from unlearnbench.report.compute import forgetting
from unlearnbench.report.compute.analysis import sort_rows
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.seed_design import SIGNIFICANT, wilson
from unlearnbench.report.read.catalogue import legacy_catalogue
from unlearnbench.runtime.errors import UserError

FORGET_PERMUTATIONS = forgetting.NULL_PERMUTATIONS  # random splits behind each F's null (`report.permutations`)
KLOM_KINDS = ("forget", "retain", "test")  # KLOM's columns of D_f, D_r and D'_r (`split_kinds`)
KLOM_COLUMNS = [f"klom_{kind}{suffix}" for kind in KLOM_KINDS
                for suffix in ("", "_null_median", "_null_95pct", "_examples")]
QUALITY_COLUMNS = ["target", "method", "design", "seed_train", "n_models", "epsilon_cap", "forget_quality",
                   "forget_quality_null_median", "forget_quality_null_5pct", "distinguishable", "score", "lira_auc",
                   "lira_tpr_at_1pct", "lira_tpr_at_0.1pct", *KLOM_COLUMNS, "mia_unlearned", "mia_retrained",
                   "examples", "note"]
EXAMPLE_COLUMNS = ["target", "method", "design", "seed_train", "index", "label", "epsilon"]
ACROSS_COLUMNS = ["target", "method", "designs_A", "n_models_A", "forget_quality_A_mean", "forget_quality_A_std",
                  "forget_quality_A_min", "forget_quality_A_max", "forget_quality_B", "n_models_B"]
BEST_COLUMNS = ["target", "designs_A", "best_B", "best_A", "p_best_differs", "p_low", "p_high"]


def per_example_of(job: dict) -> PerExample | None:
    """The per-example declarations of the job's task; None where it declares none (no examples to score). A job
    dict built without a catalogue (not by `load_results`) is read as a schema-1 result of its task would be."""
    catalogue = job["catalogue"] if "catalogue" in job else legacy_catalogue(job.get("task"))
    return catalogue.per_example


def split_kinds(per_example: PerExample) -> dict[str, str]:
    """{split of examples.parquet: its `KLOM_KINDS` name}: the task's declared D_f, D_r and D'_r."""
    return dict(zip((per_example.forget, per_example.retain, per_example.unseen), KLOM_KINDS, strict=True))


def read_examples(path: Path, per_example: PerExample) -> pd.DataFrame:
    """The unlearned and retrained rows of a job's examples file, every split its task declares (target, role,
    method, split, index, label, conf): D_f for ε, F and LiRA, all three splits for KLOM. An `OSError` or a
    `SchemaError` with a one-line reason where the file is not a valid examples table; a non-finite conf fails it on
    D_f only (elsewhere KLOM leaves a NaN's example out and clips ±∞, as its reference does). The contract's own
    checks are its reader's (`core.result.read_examples`); the splits are the task's declarations."""
    frame = examples_table(path)
    splits = split_kinds(per_example)
    bad_split = ~frame["split"].isin(splits)
    if bad_split.any():
        raise SchemaError(f"split {frame['split'][bad_split].iloc[0]!r} is not one of {', '.join(splits)}")
    forget = frame[frame["split"] == per_example.forget]
    if not np.isfinite(forget["conf"].to_numpy(dtype=float)).all():
        raise SchemaError("a non-finite conf on the forget set")
    rows = frame[frame["role"] != "original"][["target", "role", "method", "split", "index", "label", "conf"]]
    return rows.astype({"target": str, "role": str}).reset_index(drop=True)


def load_examples(jobs: list[dict], frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{folder: `read_examples`' rows} of every complete job with an `examples.parquet` its task declares splits
    for. A damaged file makes its job failed (status `invalid`, the reason as its error, in `jobs` and in `frame`):
    its models are not scored, and its records leave the statistics as those of a damaged result.json do. A job
    without the file (written with `evaluation.examples=false`, or before it existed) or without declarations simply
    has no per-example scores."""
    examples = {}
    for job in jobs:
        path = Path(job["folder"]) / EXAMPLES
        per_example = per_example_of(job) if job.get("status") == "complete" else None
        if per_example is None or not path.exists():
            continue
        try:
            examples[job["folder"]] = read_examples(path, per_example)
        except (OSError, ValueError) as error:
            job["status"], job["error"] = "invalid", f"{EXAMPLES}: {error}"
            if "folder" in frame:
                frame.loc[frame["folder"] == job["folder"], "status"] = "invalid"
    return examples


@dataclass
class ForgetQuality:
    """The report's per-example tables (see the module docstring) and what it left out."""

    quality: pd.DataFrame  # forget_quality.csv
    by_example: pd.DataFrame  # forget_quality_by_example.csv
    across: pd.DataFrame  # forget_quality_across_seeds.csv: F of the A(i) against B's, per method
    best: pd.DataFrame  # how often A(i)'s best method by F is not B's
    left_out: list[Note] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.quality.empty


@dataclass
class Job:
    folder: str
    ident: tuple  # the configuration's values
    seeds: tuple[int, int, int]  # train, unlearn, eval
    per_example: PerExample  # its task's declarations: which splits and records the scores read
    rows: pd.DataFrame  # forget-set rows of one target
    margins: dict[tuple[str, str | None, str], pd.Series] = field(default_factory=dict)  # `margins_of`


def forget_signature(rows: pd.DataFrame) -> str:
    """The identity of a job's D_f for one target: a hash of its sorted example indices."""
    retrained = rows[rows["role"] == "retrained"]
    indices = np.sort((retrained if len(retrained) else rows)["index"].unique())
    return hashlib.sha1(indices.astype(np.int64).tobytes()).hexdigest()


def margins_of(rows: pd.DataFrame, per_example: PerExample) -> dict[tuple[str, str | None, str], pd.Series]:
    """{(role, method or None, split kind): conf by example index} of one job and target, for KLOM: built once per
    job so that each pool and method picks its margins without filtering the rows again. NaN confs are dropped (no
    measurement: their examples are left out of the pools that lack them)."""
    margins = {}
    kinds = rows["split"].map(split_kinds(per_example))
    for (role, method, kind), part in rows.groupby([rows["role"], rows["method"], kinds], dropna=False, sort=False):
        conf = pd.Series(part["conf"].to_numpy(dtype=float), index=part["index"].to_numpy(dtype=np.int64))
        margins[(role, method if isinstance(method, str) else None, kind)] = conf[conf.notna()]
    return margins


def targets_of(jobs: list[dict], examples: dict[str, pd.DataFrame], keys: list[str]) -> dict[tuple, list[Job]]:
    """{(configuration, target): its jobs}, in folder order; a target without D_f rows of an unlearned model, and a
    job whose task declares no per-example splits, are not scored."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        rows, per_example = examples.get(job["folder"]), per_example_of(job)
        if rows is None or per_example is None:
            continue
        ident = tuple("" if job.get(k) is None else str(job.get(k)) for k in keys)
        seeds = tuple(int(job[k]) if job.get(k) is not None else int(job["seed_train"])
                      for k in ("seed_train", "seed_unlearn", "seed_eval"))
        for target, part in rows.groupby("target", sort=False):
            forget = part[part["split"] == per_example.forget]
            if (forget["role"] == "unlearned").any():
                groups.setdefault((*ident, target), []).append(Job(job["folder"], ident, seeds, per_example, forget,
                                                                   margins_of(part, per_example)))
    return groups


def same_forget_set(group: tuple, jobs: list[Job]) -> tuple[list[Job], Note | None]:
    """(the jobs holding the group's most common D_f, a line naming the others), never mixing forget sets."""
    signatures = [forget_signature(job.rows) for job in jobs]
    counts = pd.Series(signatures).value_counts(sort=False)
    chosen = counts.index[int(np.argmax(counts.to_numpy()))]
    kept = [job for job, sig in zip(jobs, signatures, strict=True) if sig == chosen]
    others = [Path(job.folder).name for job, sig in zip(jobs, signatures, strict=True) if sig != chosen]
    if not others:
        return kept, None
    return kept, Note("forget_sets_differ", {"group": list(group[:-1]), "target": group[-1], "others": others,
                                             "jobs": len(jobs), "kept": len(kept)})


def design_pools(jobs: list[Job]) -> list[tuple[str, int | None, list[Job]]]:
    """(design, training seed or None, jobs) of A(i) for every training seed with two jobs or more, and of B (per
    training seed, the job of its smallest unlearning then evaluation seed) where there are two training seeds. B
    takes every job of those seeds: one job of the tool's holds every method, imported runs one method each."""
    by_seed: dict[int, list[Job]] = {}
    for job in sorted(jobs, key=lambda j: j.seeds):
        by_seed.setdefault(job.seeds[0], []).append(job)
    pools: list[tuple[str, int | None, list[Job]]] = [("A", seed, part) for seed, part in by_seed.items()
                                                      if len(part) >= 2]
    if len(by_seed) >= 2:
        pools.append(("B", None, [job for part in by_seed.values() for job in part if job.seeds == part[0].seeds]))
    return pools


def pool_matrices(pool: list[Job], method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(unlearned confs N × E, retrained confs N × E, example indices, labels, folders) over the pool's jobs that
    hold both the method's and the retrained model's rows."""
    unlearned, retrained, folders = [], [], []
    indices = labels = None
    for job in pool:
        rows = job.rows
        mine = rows[(rows["role"] == "unlearned") & (rows["method"] == method)].sort_values("index")
        gold = rows[rows["role"] == "retrained"].sort_values("index")
        if mine.empty or gold.empty or len(mine) != len(gold):
            continue
        if indices is None:
            indices, labels = gold["index"].to_numpy(), gold["label"].to_numpy()
        unlearned.append(mine["conf"].to_numpy(dtype=float))
        retrained.append(gold["conf"].to_numpy(dtype=float))
        folders.append(job.folder)
    if not folders:
        return np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0, np.int64), np.zeros(0, np.int64), []
    return np.stack(unlearned), np.stack(retrained), indices, labels, folders


def pool_mean(values: dict, folders: list[str], *key) -> float:
    found = [values.get((folder, *key)) for folder in folders]
    found = [v for v in found if v is not None and math.isfinite(v)]
    return float(np.mean(found)) if len(found) == len(folders) and found else math.nan


def scaling_metrics(jobs: list[dict]) -> set[str]:
    """The metrics whose records the jobs' tasks declare for the score and beside it (`accuracy`, `privacy`)."""
    declared = [per_example_of(job) for job in jobs]
    return {name for found in declared if found for name in (found.accuracy, found.privacy) if name}


def record_values(frame: pd.DataFrame, metrics: set[str]) -> dict:
    """{(folder, target, role, method, metric, split): value} of the records of `metrics` (`scaling_metrics`) that
    the scores use."""
    if frame.empty or "folder" not in frame:
        return {}
    wanted = frame[(frame["status"] == "complete") & frame["metric"].isin(metrics)
                   & frame["role"].isin(["unlearned", "retrained"])]
    values = {}
    for row in wanted[["folder", "target", "role", "method", "metric", "split", "value"]].itertuples(index=False):
        method = row.method if isinstance(row.method, str) else None
        value = None if row.value is None or (isinstance(row.value, float) and math.isnan(row.value)) else row.value
        values[(row.folder, str(row.target), row.role, method, row.metric, row.split)] = value
    return values


def score_pool(unlearned: np.ndarray, retrained: np.ndarray, permutations: int) -> dict:
    """F, its null, ε per example and LiRA for one pool (N ≥ 2)."""
    n = len(unlearned)
    epsilons = forgetting.epsilons(unlearned, retrained)
    quality = float(forgetting.points(epsilons, n).mean())
    null = forgetting.null_qualities(unlearned, retrained, permutations)
    attack = forgetting.lira(unlearned, retrained)
    median, low = (float(np.median(null)), float(np.percentile(null, 5))) if len(null) else (math.nan, math.nan)
    return {"epsilons": epsilons, "n_models": n, "epsilon_cap": forgetting.epsilon_cap(n),
            "forget_quality": quality, "forget_quality_null_median": median, "forget_quality_null_5pct": low,
            "distinguishable": bool(quality < low) if math.isfinite(low) else None,
            "lira_auc": attack["auc"], "lira_tpr_at_1pct": attack["tpr_at_1pct"],
            "lira_tpr_at_0.1pct": attack["tpr_at_0_1pct"]}


def klom_matrices(pool: list[Job], folders: list[str], method: str, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(unlearned N × E, retrained N × E) margins of the split `kind` on the examples that every model of both pools
    holds (ascending index), over the jobs in `folders`, in their order; a UserError where one model lists an
    example twice."""
    by_folder = {job.folder: job for job in pool}
    series = [by_folder[folder].margins.get((role, method if role == "unlearned" else None, kind), pd.Series())
              for role in ("unlearned", "retrained") for folder in folders]
    if any(s.index.has_duplicates for s in series):
        raise UserError(f"a model lists an example of its {kind} split twice")
    common = functools.reduce(np.intersect1d, [s.index.to_numpy(dtype=np.int64) for s in series])
    margins = np.stack([s.reindex(common).to_numpy(dtype=float) for s in series])
    return margins[:len(folders)], margins[len(folders):]


def klom_scores(pool: list[Job], folders: list[str], method: str, permutations: int) -> dict:
    """KLOM of one pool and method per split (D_f, D_r, D'_r): the 95th percentile over the examples, its null's
    median and 95th percentile, and the number of examples compared; NaN for a split without common examples."""
    scores = {}
    for kind in KLOM_KINDS:
        unlearned, retrained = klom_matrices(pool, folders, method, kind)
        stat = median = high = math.nan
        if unlearned.shape[1]:
            stat = forgetting.klom_summary(forgetting.klom(unlearned, retrained))
            null = forgetting.null_kloms(unlearned, retrained, permutations)
            if len(null):
                median, high = float(np.median(null)), float(np.percentile(null, forgetting.KLOM_QUANTILE))
        scores |= {f"klom_{kind}": stat, f"klom_{kind}_null_median": median, f"klom_{kind}_null_95pct": high,
                   f"klom_{kind}_examples": unlearned.shape[1]}
    return scores


def note_of(unlearned: np.ndarray, n: int) -> tuple[Note, ...]:
    notes = []
    if n >= 2 and (unlearned == unlearned[0]).all():
        notes.append(Note("point_pool"))
    if forgetting.epsilon_cap(n) == 0:
        notes.append(Note("no_resolution", {"N": n}))
    return tuple(notes)


def competition_columns(values: dict, folders: list[str], target: str, method: str, quality: float,
                        per_example: PerExample) -> dict:
    """The competition's final score (F scaled by the unlearned over retrained pool means of the declared accuracy
    on the retain and unseen splits) and the declared MIA on D_f beside it: NaN where the task declares none."""
    def mean(role: str, metric: str | None, split: str) -> float:
        owner = method if role == "unlearned" else None
        return math.nan if metric is None else pool_mean(values, folders, target, role, owner, metric, split)

    retain, unseen = per_example.retain, per_example.unseen
    accuracy = {(role, split): mean(role, per_example.accuracy, split)
                for role in ("unlearned", "retrained") for split in (retain, unseen)}
    final = forgetting.score(quality, accuracy["unlearned", retain], accuracy["retrained", retain],
                             accuracy["unlearned", unseen], accuracy["retrained", unseen])
    return {"score": final, "mia_unlearned": mean("unlearned", per_example.privacy, per_example.forget),
            "mia_retrained": mean("retrained", per_example.privacy, per_example.forget)}


def pool_rows(group: tuple, keys: list[str], design: str, seed: int | None, pool: list[Job], methods: list[str],
              values: dict, permutations: int) -> tuple[list[dict], list[dict], list[Note]]:
    """The forget_quality.csv rows of one pool (a row per method with two models or more), its ε per example, and a
    line for each method whose confidences could not be scored (one pool's problem never costs the others)."""
    rows, epsilon_rows, problems = [], [], []
    ident = {**dict(zip(keys, group[:-1], strict=True)), "target": group[-1]}
    where = {"group": list(group[:-1]), "target": group[-1], "design": design, "seed": seed}
    for method in methods:
        unlearned, retrained, indices, labels, folders = pool_matrices(pool, method)
        if len(folders) < 2:
            continue
        try:
            scored = score_pool(unlearned, retrained, permutations)
        except UserError as error:
            problems.append(Note("not_scored", {**where, "method": method, "error": str(error)}))
            continue
        try:
            kloms = klom_scores(pool, folders, method, permutations)
        except UserError as error:  # F stands without it
            problems.append(Note("no_klom", {**where, "method": method, "error": str(error)}))
            kloms = {}
        competition = competition_columns(values, folders, group[-1], method, scored["forget_quality"],
                                          pool[0].per_example)
        epsilons = scored.pop("epsilons")
        rows.append({**ident, "method": method, "design": design, "seed_train": seed, **scored, **kloms,
                     **competition, "examples": len(indices), "note": note_of(unlearned, len(folders))})
        epsilon_rows += [{**ident, "method": method, "design": design, "seed_train": seed, "index": int(i),
                         "label": int(label), "epsilon": float(e)}
                        for i, label, e in zip(indices, labels, epsilons, strict=True)]
    return rows, epsilon_rows, problems


def best_by_quality(scores: pd.Series) -> list[str]:
    """The methods with the highest F (several when tied to `SIGNIFICANT` digits)."""
    rounded = scores.map(lambda x: float(f"{x:.{SIGNIFICANT}g}"))
    return sorted(rounded.index[rounded == rounded.max()])


def across_seeds(quality: pd.DataFrame, keys: list[str],
                 gold_standards: frozenset[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(F of the A(i) against B's per method, how often A(i)'s best method by F is not B's: the gold standards, M_r
    itself, are not candidates)."""
    across, best = [], []
    if quality.empty:
        return pd.DataFrame(columns=[*keys, *ACROSS_COLUMNS]), pd.DataFrame(columns=[*keys, *BEST_COLUMNS])
    for ident, part in quality.groupby([*keys, "target"], sort=False):
        ident = dict(zip([*keys, "target"], ident, strict=True))
        design_a, design_b = part[part["design"] == "A"], part[part["design"] == "B"]
        for method, rows in part.groupby("method", sort=False):
            a, b = rows[rows["design"] == "A"], rows[rows["design"] == "B"]
            f = a["forget_quality"].to_numpy(dtype=float)
            across.append({**ident, "method": method, "designs_A": len(f),
                           "n_models_A": float(a["n_models"].median()) if len(a) else math.nan,
                           "forget_quality_A_mean": float(f.mean()) if len(f) else math.nan,
                           "forget_quality_A_std": float(f.std(ddof=1)) if len(f) > 1 else math.nan,
                           "forget_quality_A_min": float(f.min()) if len(f) else math.nan,
                           "forget_quality_A_max": float(f.max()) if len(f) else math.nan,
                           "forget_quality_B": float(b["forget_quality"].iloc[0]) if len(b) else math.nan,
                           "n_models_B": int(b["n_models"].iloc[0]) if len(b) else math.nan})
        candidates = ~part["method"].isin(gold_standards)
        b_scores = design_b[candidates[design_b.index]].set_index("method")["forget_quality"]
        if len(b_scores) < 2:
            continue
        best_b = best_by_quality(b_scores)
        chosen = []
        for _, rows in design_a[candidates[design_a.index]].groupby("seed_train", sort=True):
            scores = rows.set_index("method")["forget_quality"]
            if set(scores.index) == set(b_scores.index):
                chosen.append(best_by_quality(scores))
        if not chosen:
            continue
        differs = sum(not set(found) & set(best_b) for found in chosen)
        low, high = wilson(differs, len(chosen))
        best.append({**ident, "designs_A": len(chosen), "best_B": ", ".join(best_b),
                     "best_A": "; ".join(", ".join(found) for found in chosen),
                     "p_best_differs": differs / len(chosen), "p_low": low, "p_high": high})
    return pd.DataFrame(across, columns=[*keys, *ACROSS_COLUMNS]), pd.DataFrame(best, columns=[*keys, *BEST_COLUMNS])


def forget_quality(jobs: list[dict], examples: dict[str, pd.DataFrame], frame: pd.DataFrame, keys: list[str],
                   permutations: int, gold_standards: frozenset[str] = frozenset()) -> ForgetQuality:
    """The per-example tables of a sweep (module docstring), from the complete jobs' examples and records;
    `gold_standards` (the catalogue's methods whose M_u is M_r) are scored but never a best method."""
    values = record_values(frame, scaling_metrics(jobs))
    rows, epsilon_rows, left_out = [], [], []
    for group, members in targets_of(jobs, examples, keys).items():
        kept, why = same_forget_set(group, members)
        if why:
            left_out.append(why)
        methods = sorted({m for job in kept for m in job.rows["method"].dropna().unique()})
        for design, seed, pool in design_pools(kept):
            found, found_examples, problems = pool_rows(group, keys, design, seed, pool, methods, values,
                                                        permutations)
            rows += found
            epsilon_rows += found_examples
            left_out += problems
    quality = pd.DataFrame(rows, columns=[*keys, *QUALITY_COLUMNS])
    order = quality.assign(role="unlearned", metric="", split="")
    if not quality.empty:
        quality = sort_rows(order, keys, order).drop(columns=["role", "metric", "split"])[[*keys, *QUALITY_COLUMNS]]
    by_example = pd.DataFrame(epsilon_rows, columns=[*keys, *EXAMPLE_COLUMNS])
    for table in (quality, by_example):
        table["seed_train"] = table["seed_train"].astype("Int64")  # empty for B, not 0.0
    for column in [c for c in KLOM_COLUMNS if c.endswith("_examples")]:
        quality[column] = quality[column].astype("Int64")  # empty where KLOM failed, not 30.0
    across, best = across_seeds(quality, keys, gold_standards)
    return ForgetQuality(quality, by_example, across, best, left_out)
