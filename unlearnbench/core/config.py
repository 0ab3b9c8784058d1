"""Structured-config schemas: a misspelled key or a wrongly typed value fails when Hydra composes the config, and a
value outside its range fails `validate` before any work.

Groups whose shape is fixed (task, seeds, paths, training recipe, evaluation, runtime, strategy, precision, study) are
typed here, each numeric field with its range. Component groups (dataset, model, scenario, method) carry the keyword
arguments of their `_target_`, which differ per component; their constructors' signatures check them before any work
starts (`components.build`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, DictConfig, ListConfig, OmegaConf

from unlearnbench.runtime.during import Schedule
from unlearnbench.runtime.errors import UserError, invalid


@dataclass(frozen=True)
class Range:
    """The values a numeric option may take: [low, high] with either end open or absent, or one of `choices`."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()

    def admits(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        low = "" if self.low is None else f"{'(' if self.low_open else '['}{self.low:g}"
        high = "" if self.high is None else f"{self.high:g}{')' if self.high_open else ']'}"
        if not high:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if not low:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {low}, {high}"


def ranged(default: Any, range_: Range, *, optional: bool = False) -> Any:
    """A dataclass field whose values `validate` checks against `range_` (None passes where `optional`)."""
    return field(default=default, metadata={"range": range_, "optional": optional})


AT_LEAST_0, AT_LEAST_1, POSITIVE = Range(low=0), Range(low=1), Range(low=0, low_open=True)


def option_range_problems(kind: str, ranges: Mapping[str, Range], options: Mapping[str, Any],
                          values: Callable[[Any], list] = lambda value: [value]) -> list[str]:
    """A line "kind.name=value is not valid; valid: range" for each of a component's options outside the range it
    declares (`check_options`, which `components.build` calls); `values(value)` lists what one option holds (a
    method's option may be a mapping by model, dataset or scenario)."""
    return [f"{kind}.{name}={value!r} is not valid; valid: {ranges[name]}" for name, value in options.items()
            if name in ranges and not all(ranges[name].admits(leaf) for leaf in values(value))]


@dataclass
class Seeds:
    """Training seed fixes M_o; unlearning seed fixes M_r and the method; eval seed the MIA; forget seed the
    random-sample forget set D_f (by default the unlearning seed: hold it fixed to compare models on one D_f)."""

    train: int = ranged(0, AT_LEAST_0)
    unlearn: int = ranged(II("seeds.train"), AT_LEAST_0)
    eval: int = ranged(II("seeds.unlearn"), AT_LEAST_0)
    forget: int = ranged(II("seeds.unlearn"), AT_LEAST_0)


@dataclass
class Paths:
    data_dir: str = MISSING
    cache_dir: str = MISSING


@dataclass
class TrainRecipe:
    """How M_o and M_r are trained (the SSD authors' recipe: docs/running.md, "Training recipes")."""

    epochs: int = ranged(20, AT_LEAST_1)
    batch_size: int = ranged(64, AT_LEAST_1)
    lr: float = ranged(0.1, POSITIVE)
    momentum: float = ranged(0.9, Range(0, 1, high_open=True))
    weight_decay: float = ranged(5e-4, AT_LEAST_0)
    warmup_epochs: float = ranged(1.0, AT_LEAST_0)
    milestones: list[int] = field(default_factory=lambda: [8, 12, 16], metadata={"range": AT_LEAST_1, "each": True})
    gamma: float = ranged(0.2, Range(0, 1, low_open=True))
    optimizer: str = ranged("sgd", Range(choices=("sgd", "adamw")))  # adamw: the SUPREME ViT recipe (no momentum)
    # After the warm-up: ×gamma at milestones, or cosine annealing or a linear decay (the text task's, as the HF
    # Trainer's) to 0 over the remaining epochs.
    schedule: str = ranged("step", Range(choices=("step", "cosine", "linear")))

    @classmethod
    def identity(cls, train: Mapping[str, Any]) -> dict[str, Any]:
        """What of `train` determines the models it trains, for the cache's keys: every option, unless a task's
        recipe (a subclass) holds options that train no cached model."""
        return dict(train)


@dataclass
class Relearn:
    """Relearn time (Golatkar et al. 2020, docs/metrics.md): copies of M_o, M_r and every M_u fine-tuned on D_f (or
    `examples` of it, drawn with the evaluation seed) with the training recipe's optimiser at a constant rate, no
    augmentation; the steps until the loss on that set falls to M_o's, capped at `max_steps`, and the accuracy on it
    after `k` steps. Off by default: it trains every model of the job once more."""

    enabled: bool = False
    examples: int | None = ranged(None, Range(low=2), optional=True)  # null: all of D_f; a step needs two samples
    max_steps: int = ranged(25, AT_LEAST_1)  # the cap: a model not there by then is recorded as max_steps
    k: int = ranged(1, AT_LEAST_0)  # relearn_acc is the accuracy after k steps (k <= max_steps)
    lr: float | None = ranged(None, POSITIVE, optional=True)  # null: train.lr, the recipe's peak rate
    batch_size: int = ranged(32, Range(low=2))  # batch normalisation in training mode needs two samples

    @staticmethod
    def problems(node: DictConfig, path: str) -> list[str]:
        """The one check across relearn options: the accuracy is taken after k steps, which the cap must allow."""
        k, cap = node.get("k"), node.get("max_steps")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (k, cap)) and k > cap:
            return [f"{path}k={k} is not valid; valid: <= {path}max_steps={cap}"]
        return []


@dataclass
class During:
    """Evaluation along each method's steps (runtime/during.py; docs/comparing.md, "Unlearning dynamics"): at step 0
    (M_o), every `every` steps or epochs and at the end, the named metrics on at most `max_examples` examples of each
    split (the same examples at every point and for every method of a target, drawn with the evaluation seed). Off
    by default. The final records do not change with it; its time is recorded apart (`during_time_s`)."""

    every: Any = None  # null: off; N or "N steps" (every N updates of the model), "N epochs"
    metrics: list[str] | None = None  # null: the task's leaderboard metrics that a point can compute cheaply
    max_examples: int = ranged(256, AT_LEAST_1)  # per split, at every point

    @staticmethod
    def problems(node: DictConfig, path: str) -> list[str]:
        """`every` read as runtime/during.py reads it."""
        try:
            Schedule.parse(node.get("every"))
        except UserError:
            return [f"{path}every={node.get('every')!r} is not valid; valid: null (off), N >= 1 or \"N steps\", "
                    f"\"N epochs\""]
        return []


@dataclass
class Evaluation:
    batch_size: int | None = ranged(None, AT_LEAST_1, optional=True)  # null: by device, 64 on CPUs, 1024 on GPUs
    examples: bool = True  # write examples.parquet (per-example outputs for the forgetting-quality scores)
    relearn: Relearn = field(default_factory=Relearn)  # relearn time, opt-in (`evaluation.relearn.enabled=true`)
    # Metrics added to the task's own (`+metric=NAME`, conf/metric/): slot → a component of the job's task
    # (docs/extending.md, "A metric"); each declares its name, label and ideal beside its function.
    metrics: dict[str, Any] = field(default_factory=dict)
    during: During = field(default_factory=During)  # the dynamics: evaluation along each method's steps, opt-in


@dataclass
class Runtime:
    accelerator: str = ranged("auto", Range(choices=("auto", "cpu", "gpu", "cuda", "mps", "tpu")))
    deterministic: bool = True
    threads: int | None = ranged(None, AT_LEAST_1, optional=True)  # torch intra-op threads (null: torch's default)
    matmul_precision: str = ranged("high", Range(choices=("highest", "high", "medium")))
    # The models' layout for training. null: on for CUDA (cuDNN's fast path with mixed precision), off on CPUs:
    # there PyTorch 2.14's channels_last 1×1 stride-2 convolution backward is nondeterministic and can corrupt memory
    # (seen with narrow ResNets), for a small gain (float32 training 1.0–1.1× on a 2-core AMD EPYC). Evaluation on
    # a CPU takes channels_last inputs whatever this says (forward only: 1.3–2× faster; tasks/image/evaluate.py).
    channels_last: bool | None = None
    print_table: bool = True
    # Live progress: a bar per training run on a terminal, the epoch lines on the console, the sweep's count and ETA
    # after every job. false keeps the job's log file alone (its stage and epoch lines are always written).
    progress: bool = True


@dataclass
class Task:
    """What kind of experiment the dataset poses, and the bench whose steps the job loop runs (core/bench.py): set
    by each dataset's task (`conf/task/<task>.yaml`, which also brings the task's own options: `task_options`)."""

    name: str = MISSING  # the task's id, its package's name (`unlearnbench/tasks/<name>/`)
    bench: str = MISSING  # its `Bench`, a dotted path located by the job loop
    catalogue: str = MISSING  # its metrics' declarations (core/catalogue.py), a dotted path
    options: str | None = None  # the module that declares its own options (`task_options`), where it has any


@dataclass
class Strategy:
    name: str = MISSING
    fabric: str = MISSING  # the strategy name Fabric understands
    devices: int = ranged(1, AT_LEAST_1)
    num_nodes: int = ranged(1, AT_LEAST_1)
    # The process group's timeout: how long a rank waits in a collective (and after a unit of work, for its peers'
    # status) before it takes a peer to be dead or stuck. PyTorch's own default, 30 minutes: far above the longest
    # legitimate wait (a rank publishing a cache entry while the others wait, a cold torch.compile), and a rank that
    # dies is found sooner anyway (ddp_spawn sees its exit at once; SLURM's --kill-on-bad-exit ends the step).
    timeout_s: float = ranged(1800.0, POSITIVE)
    max_devices: int | None = None
    relaunches_script: bool = False  # starts ranks >= 1 by re-running sys.argv: only safe under SLURM
    start_method: str | None = None  # how Fabric starts the ranks it spawns: multiprocessing's spawn, forkserver, fork
    needs_cuda: bool = False
    module: str | None = None  # Python package it needs
    extra: str | None = None  # the unlearnbench extra that installs it
    hint: str | None = None  # what to use instead where it cannot run


@dataclass
class Precision:
    name: str = MISSING
    fabric: str | None = None  # a precision string Fabric understands, or null for a bitsandbytes mode
    bitsandbytes: str | None = None  # nf4, nf4-dq, fp4, fp4-dq, int8, int8-training
    dtype: str | None = None  # compute dtype of the bitsandbytes layers
    needs_cuda: bool = False
    min_capability: list[int] | None = None  # CUDA compute capability, e.g. [8, 9] for FP8
    module: str | None = None
    extra: str | None = None
    hint: str | None = None  # what to use instead on hardware that cannot run it


@dataclass
class Leaderboard:
    """The report's leaderboard: the metrics of its aggregate rank (`metric:split`, or `metric` without a split;
    None: the leaderboard metrics the results' tasks declare, docs/comparing.md), and the bootstrap's resamples.
    Whether a named metric has a best value is the report's to check: only the results declare it."""

    metrics: list[str] | None = None
    resamples: int = ranged(1000, AT_LEAST_1)  # bootstrap resamples of the training seeds (rank intervals, P(best))


@dataclass
class ReportOptions:
    """The end-of-sweep report's options (`unlearnbench-report --target-se` for a rebuilt one)."""

    target_se: float = ranged(0.01, POSITIVE)  # the standard error a method's mean should reach (seed plan)
    compare: list[str] | None = None  # methods whose every pair the power section plans for, beside the
    # leaderboard's neighbours (`unlearnbench-report --compare a,b`)
    min_difference: float | None = ranged(None, POSITIVE, optional=True)  # the difference the power plans detect,
    # in the metric's units (None: each pair's observed difference)
    permutations: int = ranged(100, AT_LEAST_1)  # random splits behind each forgetting quality's null
    figures: bool = True  # draw figures/ (`unlearnbench-report --no-figures` leaves them out of a rebuilt one)
    best_step: bool = False  # dynamics_best_own.csv: each job's best step on its own run, labelled optimistic
    leaderboard: Leaderboard = field(default_factory=Leaderboard)


@dataclass
class StudyDesign:
    """The seed-sensitivity design of `experiment=seed_sensitivity`: I training seeds × J unlearning seeds nested in
    each. `repeat` is the unlearning index j in 0..J-1 (swept); the unlearning seed is seeds.train·J + repeat."""

    I: int = ranged(5, AT_LEAST_1)  # noqa: E741 (the study's own notation)
    J: int = ranged(5, AT_LEAST_1)
    repeat: int = ranged(0, AT_LEAST_0)
    # `experiment=forget_quality`: design A (I training seeds × J unlearning seeds) together with design B (B training
    # seeds, one unlearning seed each; its first I are A's j = 0 jobs); `job` numbers the union's jobs (swept).
    B: int | None = ranged(None, AT_LEAST_1, optional=True)
    job: int = ranged(0, AT_LEAST_0)


@dataclass
class Tune:
    """`experiment=tune` (core/tuning.py, docs/tuning.md): `trials` points of each method's search space, each run on
    the training seeds `seeds`, the best then judged on `heldout` (disjoint from `seeds`); the TPE sampler drawn from
    `seed`; `objective` the metrics (metric:split) the trials minimise the distance to (None: the leaderboard's).
    `stage`, `trial` and `replicate` are set by the sweeper on each job it runs (trial, tuned, default)."""

    trials: int = ranged(20, AT_LEAST_1)
    seeds: list[int] = field(default_factory=lambda: [0])
    heldout: list[int] = field(default_factory=lambda: [1, 2, 3])
    seed: int = ranged(0, AT_LEAST_0)
    objective: list[str] | None = None
    startup_trials: int = ranged(10, AT_LEAST_0)  # TPE's random start-up trials (Optuna's default, 10)
    replicates: int = ranged(1, AT_LEAST_1)  # the whole tuning repeated with this many sampler seeds
    seed_sets: list[list[int]] | None = None  # one list of tuning seeds per replicate (disjoint), instead of `seeds`
    validation_fraction: float = ranged(0.5, Range(0, 1, low_open=True, high_open=True))  # the share of the data
    # outside the training set (test images, general sets, held-out questions) that trials score; the held-out
    # judgement scores the rest
    stage: str | None = ranged(None, Range(choices=("trial", "tuned", "default")), optional=True)
    trial: int | None = ranged(None, AT_LEAST_0, optional=True)
    replicate: int | None = ranged(None, AT_LEAST_0, optional=True)
    stop_step: bool = False  # the stopping step tuned too, from the trials' step records (docs/tuning.md)


@dataclass
class Config:
    task: Task = field(default_factory=Task)  # set by the dataset (conf/task/)
    dataset: Any = MISSING
    model: Any = MISSING
    scenario: Any = MISSING
    strategy: Strategy = MISSING
    precision: Precision = MISSING
    seeds: Seeds = field(default_factory=Seeds)
    paths: Paths = field(default_factory=Paths)
    train: TrainRecipe = field(default_factory=TrainRecipe)
    evaluation: Evaluation = field(default_factory=Evaluation)
    runtime: Runtime = field(default_factory=Runtime)
    report: ReportOptions = field(default_factory=ReportOptions)
    method: Any = None  # absent from the defaults list: `+method=X` selects, none means every method of the task
    methods: list[str] | None = None  # without `+method`: only these of the task's methods, in one job
    study: StudyDesign | None = None  # set by `experiment=seed_sensitivity`
    tune: Tune | None = None  # set by `experiment=tune`
    logger: Any = None  # experiment trackers (conf/logger/, unlearnbench/track/): tracker name → its options


ConfigStore.instance().store(name="unlearnbench_schema", node=Config)

OPTION_GROUPS = {"train": TrainRecipe, "evaluation": Evaluation, "paths": Paths}  # what a task may extend
TASK_OPTIONS: dict[str, dict[str, type]] = {}  # task → group → its schema there (`task_options`)


def task_options(task: str, **groups: type) -> None:
    """Declare a task's own options: for each group of `OPTION_GROUPS` it extends, a subclass of that group's schema
    adding the task's fields (the text task's `train.unlearn`, the image task's `train.augment`). Its
    `conf/task/<task>.yaml` merges them into the config (`- /task_options/<task>_<group>@<group>` in its defaults
    list), which then types them as strictly as the core's own when Hydra composes a job: a job of another task has
    no such option, and a misspelled one is refused. Called where the task's options module is imported, which
    `unlearnbench.conf` does for every task package before Hydra composes."""
    for group, schema in groups.items():
        if group not in OPTION_GROUPS or not issubclass(schema, OPTION_GROUPS[group]):
            valid = ", ".join(f"{name} (a subclass of {base.__name__})" for name, base in OPTION_GROUPS.items())
            raise invalid(group, f"task {task}'s options", valid, schema.__name__)
        ConfigStore.instance().store(group="task_options", name=f"{task}_{group}", node=schema)
    TASK_OPTIONS[task] = dict(groups)


@functools.cache
def job_schema(task: str, module: str | None) -> type:
    """The schema of a job of `task`: the core's `Config` with each group the task extends typed by the task's own
    subclass, read from the module its `task.options` names (so that a config that lost its types on the way, a
    plain copy, is still checked against the task's declaration)."""
    if module is not None:
        importlib.import_module(module)
    extended = TASK_OPTIONS.get(task, {})
    if not extended:
        return Config
    return dataclasses.make_dataclass(f"{task.title()}Config", [
        (group, schema, field(default_factory=schema)) for group, schema in extended.items()], bases=(Config,))

# Names that become parts of a job's folder name: no path separators, no leading dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=,-]*")
NAMED_GROUPS = ("dataset", "model", "scenario", "method", "strategy", "precision")


def validate(cfg: DictConfig) -> None:
    """Raise one `UserError` that lists every option outside its range and every unsafe component name, so that a
    sweep fails before any work (the Hydra callback calls this on the sweep's config, every job on its own)."""
    if OmegaConf.is_missing(cfg.task, "name"):
        raise UserError(f"dataset {OmegaConf.select(cfg, 'dataset.name', default='?')} names no task: a dataset "
                        f"config selects its task in its defaults list (`defaults: [/task: image]`; the tasks: "
                        f"conf/task/)")
    task, module = (OmegaConf.select(cfg, f"task.{key}", default=None) for key in ("name", "options"))
    problems = range_problems(cfg, job_schema(str(task), module), "")
    for group in NAMED_GROUPS:
        name = OmegaConf.select(cfg, f"{group}.name", default=None)
        if name is not None and not SAFE_NAME.fullmatch(str(name)):
            problems.append(f"{group}.name={name!r} must be letters, digits and _ . + = , - (it names the job's "
                            f"folder)")
    problems += leaderboard_problems(OmegaConf.select(cfg, "report.leaderboard.metrics", default=None))
    if problems:
        raise UserError("invalid config: " + "; ".join(problems))


def leaderboard_problems(names: Any) -> list[str]:
    """`report.leaderboard.metrics` entries that are not `metric` or `metric:split` (a syntax check: which metrics
    have a best value only the results' catalogue says, when the report is built)."""
    bad = [str(n) for n in names or () if not str(n).split(":", 1)[0].strip() or str(n).endswith(":")]
    if not bad:
        return []
    return [f"the 'report.leaderboard.metrics' option must name metrics as metric or metric:split (a recorded "
            f"metric's name, then optionally one of its splits); got {', '.join(map(repr, bad))} instead"]


def range_problems(node: Any, schema: type, prefix: str) -> list[str]:
    """The fields of `node` (a config of dataclass `schema`: a job's, `job_schema`) whose resolved value lies outside
    the field's range, and what a schema's own `problems(node, prefix)` finds across its fields."""
    if not isinstance(node, DictConfig):
        return []
    problems = schema.problems(node, prefix) if hasattr(schema, "problems") else []
    hints = typing.get_type_hints(schema)
    for spec in dataclasses.fields(schema):
        path = f"{prefix}{spec.name}"
        nested = next((t for t in (hints[spec.name], *typing.get_args(hints[spec.name]))
                       if dataclasses.is_dataclass(t)), None)
        if spec.name not in node or OmegaConf.is_interpolation(node, spec.name):
            continue  # an interpolated value derives from options checked where they are set
        if nested is not None:
            problems += range_problems(node[spec.name], nested, f"{path}.")
        elif "range" in spec.metadata:
            problems += field_problems(path, node[spec.name], spec.metadata)
    return problems


def field_problems(path: str, value: Any, metadata: dict) -> list[str]:
    if value is None and metadata.get("optional"):
        return []
    each = metadata.get("each", False)
    values = list(value) if each and isinstance(value, ListConfig | list) else [value]
    if all(metadata["range"].admits(v) for v in values):
        return []
    shown = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return [f"{path}={shown} is not valid; valid: {'each ' if each else ''}{metadata['range']}"]


def _subdir_suffix(override_dirname: str) -> str:
    """Job-folder suffix from the overrides that are not already in the folder's readable name.

    Two jobs that differ only in, say, `train.epochs` must not share a folder; a long suffix is shortened with a
    hash so that it stays a valid file name.
    """
    if not override_dirname:
        return ""
    text = override_dirname.replace("/", "-")
    if len(text) > 60:
        text = f"{text[:40]}-{hashlib.sha1(override_dirname.encode()).hexdigest()[:10]}"
    return f"_{text}"


def _unlearn_seed(train: int, repeat: int, count: int) -> int:
    """The study's unlearning seed s_u = i·J + j (0-based i, j; the SUPREME paper's (i−1)·J + j): every (training
    seed, unlearning index) pair gets its own unlearning seed."""
    train, repeat, count = int(train), int(repeat), int(count)
    if count < 1 or not 0 <= repeat < count:
        raise invalid("study.repeat", "experiment=seed_sensitivity", f"in 0..study.J-1 = 0..{count - 1}", repeat)
    if train < 0:
        raise invalid("seeds.train", "experiment=seed_sensitivity", ">= 0", train)
    return train * count + repeat


def _design_cell(job: int, count_a: int, repeats: int, count_b: int) -> tuple[int, int]:
    """(training seed, unlearning index) of job k of designs A ∪ B: k < I·J is A's (k // J, k mod J); the rest are
    B's training seeds I..B−1 with j = 0 (B's training seeds below I are A's j = 0 jobs, not run twice)."""
    job, count_a, repeats, count_b = int(job), int(count_a), int(repeats), int(count_b)
    total = design_jobs(count_a, repeats, count_b)
    if not 0 <= job < total:
        raise invalid("study.job", "experiment=forget_quality", f"in 0..{total - 1} (designs A and B together)", job)
    if job < count_a * repeats:
        return divmod(job, repeats)
    return count_a + job - count_a * repeats, 0


def design_jobs(count_a: int, repeats: int, count_b: int) -> int:
    """The number of jobs of design A (I × J) and design B (B training seeds) together."""
    return int(count_a) * int(repeats) + max(0, int(count_b) - int(count_a))


def _gpus_per_node(accelerator: str, devices: int) -> int:
    """GPUs a SLURM job asks for on each node: one per device, none when the job runs on CPUs (a node without GPUs
    refuses any GPU request)."""
    return 0 if str(accelerator) in ("cpu", "mps") else int(devices)


def _safe_name(name: str) -> str:
    """A component name as a folder-name part: anything but letters, digits and _ . + = , - becomes '-', so that no
    name (even one swept, which `validate` sees only inside its job) puts a job folder outside the sweep folder."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+=,-]", "-", str(name))
    return "-" + cleaned[1:] if cleaned.startswith(".") else cleaned


if not OmegaConf.has_resolver("ub_safe"):
    OmegaConf.register_new_resolver("ub_safe", _safe_name)
if not OmegaConf.has_resolver("ub_suffix"):
    OmegaConf.register_new_resolver("ub_suffix", _subdir_suffix)
if not OmegaConf.has_resolver("ub_gpus_per_node"):
    OmegaConf.register_new_resolver("ub_gpus_per_node", _gpus_per_node)
if not OmegaConf.has_resolver("ub_design_train"):
    OmegaConf.register_new_resolver("ub_design_train", lambda *cell: _design_cell(*cell)[0])
    OmegaConf.register_new_resolver("ub_design_repeat", lambda *cell: _design_cell(*cell)[1])
    OmegaConf.register_new_resolver("ub_design_jobs", design_jobs)
if not OmegaConf.has_resolver("ub_unlearn_seed"):
    OmegaConf.register_new_resolver("ub_unlearn_seed", _unlearn_seed)
