"""OpenUnlearning's evaluation folders read into this tool's job contract: `unlearnbench-report --openunlearning`.

OpenUnlearning (locuslab/open-unlearning) writes one `<NAME>_EVAL.json` per evaluated model (NAME = TOFU or MUSE,
src/evals/base.py): a key per metric, each holding `agg_value` and, per evaluated example, `value_by_index` keyed by
the example's row in its split, as a string (src/evals/metrics/utils.py); a membership attack holds `forget` and
`holdout` parts of that shape and its `auc`. Python's `json` writes NaN bare, and reads it back. Its lm-eval
evaluator (src/evals/lm_eval.py, WMDP and MMLU) writes `LMEval_EVAL.json`, {task: lm-eval's logged samples per
subtask}, and `LMEval_SUMMARY.json`, {"task/metric": value} (lm-eval's ",none" filter suffix stripped; a group such as
`mmlu` by its group value). A manifest names the evaluations of a seed study (docs/openunlearning.md); each row
becomes one job folder, `result.json` and `examples.parquet`, that the report reads as it reads the tool's own jobs.

Records are aggregated here from the per-example values with the task's own functions (`metrics.py`) in
OpenUnlearning's numerics (its 1e-10 guards, `evaluation.reference_numerics`), so a run's records equal the
`agg_value`s of its file. Forget quality and privleak are recomputed against the retrained run of the same seeds,
dataset, target and model: OpenUnlearning compares every run with the one `retain_logs_path` it is given
(src/evals/metrics/base.py), so a seed study there judges every seed against one retain model; here each seed meets
its own, and the report adds the reading against one retain model (the catalogue's derived `forget_quality_first`).
An unlearned run's examples.parquet carries its retrained run's rows too, as a job of the tool's own holds both
models. A WMDP run's records are lm-eval's accuracies, `mc_accuracy` on `forget` (wmdp_<subset>) and `general` (mmlu),
as the tool's own WMDP jobs record them (benchmarks/wmdp.py).

A run's identity (its TOFU forget split, its MUSE or WMDP data split, its model) comes from the `.hydra/config.yaml`
that Hydra saved beside its files, unresolved: OpenUnlearning's eval experiments set `eval.tofu.forget_split:
${forget_split}`, `eval.muse.data_split: ${data_split}`, `tasks: [wmdp_${data_split}, mmlu]`
(configs/experiment/eval/*/default.yaml), and every run holds `paths.work_dir: ${hydra:runtime.cwd}`
(configs/paths/default.yaml). Each key read is resolved with OmegaConf against the run's own config: `${hydra:…}` from
the run's `.hydra/hydra.yaml`, OmegaConf's own `oc.*` resolvers as OmegaConf resolves them; a key that cannot be
resolved (a `${now:…}` or other resolver whose value at run time no file records, an unset `${oc.env:…}`, a `???`)
costs its run, with one line naming the run and the key. A literal `${…}` never reaches a result.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.files import EXAMPLES, RESULT
from unlearnbench.core.outcome import Outcome
from unlearnbench.core.result import document, stored_result, write_json
from unlearnbench.runtime.errors import UserError, bad_file, invalid
from unlearnbench.runtime.files import WriteError, make_folder
from unlearnbench.tasks.text.benchmarks import muse, tofu, wmdp
from unlearnbench.tasks.text.catalogue import CATALOGUE
from unlearnbench.tasks.text.evaluate import metrics
from unlearnbench.tasks.text.evaluate.examples import TEXT_COLUMNS, TextExamples, confidence

COLUMNS = ("path", "role", "method", "seed_train", "seed_unlearn")  # a manifest's required columns
OPTIONAL = ("seed_eval", "model")
ROLES = ("original", "retrained", "unlearned")
STRATEGY = "openunlearning"  # the job field that tells an imported run from one of the tool's
TOOL = "openunlearning"  # result.json's `source.tool` of an imported run
ATTACKS = {  # OpenUnlearning's attack → (examples.parquet's column of its score, the record of its AUC)
    "mia_loss": ("loss", "mia_loss_auc"), "mia_zlib": ("mia_zlib", "mia_zlib_auc"),
    "mia_min_k": ("mia_min_k", "mia_min_k_auc"), "mia_min_k_plus_plus": ("mia_min_k_pp", "mia_min_k_pp_auc"),
    "mia_reference": ("mia_reference", "mia_reference_auc"), "mia_gradnorm": ("mia_gradnorm", "mia_gradnorm_auc")}
PRIVLEAK_ATTACK = "mia_min_k"  # privleak compares this attack's AUC with the retrained run's (both benchmarks)
WMDP_TASK = re.compile(r"wmdp_(\w+)")  # lm-eval's WMDP tasks: wmdp_bio, wmdp_chem, wmdp_cyber
GENERAL_TASK = "mmlu"  # the general accuracy of OpenUnlearning's WMDP eval (configs/experiment/eval/wmdp/default.yaml)
RESOLVER_CALL = re.compile(r"\$\{\s*([A-Za-z_][\w.\-]*)\s*:")  # `${name:…}`: a resolver, not a node
HYDRA_CALL = re.compile(r"(?<!\\)\$\{hydra:\s*([\w.\-]+)\s*\}")
ABSENT = object()


class ImportProblem(UserError):
    """One run that cannot be imported: the message is its one line. A type of its own, as the import catches it to
    record the row's problem and go on with the next row."""


class NothingImported(UserError):
    """Every row of the manifest failed: nothing is written. `lines`: one per row, why."""

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.lines = lines


def nan_mean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan


def closer_to_1(values: np.ndarray) -> float:
    return metrics.closer_to_1_better(values[~np.isnan(values)], reference_numerics=True)


def true_better(values: np.ndarray) -> float:
    return metrics.true_better(values[~np.isnan(values)])


def number(value, where: str) -> float:
    """A score of a file: a JSON number, null as NaN; anything else (a string, a list, true) an `ImportProblem`
    naming the file and the key (`where`)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImportProblem(f"{where} is {value!r}, not a number")
    return float(value)


# ---------------------------------------------------------------------------------------------------------------------
# The run's config, resolved as OmegaConf resolves it against the run's own files


@dataclass(frozen=True)
class RunConfig:
    """A run's `.hydra/config.yaml` as Hydra saved it (unresolved), held by OmegaConf: `${hydra:KEY}` is answered
    from the run's own `.hydra/hydra.yaml`; a value that calls any other resolver but OmegaConf's `oc.*` (Hydra's
    `now`, a `hydra:` key that hydra.yaml lacks, a resolver of the run's own code) is made missing, since no file
    records what it gave at run time (`unrecorded`: its key and text), so that a key that needs it is refused
    rather than resolved by whatever this process registered under that name."""

    path: Path
    node: DictConfig
    unrecorded: dict[str, str] = field(default_factory=dict)

    def value(self, *paths: str, default=None):
        """The first of the dotted `paths` the config holds (not null), resolved; an `ImportProblem` naming the key
        where it cannot be resolved or still holds a `${…}`."""
        for dotted in paths:
            try:
                node = OmegaConf.select(self.node, dotted, default=ABSENT, throw_on_missing=True)
                if isinstance(node, DictConfig | ListConfig):
                    node = OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
            except OmegaConfBaseException as error:
                raise ImportProblem(self.unresolvable(dotted, error)) from None
            if node is ABSENT or node is None:
                continue
            literal = next(iter(interpolations(node)), None)
            if literal is not None:
                raise ImportProblem(f"its .hydra/config.yaml gives {dotted} the value {literal!r}, which still holds "
                                    f"an interpolation (an escaped \\${{…}}); give the run's real value")
            return node
        return default

    def unresolvable(self, dotted: str, error: OmegaConfBaseException) -> str:
        try:
            raw = OmegaConf.to_container(self.node, resolve=False)
            for part in dotted.split("."):
                raw = raw[int(part)] if isinstance(raw, list) else raw[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raw = None
        told = str(error).splitlines()[0]
        blamed = [key for key in self.unrecorded if key == dotted or re.search(rf"(?<![\w.]){re.escape(key)}\b", told)]
        if blamed:
            text = self.unrecorded[blamed[0]]
            names = ", ".join(dict.fromkeys(n for n in RESOLVER_CALL.findall(text) if not n.startswith("oc.")))
            why = f"{blamed[0]} is {text!r}, and what {names} gave at run time no file of the run records"
        else:
            why = told
        shown = f" ({self.unrecorded.get(dotted, raw)!r})" if raw is not None or dotted in self.unrecorded else ""
        return f"its .hydra/config.yaml cannot resolve {dotted}{shown}: {why}"


def interpolations(value) -> list[str]:
    """The strings of `value` (a scalar, list or dict, resolved) that still hold `${`."""
    if isinstance(value, str):
        return [value] if "${" in value else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in interpolations(item)]
    return []


def config_value(config: RunConfig | DictConfig | dict | None, *paths: str, default=None):
    """The first of the dotted `paths` that the run's `.hydra/config.yaml` holds, resolved against the whole config
    (`RunConfig.value`); `default` where none is there, or the run has no config."""
    if config is None:
        return default
    if not isinstance(config, RunConfig):
        node = config if isinstance(config, DictConfig) else OmegaConf.create(config)
        config = RunConfig(Path(".hydra/config.yaml"), node)
    return config.value(*paths, default=default)


class HydraYaml(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The YAML Hydra saves, read as OmegaConf reads it (YAML 1.2's floats such as `1e-5`; dates stay text), with
    libyaml's parser where it is installed: a TOFU run's config is 600 lines, its hydra.yaml 400."""


HydraYaml.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(?:_[0-9]+)*[eE][-+]?[0-9]+$"),
                                list("-+0123456789"))
HydraYaml.yaml_implicit_resolvers = {first: [(tag, pattern) for tag, pattern in rules
                                             if tag != "tag:yaml.org,2002:timestamp"]
                                     for first, rules in HydraYaml.yaml_implicit_resolvers.items()}


def load_yaml(path: Path) -> object:
    """A YAML file of Hydra's, unresolved; an `ImportProblem` where it cannot be read."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=HydraYaml)
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise bad_file(path, f"cannot be read: {str(error).splitlines()[0]}", ImportProblem) from None


def hydra_settings(path: Path) -> dict | None:
    """The `hydra` node of the run's `.hydra/hydra.yaml` (its runtime: cwd, output_dir, choices …), or None."""
    if not path.is_file():
        return None
    try:
        settings = load_yaml(path)
    except ImportProblem:
        return None
    return settings["hydra"] if isinstance(settings, dict) and isinstance(settings.get("hydra"), dict) else None


def hydra_value(settings: dict | None, dotted: str) -> str | None:
    """hydra.yaml's literal value at `dotted` (a `${hydra:…}` answered as Hydra's resolver would), or None."""
    node = settings
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, bool | str | int | float) and "${" not in str(node):
        return str(node)
    return None


def hydra_folder(folder: Path) -> Path | None:
    """Where Hydra saved the `.hydra/` of the run evaluated in `folder`: the folder itself (src/eval.py: its
    `hydra.run.dir` is `paths.output_dir`, where the eval files go), or, for the evaluations an unlearning run makes
    at its checkpoints (src/trainer/base.py: `<run>/checkpoint-<step>/evals`), the unlearning run's folder."""
    candidates = [folder]
    if folder.name == "evals" and folder.parent.name.startswith("checkpoint-"):
        candidates.append(folder.parent.parent)
    return next((c / ".hydra" for c in candidates if (c / ".hydra" / "config.yaml").is_file()), None)


def read_config(folder: Path) -> RunConfig | None:
    """The run's `.hydra/config.yaml` (None where Hydra left none), `${hydra:…}` answered from its hydra.yaml."""
    hydra = hydra_folder(folder)
    if hydra is None:
        return None
    path = hydra / "config.yaml"
    content = load_yaml(path)
    if not isinstance(content, dict):
        raise bad_file(path, f"holds a {type(content).__name__}, not a run's config", ImportProblem)
    unrecorded: dict[str, str] = {}
    settled = settle(content, hydra_settings(hydra / "hydra.yaml"), unrecorded, "")
    try:
        node = OmegaConf.create(settled)
    except OmegaConfBaseException as error:
        raise bad_file(path, f"cannot be read: {str(error).splitlines()[0]}", ImportProblem) from None
    return RunConfig(path, node, unrecorded)


def settle(value, hydra: dict | None, unrecorded: dict[str, str], key: str):
    """`value` with each `${hydra:KEY}` replaced by hydra.yaml's value, and each string that still calls a resolver
    other than OmegaConf's `oc.*` replaced by `???` (noted in `unrecorded` under its dotted key)."""
    if isinstance(value, dict):
        return {name: settle(item, hydra, unrecorded, f"{key}.{name}" if key else str(name))
                for name, item in value.items()}
    if isinstance(value, list):
        return [settle(item, hydra, unrecorded, f"{key}.{index}") for index, item in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def recorded(match: re.Match) -> str:
        found = hydra_value(hydra, match.group(1))
        return match.group(0) if found is None else found

    text = HYDRA_CALL.sub(recorded, value)
    if any(not name.startswith("oc.") for name in RESOLVER_CALL.findall(text)):
        unrecorded[key] = value
        return "???"
    return text


# ---------------------------------------------------------------------------------------------------------------------
# The benchmarks


@dataclass(frozen=True)
class Benchmark:
    """What one OpenUnlearning evaluator's files hold, as this task reads them.

    `markers`: the files whose presence makes a folder this benchmark's evaluation (the first one read as its
    per-example logs, `<NAME>_SUMMARY.json` beside it). `aggregates`: (metric, split, OpenUnlearning's key, the
    per-example field, how the values aggregate), each record where its key is in the file. `utility`: the (metric,
    split) pairs whose harmonic mean is model utility. `truth_ratio`: the key of the forget truth ratios forget quality
    compares. `examples`: per split of examples.parquet, its columns' (key, field); the attacks' scores join on their
    `forget` and `holdout` parts. `records`: where set, the run's records come from it instead (lm-eval's files).
    `judged`: whether any record is computed against the retrained run."""

    name: str
    scenario: str
    catalogue: Catalogue
    aggregates: tuple[tuple[str, str, str, str, Callable[[np.ndarray], float]], ...]
    examples: dict[str, dict[str, tuple[str, str]]]
    dataset: Callable[[Evaluation], str]
    target: Callable[[Evaluation], str]
    utility: tuple[tuple[str, str], ...] = ()
    truth_ratio: str | None = None
    markers: tuple[str, ...] = ()
    records: Callable[[Evaluation], dict] | None = None
    judged: bool = True

    @property
    def files(self) -> tuple[str, ...]:
        return self.markers or (f"{self.name}_EVAL.json",)


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


def text_value(run: Evaluation, *paths: str, default: str) -> str:
    """A config value that names something (a split): a string, or a number written as one."""
    value = config_value(run.config, *paths, default=default)
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ImportProblem(f"its .hydra/config.yaml gives {paths[0]} the value {value!r}, not a split's name")
    return str(value)


def wmdp_subset(run: Evaluation) -> str:
    """The WMDP subset (bio, chem, cyber) the run evaluated: of the config's `eval.lm_eval.tasks` (resolved:
    `wmdp_${data_split}`), or, without a config, of the tasks its lm-eval files hold."""
    tasks = config_value(run.config, "eval.lm_eval.tasks")
    if tasks is not None:
        names = [task.get("task") if isinstance(task, dict) else task for task in (
            tasks if isinstance(tasks, list) else [tasks])]
        source = "its .hydra/config.yaml's eval.lm_eval.tasks"
    else:
        names = [key.split("/", 1)[0] for key in run.summary or {}] or list(run.lm_eval_logs())
        source = f"{run.folder}'s lm-eval files"
    subsets = sorted({match.group(1) for name in names if isinstance(name, str)
                      and (match := WMDP_TASK.fullmatch(name))})
    if len(subsets) != 1:
        found = ", ".join(f"wmdp_{s}" for s in subsets) or "none"
        raise ImportProblem(f"{source} must name one WMDP task (wmdp_bio, wmdp_chem or wmdp_cyber); found {found}: "
                            f"give one evaluation folder per WMDP subset")
    return subsets[0]


def lm_eval_accuracy(run: Evaluation, task: str) -> float | None:
    """lm-eval's accuracy of `task`: `LMEval_SUMMARY.json`'s `<task>/acc` (a group, as `mmlu`, by lm-eval's group
    value), or else the mean per-sample `acc` of its samples in `LMEval_EVAL.json` (all subtasks pooled: the
    size-weighted mean lm-eval's mmlu group reports); None where neither file holds it."""
    key = f"{task}/acc"
    if run.summary is not None and key in run.summary:
        return number(run.summary[key], f"{run.folder / 'LMEval_SUMMARY.json'}: {key}")
    by_subtask = run.lm_eval_logs().get(task)
    if not isinstance(by_subtask, dict):
        return None
    where = run.folder / "LMEval_EVAL.json"
    values = [number(sample.get("acc"), f"{where}: {task} → {subtask}[{index}].acc")
              for subtask, samples in by_subtask.items() if isinstance(samples, list)
              for index, sample in enumerate(samples)
              if isinstance(sample, dict) and sample.get("filter", "none") == "none"]
    return nan_mean(np.asarray(values, dtype=float)) if values else None


def lm_eval_records(run: Evaluation) -> dict[tuple[str, str | None], float]:
    """A WMDP run's records, as the tool's WMDP jobs record them: `mc_accuracy` on forget (wmdp_<subset>) and on
    general (mmlu, where the run evaluated it)."""
    task = f"wmdp_{wmdp_subset(run)}"
    forget = lm_eval_accuracy(run, task)
    if forget is None:
        raise ImportProblem(f"{run.folder} holds no accuracy of {task}: neither LMEval_SUMMARY.json's '{task}/acc' nor "
                            f"its samples in LMEval_EVAL.json")
    scores = {("mc_accuracy", "forget"): forget}
    general = lm_eval_accuracy(run, GENERAL_TASK)
    if general is not None:
        scores[("mc_accuracy", "general")] = general
    return scores


TOFU = Benchmark(
    "TOFU", "forget_entities", CATALOGUE.selected(tofu.SELECTION), tofu_aggregates(),
    {"forget": {**qa_columns("forget"), "exact_memorization": ("exact_memorization", "score")},
     "retain": qa_columns("retain"), "holdout": {}},
    dataset=lambda run: "tofu",
    target=lambda run: text_value(run, "eval.tofu.forget_split", "forget_split", default="forget"),
    utility=tuple((metric, split) for split in ("retain", "general_authors", "general_facts")
                  for metric in ("prob", "rouge_l_recall", "truth_ratio")),
    truth_ratio="forget_truth_ratio")

MUSE = Benchmark(
    "MUSE", "forget_corpus", CATALOGUE.selected(muse.SELECTION),
    (("verbmem_rouge", "forget", "forget_verbmem_ROUGE", "rougeL_f1", nan_mean),
     ("knowmem_rouge", "forget", "forget_knowmem_ROUGE", "rougeL_f1", nan_mean),
     ("knowmem_rouge", "retain", "retain_knowmem_ROUGE", "rougeL_f1", nan_mean),
     ("extraction_strength", "forget", "extraction_strength", "score", nan_mean)),
    {"forget": {}, "holdout": {}},  # the PrivLeak texts, as `MuseExamples`: their attacks' scores alone
    dataset=lambda run: "muse_" + text_value(run, "eval.muse.data_split", "data_split", default="news").lower(),
    target=lambda run: "forget")

WMDP = Benchmark(
    "LMEval", "forget_corpus", CATALOGUE.selected(wmdp.SELECTION), (), {},
    dataset=lambda run: f"wmdp_{wmdp_subset(run)}", target=lambda run: "forget",
    markers=("LMEval_SUMMARY.json", "LMEval_EVAL.json"), records=lm_eval_records, judged=False)

BENCHMARKS = (TOFU, MUSE, WMDP)


# ---------------------------------------------------------------------------------------------------------------------
# The manifest


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
    named: bool = True  # whether its 'path' cell names a folder

    @property
    def folder(self) -> str:
        """Its job folder's name under the output folder: line, role, method, seeds."""
        parts = [f"{self.number:03d}", self.role if self.role in ROLES else "row", self.method or ""]
        parts += [f"{tag}{seed}" for tag, seed in (("t", self.seed_train), ("u", self.seed_unlearn),
                                                  ("e", self.seed_eval)) if seed is not None]
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(p for p in parts if p))

    def where(self) -> str:
        return f"manifest line {self.number}"

    def line(self, problem: object) -> str:
        """The one line of a problem of this row: its manifest line, its folder, what is wrong."""
        return f"{self.where()} ({self.path}): {problem}"


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
    model = (cells.get("model") or "").strip() or None
    given = {"seed_train": None, "seed_unlearn": None, "seed_eval": None}
    text = (cells.get("path") or "").strip()
    path = (base / text) if text else base
    try:
        if not text:
            raise ImportProblem("the 'path' column must name the folder of an evaluation; got nothing")
        if role not in ROLES:
            raise invalid("role", "the manifest", f"one of {', '.join(ROLES)}", repr(role), "column", ImportProblem)
        if (role == "unlearned") != (method is not None):
            raise ImportProblem("the 'method' column must name the method of an unlearned run and be empty "
                                f"otherwise; got {method!r} for role {role}")
        for name, value in (("method", method), ("model", model)):
            if value is not None and "${" in value:
                raise ImportProblem(f"the {name!r} column holds {value!r}, an interpolation a manifest cannot "
                                    f"resolve; give the name itself")
        for name in given:
            given[name] = parse_seed(cells.get(name, ""), name, required=name == "seed_train" or (
                name == "seed_unlearn" and role == "unlearned"))
        problem = None
    except ImportProblem as error:
        problem = str(error)
    return Row(number, path, role, method, **given, model=model, problem=problem, named=bool(text))


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


def refuse_repeated_folders(manifest: Path, rows: list[Row]) -> None:
    """One folder on two well-formed rows: one evaluation cannot be two models (or one model twice). (A malformed row
    fails alone, whatever its folder.)"""
    seen: dict[Path, Row] = {}
    for row in rows:
        if not row.named or row.problem:
            continue
        key = row.path.resolve()
        if key in seen:
            raise UserError(f"the manifest {manifest} names the folder {row.path} on lines {seen[key].number} and "
                            f"{row.number}: give each evaluation one row")
        seen[key] = row


# ---------------------------------------------------------------------------------------------------------------------
# One run's files


@dataclass
class Evaluation:
    """One run's files: its `<NAME>_EVAL.json` (lm-eval's, read only where its summary lacks a value) and, where
    present, `_SUMMARY.json` and `.hydra/config.yaml`."""

    benchmark: Benchmark
    folder: Path
    logs: dict | None
    summary: dict | None = None
    config: RunConfig | None = None

    @property
    def file(self) -> Path:
        return self.folder / self.benchmark.files[0]

    def lm_eval_logs(self) -> dict:
        """LMEval_EVAL.json (hundreds of megabytes with mmlu's samples): read once, where needed."""
        if self.logs is None:
            self.logs = read_json(self.folder / "LMEval_EVAL.json") if (self.folder / "LMEval_EVAL.json").is_file() \
                else {}
        return self.logs

    def values(self, key: str, name: str, part: str | None = None) -> pd.Series:
        """The per-example `name` of the metric `key` (of its `part`, `forget` or `holdout`, for an attack), by
        example index; lists (the perturbed answers) as their mean, null as NaN; empty where the file has none. A
        value that is not a number, or an index that is not an example's number, is an `ImportProblem` naming the
        file and the key."""
        entry = (self.logs or {}).get(key)
        if part is not None:
            entry = entry.get(part) if isinstance(entry, dict) else None
        by_index = entry.get("value_by_index") if isinstance(entry, dict) else None
        if not isinstance(by_index, dict):
            return pd.Series(dtype=float)
        values = {}
        for index, item in by_index.items():
            where = f"{self.file}: {key}{f' ({part})' if part else ''} → value_by_index[{index!r}].{name}"
            value = item.get(name) if isinstance(item, dict) else None
            if isinstance(value, list):
                value = float(np.mean([number(v, where) for v in value])) if value else None
            values[example_index(index, where)] = number(value, where)
        return pd.Series(values, dtype=float).sort_index()

    def forget_indices(self) -> dict[str, frozenset[int]]:
        """{key (part): example indices} of every forget-side metric: a run and its retrained run must agree."""
        found = {}
        for key, entry in (self.logs or {}).items():
            if not isinstance(entry, dict):
                continue
            if key in ATTACKS:
                for part in ("forget", "holdout"):
                    found[f"{key} ({part})"] = frozenset(self.values(key, "score", part).index)
            elif key.startswith("forget_") or key == "extraction_strength":
                by_index = entry.get("value_by_index")
                found[key] = frozenset(example_index(i, f"{self.file}: {key} → value_by_index")
                                       for i in (by_index if isinstance(by_index, dict) else {}))
        return found


def example_index(index: str, where: str) -> int:
    try:
        return int(index)
    except (TypeError, ValueError):
        raise ImportProblem(f"{where}: the index {index!r} is not an example's number") from None


def read_evaluation(folder: Path) -> Evaluation:
    """The evaluation in `folder`; an `ImportProblem` naming what is missing or unreadable."""
    if not folder.is_dir():
        raise ImportProblem(f"{folder} is not a folder")
    present = [b for b in BENCHMARKS if any((folder / name).is_file() for name in b.files)]
    if len(present) != 1:
        files = [name for b in BENCHMARKS for name in b.files]
        names = ", ".join(files[:-1]) + f" or {files[-1]}"
        raise ImportProblem(f"{folder} holds {'several' if present else 'none'} of {names}; give the folder of one "
                            f"evaluation (its output_dir)")
    benchmark = present[0]
    summary_path = folder / f"{benchmark.name}_SUMMARY.json"
    summary = read_json(summary_path) if summary_path.is_file() else None
    logs = None if benchmark.records is not None else read_json(folder / benchmark.files[0])
    return Evaluation(benchmark, folder, logs, summary, read_config(folder))


def read_json(path: Path) -> dict:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise bad_file(path, f"cannot be read: {error.strerror or error}", ImportProblem) from None
    except ValueError as error:
        raise bad_file(path, f"is not JSON: {error}", ImportProblem) from None
    if not isinstance(content, dict):
        raise bad_file(path, f"holds a {type(content).__name__}, not an object of metrics", ImportProblem)
    return content


# ---------------------------------------------------------------------------------------------------------------------
# Records


def own_records(run: Evaluation) -> dict[tuple[str, str | None], float]:
    """{(metric, split): value} of what the run's files alone give: the aggregates, model utility, the attacks'
    AUCs (forget members against holdout non-members, `metrics.mia_auc`); a WMDP run's accuracies."""
    if run.benchmark.records is not None:
        return run.benchmark.records(run)
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
    table = TextExamples()
    for name in TEXT_COLUMNS:
        values = frame[name].to_numpy()
        table.columns[name] = [None if v is None or v != v else v for v in values] if name in TEXT_COLUMNS[:4] \
            else [values]
    return table


# ---------------------------------------------------------------------------------------------------------------------
# Identity and the retrained run that judges a run


def job_fields(row: Row, run: Evaluation | None) -> dict:
    """The run's identity in result.json, the tool's job fields: the dataset from the run's config (MUSE's and
    WMDP's data split), the model from the manifest or else the base model whose tokenizer the run loaded (the same
    for the original, retrained and unlearned models of one study); an `ImportProblem` where a key it reads cannot
    be resolved."""
    config = run.config if run else None
    model = row.model or config_value(config, "model.tokenizer_args.pretrained_model_name_or_path",
                                      default="unknown")
    seed = row.seed_eval if row.seed_eval is not None else config_value(config, "seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ImportProblem(f"its .hydra/config.yaml gives seed the value {seed!r}, not an integer")
    return {"task": "text", "dataset": run.benchmark.dataset(run) if run else None,
            "model": str(model).rstrip("/").rsplit("/", 1)[-1],
            "scenario": run.benchmark.scenario if run else None, "method": row.method,
            "seed_train": row.seed_train, "seed_unlearn": row.seed_unlearn, "seed_eval": seed,
            "seed_forget": None, "strategy": STRATEGY,
            "precision": str(config_value(config, "model.model_args.torch_dtype", default="unknown")),
            "devices": None}


@dataclass
class Run:
    """A row whose files were read: its evaluation, job fields and target."""

    evaluation: Evaluation
    fields: dict
    target: str

    @property
    def identity(self) -> tuple:
        """What a retrained run must share with the runs it judges: benchmark, dataset, target, model."""
        return (self.evaluation.benchmark.name, self.fields["dataset"], self.target, self.fields["model"])


def read_run(row: Row) -> Run:
    """The row's files, its job fields and target; an `ImportProblem` where they cannot be read."""
    if row.problem:
        raise ImportProblem(row.problem)
    evaluation = read_evaluation(row.path)
    return Run(evaluation, job_fields(row, evaluation), evaluation.benchmark.target(evaluation))


def refuse_repeated_runs(manifest: Path, rows: list[Row], runs: dict[int, Run | ImportProblem]) -> None:
    """Two rows of one run (dataset, target, model, role, method, seeds): the report would count it twice."""
    seen: dict[tuple, Row] = {}
    for row in rows:
        run = runs[row.number]
        if not isinstance(run, Run):
            continue
        fields = run.fields
        key = (*run.identity, row.role, row.method, row.seed_train, row.seed_unlearn, fields["seed_eval"])
        if key in seen:
            what = ", ".join(f"{name} {value}" for name, value in (
                ("dataset", fields["dataset"]), ("target", run.target), ("model", fields["model"]),
                ("role", row.role), ("method", row.method), ("seed_train", row.seed_train),
                ("seed_unlearn", row.seed_unlearn), ("seed_eval", fields["seed_eval"])) if value is not None)
            raise UserError(f"the manifest {manifest} lists the same run on lines {seen[key].number} and "
                            f"{row.number} ({what}): give each run one row")
        seen[key] = row


def retrained_for(row: Row, rows: list[Row], runs: dict[int, Run | ImportProblem]) -> Row | None:
    """The retrained run that judges `row`: same benchmark, dataset, target and model, same training seed, and the
    same unlearning and evaluation seeds where the retrained row gives them (the most specific match; the first in
    the manifest among equals)."""
    mine = runs[row.number]

    def fits(gold: Row) -> int | None:
        score = 0
        for own, theirs in ((row.seed_unlearn, gold.seed_unlearn), (row.seed_eval, gold.seed_eval)):
            if theirs is None:
                continue
            if theirs != own:
                return None
            score += 1
        return score

    candidates = [(fits(gold), -gold.number, gold) for gold in rows
                  if gold.role == "retrained" and isinstance(runs[gold.number], Run)
                  and runs[gold.number].identity == mine.identity and gold.seed_train == row.seed_train]
    candidates = [c for c in candidates if c[0] is not None]
    return max(candidates, key=lambda c: c[:2])[2] if candidates else None


def import_run(row: Row, rows: list[Row], runs: dict[int, Run | ImportProblem]) -> tuple[Outcome, str | None]:
    """The run's outcome (records, examples, catalogue) and a line where it lacks the metrics against M_r."""
    run = runs[row.number]
    evaluation, target = run.evaluation, run.target
    scores = own_records(evaluation)
    examples = example_rows(evaluation, target, row.role, row.method)
    note = None
    if evaluation.benchmark.judged:
        gold_row = retrained_for(row, rows, runs)
        if gold_row is None:
            note = (f"no readable retrained run with seed_train {row.seed_train} of {run.fields['dataset']} "
                    f"{target} ({run.fields['model']}) in the manifest: forget quality and privleak are not computed")
        else:
            gold = runs[gold_row.number].evaluation
            check_same_examples(evaluation, gold, gold_row)
            scores |= against_retrained(evaluation, gold)
            if row.role == "unlearned":
                examples = pd.concat([examples, example_rows(gold, target, "retrained", None)], ignore_index=True)
    records = [{"target": target, "role": row.role, "method": row.method, "metric": metric, "split": split,
                "value": value} for (metric, split), value in scores.items()]
    catalogue = evaluation.benchmark.catalogue.holding(r["metric"] for r in records)
    outcome = Outcome(records=records, catalogue=catalogue.as_dict(),
                      examples=examples_table(examples) if len(examples) else None)
    outcome.succeeded = 1
    return outcome, note


def check_same_examples(run: Evaluation, gold: Evaluation, gold_row: Row) -> None:
    """Refuse a run evaluated on other forget (or holdout) examples than its retrained run: OpenUnlearning compares
    the values alone and would not notice."""
    mine, theirs = run.forget_indices(), gold.forget_indices()
    for key in sorted(mine.keys() & theirs.keys()):
        if mine[key] != theirs[key]:
            raise ImportProblem(f"its forget indices differ from its retrained run's ({gold_row.where()}) in {key}: "
                                f"{len(mine[key])} examples against {len(theirs[key])}, "
                                f"{len(mine[key] ^ theirs[key])} not in both; evaluate both on the same split")


# ---------------------------------------------------------------------------------------------------------------------
# The import: every row's job, written beside the output folder, then swapped in


@dataclass
class Job:
    """One row's job folder: its name, job fields, outcome and the files it came from."""

    row: Row
    fields: dict
    outcome: Outcome
    evaluation: Evaluation | None

    @property
    def failed(self) -> bool:
        return self.outcome.error is not None


@dataclass
class Imported:
    """What the import wrote: the job folders, one line per run imported without a metric (a run that could not be
    imported is a failed job, which the report lists with its reason), and how many rows failed."""

    folders: list[Path] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    failed: int = 0


def import_runs(manifest: Path, out: Path) -> Imported:
    """Write one job folder per manifest row into `out` (module docstring): a run that cannot be imported becomes a
    failed job whose error names its manifest line and the reason, and the others go on. The folders are written
    beside `out` and then swapped in whole, so a former import in `out` never mixes with this one and a failed write
    leaves it as it was. `UserError` (nothing written): `out` is something else than a former import, the manifest
    cannot be read, lists one folder or one run twice, or none of its rows can be imported (`NothingImported`).
    `WriteError`: a file could not be written (nothing imported)."""
    refuse_foreign_out(out)
    rows = read_manifest(manifest)
    refuse_repeated_folders(manifest, rows)
    runs: dict[int, Run | ImportProblem] = {}
    for row in rows:
        try:
            runs[row.number] = read_run(row)
        except ImportProblem as error:
            runs[row.number] = error
    refuse_repeated_runs(manifest, rows, runs)
    jobs, imported = [], Imported()
    for row in rows:
        job, note = row_job(row, rows, runs)
        jobs.append(job)
        if note:
            imported.lines.append(row.line(note))
    imported.failed = sum(job.failed for job in jobs)
    if imported.failed == len(jobs):
        raise NothingImported(f"none of the {len(jobs)} runs of {manifest} could be imported; nothing was written",
                              [job.outcome.error for job in jobs])
    imported.folders = write_import(out, jobs)
    return imported


def row_job(row: Row, rows: list[Row], runs: dict[int, Run | ImportProblem]) -> tuple[Job, str | None]:
    """The row's job, complete or failed (one line: the row and why), and its note."""
    run = runs[row.number]
    if not isinstance(run, Run):
        return Job(row, job_fields(row, None), Outcome(error=row.line(run)), None), None
    try:
        outcome, note = import_run(row, rows, runs)
    except ImportProblem as error:
        return Job(row, run.fields, Outcome(error=row.line(error)), None), None
    return Job(row, run.fields, outcome, run.evaluation), note


def former_import(entry: Path) -> bool:
    """Whether `entry` of an output folder belongs to an import: its report, or a job folder of an imported run."""
    if entry.name == "report" and entry.is_dir():
        return True
    result = stored_result(entry / RESULT)
    return result is not None and isinstance(result.get("source"), dict) and result["source"].get("tool") == TOOL


def refuse_foreign_out(out: Path) -> None:
    """The output folder must be new, empty, or a former import (replaced whole): never a folder of other files."""
    if out.exists() and not out.is_dir():
        raise UserError(f"the output folder {out} is not a folder; give a new folder, or a former import's folder to "
                        f"replace it")
    if not out.is_dir():
        return
    foreign = [entry.name for entry in sorted(out.iterdir()) if not former_import(entry)]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise UserError(f"the output folder {out} holds {foreign[0]}{more}, which no OpenUnlearning import wrote; "
                        f"give a new or empty folder, or a former import's folder (it is then replaced whole)")


def write_import(out: Path, jobs: list[Job]) -> list[Path]:
    """Write the jobs into a folder beside `out`, then swap it in (a former import is removed only once the new one
    is whole); a `WriteError` where that fails, `out` left as it was."""
    staging = out.with_name(f".{out.name}.importing-{os.getpid()}")
    try:
        make_folder(out.parent)
        shutil.rmtree(staging, ignore_errors=True)
        for job in jobs:
            write_job(staging / job.row.folder, job)
        swap(staging, out)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        reason = os.strerror(error.errno) if isinstance(error.errno, int) else str(error)
        kept = f"{out} is as it was" if out.exists() else "nothing was written"
        raise WriteError(f"cannot write the import into {out}: {reason}; {kept}", error.errno) from None
    return [out / job.row.folder for job in jobs]


def swap(staging: Path, out: Path) -> None:
    """`staging` renamed to `out`; a former `out` first set aside, and removed once the new one is in place."""
    if not out.exists():
        os.rename(staging, out)
        return
    former = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    shutil.rmtree(former, ignore_errors=True)
    os.rename(out, former)
    try:
        os.rename(staging, out)
    except OSError:
        os.rename(former, out)
        raise
    shutil.rmtree(former, ignore_errors=True)


def write_job(folder: Path, job: Job) -> None:
    """The row's result.json (and examples.parquet), in the job contract; the source files' places and the run's
    own summary beside them."""
    row, evaluation = job.row, job.evaluation
    result = document(job.fields, job.outcome, started=None)
    config = evaluation.config if evaluation else None
    result["source"] = {"tool": TOOL, "path": str(row.path), "manifest_line": row.number,
                        "config": str(config.path) if config else None,
                        "summary": evaluation.summary if evaluation else None}
    folder.mkdir(parents=True)
    if job.outcome.examples is not None and len(job.outcome.examples):
        job.outcome.examples.write(folder / EXAMPLES)
    write_json(folder / RESULT, result)
