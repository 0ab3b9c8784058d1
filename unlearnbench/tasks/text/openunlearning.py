"""OpenUnlearning's evaluation files read into this tool's job contract: `unlearnbench-report --openunlearning`.

OpenUnlearning (locuslab/open-unlearning) writes one `<NAME>_EVAL.json` per evaluated model (NAME = TOFU or MUSE,
src/evals/base.py): a key per metric, each holding `agg_value` and, per evaluated example, `value_by_index` keyed by
the example's row in its split, as a string (src/evals/metrics/utils.py); a membership attack holds `forget` and
`holdout` parts of that shape and its `auc`. Python's `json` writes NaN bare, and reads it back. A manifest names
the evaluations of a seed study (docs/openunlearning.md); each row becomes one job folder, `result.json` and
`examples.parquet`, that the report reads as it reads the tool's own jobs.

Records are aggregated here from the per-example values with the task's own functions (`metrics.py`) in
OpenUnlearning's numerics (its 1e-10 guards, `evaluation.reference_numerics`), so a run's records equal the
`agg_value`s of its file. Forget quality and privleak are recomputed against the retrained run of the same seeds:
OpenUnlearning compares every run with the one `retain_logs_path` it is given (src/evals/metrics/base.py), so a seed
study there judges every seed against one retain model; here each seed meets its own, and the report adds the
reading against one retain model (the catalogue's derived `forget_quality_first`). An unlearned run's
examples.parquet carries its retrained run's rows too, as a job of the tool's own holds both models.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.errors import UserError
from unlearnbench.core.files import RESULT
from unlearnbench.core.outcome import Outcome
from unlearnbench.core.result import document, publish
from unlearnbench.tasks.text import metrics
from unlearnbench.tasks.text.catalogue import CATALOGUE, MUSE_CATALOGUE
from unlearnbench.tasks.text.evaluate import TEXT_COLUMNS, TextExamples, confidence

COLUMNS = ("path", "role", "method", "seed_train", "seed_unlearn")  # a manifest's required columns
OPTIONAL = ("seed_eval", "model")
ROLES = ("original", "retrained", "unlearned")
STRATEGY = "openunlearning"  # the job field that tells an imported run from one of the tool's
ATTACKS = {  # OpenUnlearning's attack → (examples.parquet's column of its score, the record of its AUC)
    "mia_loss": ("loss", "mia_loss_auc"), "mia_zlib": ("mia_zlib", "mia_zlib_auc"),
    "mia_min_k": ("mia_min_k", "mia_min_k_auc"), "mia_min_k_plus_plus": ("mia_min_k_pp", "mia_min_k_pp_auc"),
    "mia_reference": ("mia_reference", "mia_reference_auc"), "mia_gradnorm": ("mia_gradnorm", "mia_gradnorm_auc")}
PRIVLEAK_ATTACK = "mia_min_k"  # privleak compares this attack's AUC with the retrained run's (both benchmarks)


class ImportProblem(ValueError):
    """One run that cannot be imported: the message is its one line."""


def nan_mean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan


def closer_to_1(values: np.ndarray) -> float:
    return metrics.closer_to_1_better(values[~np.isnan(values)], reference_numerics=True)


def true_better(values: np.ndarray) -> float:
    return metrics.true_better(values[~np.isnan(values)])


@dataclass(frozen=True)
class Benchmark:
    """What one OpenUnlearning evaluator's file holds, as this task reads it.

    `aggregates`: (metric, split, OpenUnlearning's key, the per-example field, how the values aggregate), each record
    where its key is in the file. `utility`: the (metric, split) pairs whose harmonic mean is model utility.
    `truth_ratio`: the key of the forget truth ratios forget quality compares. `examples`: per split of
    examples.parquet, its columns' (key, field); the attacks' scores join on their `forget` and `holdout` parts."""

    name: str
    scenario: str
    catalogue: Catalogue
    aggregates: tuple[tuple[str, str, str, str, Callable[[np.ndarray], float]], ...]
    examples: dict[str, dict[str, tuple[str, str]]]
    dataset: Callable[[dict], str]
    target: Callable[[dict], str]
    utility: tuple[tuple[str, str], ...] = ()
    truth_ratio: str | None = None

    @property
    def file(self) -> str:
        return f"{self.name}_EVAL.json"


def tofu_aggregates() -> tuple:
    rows = [("prob", "forget", "forget_Q_A_Prob", "prob", nan_mean),
            ("rouge_l_recall", "forget", "forget_Q_A_ROUGE", "rougeL_recall", nan_mean),
            ("truth_ratio", "forget", "forget_truth_ratio", "score", closer_to_1),
            ("extraction_strength", "forget", "extraction_strength", "score", nan_mean),
            ("exact_memorization", "forget", "exact_memorization", "score", nan_mean),
            ("prob", "retain", "retain_Q_A_Prob", "prob", nan_mean)]
    for split, prefix in (("retain", "retain"), ("general_authors", "ra"), ("general_facts", "wf")):
        if split != "retain":
            rows.append(("prob", split, f"{prefix}_Q_A_Prob_normalised", "prob", nan_mean))
        rows += [("rouge_l_recall", split, f"{prefix}_Q_A_ROUGE", "rougeL_recall", nan_mean),
                 ("truth_ratio", split, f"{prefix}_Truth_Ratio", "score", true_better)]
    return tuple(rows)


def qa_columns(prefix: str) -> dict[str, tuple[str, str]]:
    """A TOFU question split's per-example columns (`TextExamples`)."""
    ratio = "forget_truth_ratio" if prefix == "forget" else f"{prefix}_Truth_Ratio"
    return {"loss": (f"{prefix}_Q_A_Prob", "avg_loss"), "prob": (f"{prefix}_Q_A_Prob", "prob"),
            "rouge_l_recall": (f"{prefix}_Q_A_ROUGE", "rougeL_recall"), "truth_ratio": (ratio, "score"),
            "loss_true": (f"{prefix}_Q_A_PARA_Prob", "avg_loss"),
            "loss_perturbed": (f"{prefix}_Q_A_PERT_Prob", "avg_loss")}


def config_value(config: dict, *paths: str, default=None):
    """The first of the dotted `paths` that the run's `.hydra/config.yaml` holds."""
    for dotted in paths:
        node = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return default


TOFU = Benchmark(
    "TOFU", "forget_entities", CATALOGUE, tofu_aggregates(),
    {"forget": {**qa_columns("forget"), "exact_memorization": ("exact_memorization", "score")},
     "retain": qa_columns("retain"), "holdout": {}},
    dataset=lambda config: "tofu",
    target=lambda config: str(config_value(config, "eval.tofu.forget_split", "forget_split", default="forget")),
    utility=tuple((metric, split) for split in ("retain", "general_authors", "general_facts")
                  for metric in ("prob", "rouge_l_recall", "truth_ratio")),
    truth_ratio="forget_truth_ratio")

MUSE = Benchmark(
    "MUSE", "forget_corpus", MUSE_CATALOGUE,
    (("verbmem_rouge", "forget", "forget_verbmem_ROUGE", "rougeL_f1", nan_mean),
     ("knowmem_rouge", "forget", "forget_knowmem_ROUGE", "rougeL_f1", nan_mean),
     ("knowmem_rouge", "retain", "retain_knowmem_ROUGE", "rougeL_f1", nan_mean),
     ("extraction_strength", "forget", "extraction_strength", "score", nan_mean)),
    {"forget": {}, "holdout": {}},  # the PrivLeak texts, as `MuseExamples`: their attacks' scores alone
    dataset=lambda config: "muse_" + str(config_value(config, "eval.muse.data_split", "data_split",
                                                      default="news")).lower(),
    target=lambda config: "forget")

BENCHMARKS = (TOFU, MUSE)


@dataclass(frozen=True)
class Row:
    """One manifest row: an OpenUnlearning evaluation and the seeds it was made with."""

    number: int  # its line in the manifest (the header is line 1)
    path: Path
    role: str
    method: str | None
    seed_train: int | None
    seed_unlearn: int | None
    seed_eval: int | None
    model: str | None
    problem: str | None = None  # why the row itself cannot be read

    @property
    def folder(self) -> str:
        """Its job folder's name under the output folder: line, role, method, seeds."""
        parts = [f"{self.number:03d}", self.role if self.role in ROLES else "row", self.method or ""]
        parts += [f"{tag}{seed}" for tag, seed in (("t", self.seed_train), ("u", self.seed_unlearn),
                                                  ("e", self.seed_eval)) if seed is not None]
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(p for p in parts if p))

    def where(self) -> str:
        return f"manifest line {self.number}"


def parse_seed(text: str, name: str, required: bool) -> int | None:
    text = (text or "").strip()
    if not text:
        if required:
            raise ImportProblem(f"the {name!r} column must hold an integer; got nothing")
        return None
    try:
        return int(text)
    except ValueError:
        raise ImportProblem(f"the {name!r} column must hold an integer; got {text!r} instead") from None


def parse_row(number: int, cells: dict[str, str], base: Path) -> Row:
    role, method = (cells.get("role") or "").strip(), (cells.get("method") or "").strip() or None
    given = {"seed_train": None, "seed_unlearn": None, "seed_eval": None}
    text = (cells.get("path") or "").strip()
    path = (base / text) if text else base
    try:
        if not text:
            raise ImportProblem("the 'path' column must name the folder of an evaluation; got nothing")
        if role not in ROLES:
            raise ImportProblem(f"the 'role' column must be one of {', '.join(ROLES)}; got {role!r} instead")
        if (role == "unlearned") != (method is not None):
            raise ImportProblem("the 'method' column must name the method of an unlearned run and be empty "
                                f"otherwise; got {method!r} for role {role}")
        for name in given:
            given[name] = parse_seed(cells.get(name, ""), name, required=name == "seed_train" or (
                name == "seed_unlearn" and role == "unlearned"))
        problem = None
    except ImportProblem as error:
        problem = str(error)
    return Row(number, path, role, method, **given, model=(cells.get("model") or "").strip() or None,
               problem=problem)


def read_manifest(path: Path) -> list[Row]:
    """The manifest's rows, in order; a `UserError` where the file itself cannot be read as one."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's BOM is no column name
            reader = csv.DictReader(handle)
            header = [name.strip() for name in reader.fieldnames or []]
            missing = [name for name in COLUMNS if name not in header]
            if missing:
                raise UserError(f"the manifest {path} must have the columns {', '.join(COLUMNS)} (and optionally "
                                f"{', '.join(OPTIONAL)}); it lacks {', '.join(missing)}")
            reader.fieldnames = header
            rows = [parse_row(reader.line_num, cells, path.parent) for cells in reader]
    except OSError as error:
        raise UserError(f"cannot read the manifest {path}: {error.strerror or error}") from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise UserError(f"the manifest {path} is not a CSV file: {error}") from None
    if not rows:
        raise UserError(f"the manifest {path} has no rows: give one per OpenUnlearning evaluation")
    return rows


@dataclass
class Evaluation:
    """One run's files: its `<NAME>_EVAL.json` and, where present, `_SUMMARY.json` and `.hydra/config.yaml`."""

    benchmark: Benchmark
    logs: dict
    summary: dict | None = None
    config: dict = field(default_factory=dict)

    def values(self, key: str, name: str, part: str | None = None) -> pd.Series:
        """The per-example `name` of the metric `key` (of its `part`, `forget` or `holdout`, for an attack), by
        example index; lists (the perturbed answers) as their mean, null as NaN; empty where the file has none."""
        entry = self.logs.get(key)
        if part is not None:
            entry = entry.get(part) if isinstance(entry, dict) else None
        by_index = entry.get("value_by_index") if isinstance(entry, dict) else None
        if not isinstance(by_index, dict):
            return pd.Series(dtype=float)
        values = {}
        for index, item in by_index.items():
            value = item.get(name) if isinstance(item, dict) else None
            if isinstance(value, list):
                value = float(np.mean([math.nan if v is None else v for v in value])) if value else None
            values[int(index)] = math.nan if value is None else float(value)
        return pd.Series(values, dtype=float).sort_index()

    def forget_indices(self) -> dict[str, frozenset[int]]:
        """{key (part): example indices} of every forget-side metric: a run and its retrained run must agree."""
        found = {}
        for key, entry in self.logs.items():
            if not isinstance(entry, dict):
                continue
            if key in ATTACKS:
                for part in ("forget", "holdout"):
                    found[f"{key} ({part})"] = frozenset(self.values(key, "score", part).index)
            elif key.startswith("forget_") or key == "extraction_strength":
                found[key] = frozenset(int(i) for i in (entry.get("value_by_index") or {}))
        return found


def read_evaluation(folder: Path) -> Evaluation:
    """The evaluation in `folder`; an `ImportProblem` naming what is missing or unreadable."""
    if not folder.is_dir():
        raise ImportProblem(f"{folder} is not a folder")
    present = [b for b in BENCHMARKS if (folder / b.file).is_file()]
    if len(present) != 1:
        names = " or ".join(b.file for b in BENCHMARKS)
        raise ImportProblem(f"{folder} holds {'both' if present else 'neither'} of {names}; give the folder of one "
                            f"evaluation (its output_dir)")
    benchmark = present[0]
    logs = read_json(folder / benchmark.file)
    summary_path = folder / f"{benchmark.name}_SUMMARY.json"
    summary = read_json(summary_path) if summary_path.is_file() else None
    return Evaluation(benchmark, logs, summary, read_config(folder / ".hydra" / "config.yaml"))


def read_json(path: Path) -> dict:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ImportProblem(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise ImportProblem(f"{path} is not JSON: {error}") from None
    if not isinstance(content, dict):
        raise ImportProblem(f"{path} holds a {type(content).__name__}, not an object of metrics")
    return content


def read_config(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ImportProblem(f"cannot read {path}: {str(error).splitlines()[0]}") from None
    return config if isinstance(config, dict) else {}


def own_records(run: Evaluation) -> dict[tuple[str, str | None], float]:
    """{(metric, split): value} of what the run's file alone gives: the aggregates, model utility, the attacks'
    AUCs (forget members against holdout non-members, `metrics.mia_auc`)."""
    scores = {}
    for metric, split, key, name, aggregate in run.benchmark.aggregates:
        values = run.values(key, name).to_numpy()
        if values.size:
            scores[(metric, split)] = aggregate(values)
    utility = [scores.get(pair) for pair in run.benchmark.utility]
    if utility and all(v is not None and math.isfinite(v) for v in utility):
        scores[("model_utility", None)] = metrics.model_utility(utility)
    for attack, (_, record) in ATTACKS.items():
        auc = attack_auc(run, attack)
        if auc is not None:
            scores[(record, "forget")] = auc
    return scores


def attack_auc(run: Evaluation, attack: str) -> float | None:
    members, others = run.values(attack, "score", "forget"), run.values(attack, "score", "holdout")
    members, others = members[members.notna()], others[others.notna()]
    return metrics.mia_auc(members.to_numpy(), others.to_numpy()) if len(members) and len(others) else None


def against_retrained(run: Evaluation, retrained: Evaluation) -> dict[tuple[str, str], float]:
    """Forget quality (the KS p-value of the forget truth ratios) and privleak (of the Min-K% AUCs) against the
    retrained run of the same seeds, where both files hold their inputs."""
    scores = {}
    key = run.benchmark.truth_ratio
    if key is not None:
        mine, gold = run.values(key, "score").dropna(), retrained.values(key, "score").dropna()
        if len(mine) and len(gold):
            scores[("forget_quality", "forget")] = metrics.forget_quality(mine.to_numpy(), gold.to_numpy())
    auc, gold_auc = attack_auc(run, PRIVLEAK_ATTACK), attack_auc(retrained, PRIVLEAK_ATTACK)
    if auc is not None and gold_auc is not None:
        scores[("privleak", "forget")] = metrics.privleak(auc, gold_auc)
    return scores


def example_rows(run: Evaluation, target: str, role: str, method: str | None) -> pd.DataFrame:
    """The run's rows of examples.parquet (`TEXT_COLUMNS`), split by split: the examples whose loss the file holds
    (the forget and retain answers' mean NLL; the attacks' `mia_loss` score elsewhere); `label` −1 (the file names
    no entity), `pred` 1 where exact memorisation is 1, 0 where it is below, −1 where the file has none."""
    parts = []
    for split, columns in run.benchmark.examples.items():
        values = {column: run.values(key, name) for column, (key, name) in columns.items()}
        part = "forget" if split == "forget" else "holdout" if split == "holdout" else None
        if part is not None:
            for attack, (column, _) in ATTACKS.items():
                scores = run.values(attack, "score", part)
                if len(scores) and not len(values.get(column, ())):
                    values[column] = scores
        loss = values.get("loss", pd.Series(dtype=float)).dropna()
        if not len(loss):
            continue
        frame = pd.DataFrame({column: series.reindex(loss.index) for column, series in values.items()})
        frame = frame.reindex(columns=TEXT_COLUMNS)
        exact = values.get("exact_memorization", pd.Series(dtype=float)).reindex(loss.index)
        frame["pred"] = np.where(exact.isna(), -1, (exact == 1).astype(np.int64))
        frame["conf"] = confidence(loss.to_numpy())
        frame["index"], frame["label"] = loss.index.to_numpy(dtype=np.int64), -1
        frame["target"], frame["role"], frame["method"], frame["split"] = target, role, method, split
        parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=TEXT_COLUMNS)
    return pd.concat(parts, ignore_index=True)


def examples_table(frame: pd.DataFrame) -> TextExamples:
    """The rows as the task's own examples table, which types and writes them (the `Examples` of `publish`)."""
    table = TextExamples(0, "")
    for name in TEXT_COLUMNS:
        values = frame[name].to_numpy()
        table.columns[name] = [None if v is None or v != v else v for v in values] if name in TEXT_COLUMNS[:4] \
            else [values]
    return table


def job_fields(row: Row, run: Evaluation | None) -> dict:
    """The run's identity in result.json, the tool's job fields: the dataset and target from the run's config
    (TOFU's forget split, MUSE's data split), the model from the manifest or else the base model whose tokenizer the
    run loaded (the same for the original, retrained and unlearned models of one study)."""
    config = run.config if run else {}
    model = row.model or config_value(config, "model.tokenizer_args.pretrained_model_name_or_path",
                                      default="unknown")
    return {"task": "text", "dataset": run.benchmark.dataset(config) if run else None,
            "model": str(model).rstrip("/").rsplit("/", 1)[-1],
            "scenario": run.benchmark.scenario if run else None, "method": row.method,
            "seed_train": row.seed_train, "seed_unlearn": row.seed_unlearn,
            "seed_eval": row.seed_eval if row.seed_eval is not None else config_value(config, "seed"),
            "seed_forget": None, "strategy": STRATEGY,
            "precision": str(config_value(config, "model.model_args.torch_dtype", default="unknown")),
            "devices": None}


def retrained_for(row: Row, rows: list[Row]) -> Row | None:
    """The retrained run that judges `row`: same training seed, and the same unlearning and evaluation seeds where
    the retrained row gives them (the most specific match; the first in the manifest among equals)."""
    def fits(gold: Row) -> int | None:
        score = 0
        for mine, theirs in ((row.seed_unlearn, gold.seed_unlearn), (row.seed_eval, gold.seed_eval)):
            if theirs is None:
                continue
            if theirs != mine:
                return None
            score += 1
        return score

    candidates = [(fits(gold), -gold.number, gold) for gold in rows
                  if gold.role == "retrained" and gold.problem is None and gold.seed_train == row.seed_train]
    candidates = [c for c in candidates if c[0] is not None]
    return max(candidates, key=lambda c: c[:2])[2] if candidates else None


@dataclass
class Imported:
    """What the import wrote: the job folders, and one line per run imported without a metric (a run that could not
    be imported is a failed job, which the report lists with its reason)."""

    folders: list[Path] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def import_runs(manifest: Path, out: Path) -> Imported:
    """Write one job folder per manifest row under `out` (module docstring); a run that cannot be imported becomes
    a failed job whose error names its manifest line and the reason, and the others go on."""
    rows = read_manifest(manifest)
    runs: dict[int, Evaluation | ImportProblem] = {}
    for row in rows:
        try:
            if row.problem:
                raise ImportProblem(row.problem)
            runs[row.number] = read_evaluation(row.path)
        except ImportProblem as error:
            runs[row.number] = error
    imported = Imported()
    for row in rows:
        folder = out / row.folder
        run = runs[row.number]
        try:
            if isinstance(run, ImportProblem):
                raise run
            outcome, note = import_run(row, run, rows, runs)
            if note:
                imported.lines.append(f"{row.where()} ({row.path}): {note}")
        except ImportProblem as error:  # the report lists the failed job with this reason
            outcome, run = Outcome(error=f"{row.where()} ({row.path}): {error}"), None
        write_job(folder, row, run, outcome)
        imported.folders.append(folder)
    return imported


def import_run(row: Row, run: Evaluation, rows: list[Row], runs: dict) -> tuple[Outcome, str | None]:
    """The run's outcome (records, examples, catalogue) and a line where it lacks the metrics against M_r."""
    target = run.benchmark.target(run.config)
    scores = own_records(run)
    examples = example_rows(run, target, row.role, row.method)
    note = None
    gold_row = retrained_for(row, rows)
    gold = runs.get(gold_row.number) if gold_row else None
    if not isinstance(gold, Evaluation):
        note = (f"no readable retrained run with seed_train {row.seed_train} in the manifest: forget quality and "
                f"privleak are not computed")
    else:
        check_same_examples(run, gold, gold_row)
        scores |= against_retrained(run, gold)
        if row.role == "unlearned":
            examples = pd.concat([examples, example_rows(gold, target, "retrained", None)], ignore_index=True)
    records = [{"target": target, "role": row.role, "method": row.method, "metric": metric, "split": split,
                "value": value} for (metric, split), value in scores.items()]
    catalogue = run.benchmark.catalogue.holding(r["metric"] for r in records)
    outcome = Outcome(records=records, catalogue=catalogue.as_dict(),
                      examples=examples_table(examples) if len(examples) else None)
    outcome.succeeded = 1
    return outcome, note


def check_same_examples(run: Evaluation, gold: Evaluation, gold_row: Row) -> None:
    """Refuse a run evaluated on other forget (or holdout) examples than its retrained run: OpenUnlearning compares
    the values alone and would not notice."""
    if gold.benchmark is not run.benchmark:
        raise ImportProblem(f"its retrained run ({gold_row.where()}) is a {gold.benchmark.name} evaluation, this one "
                            f"{run.benchmark.name}")
    mine, theirs = run.forget_indices(), gold.forget_indices()
    for key in sorted(mine.keys() & theirs.keys()):
        if mine[key] != theirs[key]:
            raise ImportProblem(f"its forget indices differ from its retrained run's ({gold_row.where()}) in {key}: "
                                f"{len(mine[key])} examples against {len(theirs[key])}, "
                                f"{len(mine[key] ^ theirs[key])} not in both; evaluate both on the same split")


def write_job(folder: Path, row: Row, run: Evaluation | None, outcome: Outcome) -> None:
    """The row's result.json (and examples.parquet), in the job contract; the source files' places and the run's
    own summary beside them."""
    result = document(job_fields(row, run), outcome, started=None)
    result["source"] = {"tool": "openunlearning", "path": str(row.path), "manifest_line": row.number,
                        "summary": run.summary if run else None}
    publish(folder / RESULT, result, outcome.examples)

