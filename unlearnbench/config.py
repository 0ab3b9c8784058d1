"""Structured-config schemas: a misspelled key or a wrongly typed value fails when Hydra composes the config.

Groups whose shape is fixed (task, seeds, paths, training recipe, evaluation, runtime, strategy, precision) are
typed here. Component groups (dataset, model, scenario, method) carry the keyword arguments of their `_target_`,
which differ per component; their constructors' signatures check them before any work starts (`components.build`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, OmegaConf


@dataclass
class Seeds:
    """Training seed fixes M_o; unlearning seed fixes D_f (random sample), M_r and the method; eval seed the MIA."""

    train: int = 0
    unlearn: int = II("seeds.train")
    eval: int = II("seeds.unlearn")


@dataclass
class Paths:
    data_dir: str = MISSING
    cache_dir: str = MISSING


@dataclass
class Augment:
    """Batch augmentation on the device: random crop with zero padding, horizontal flip, rotation (degrees)."""

    crop_padding: int = 4
    flip: bool = True
    rotation: float = 15.0


@dataclass
class TrainRecipe:
    """How M_o and M_r are trained (spec/methods.md: the reference recipe)."""

    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 1.0
    milestones: list[int] = field(default_factory=lambda: [8, 12, 16])
    gamma: float = 0.2
    augment: Augment = field(default_factory=Augment)


@dataclass
class Evaluation:
    batch_size: int = 1024
    mia_max_members: int = 10000  # the MIA attacker sees at most this many retain samples (drawn with seeds.eval)
    mia_loss_folds: int = 5


@dataclass
class Runtime:
    accelerator: str = "auto"
    deterministic: bool = True
    threads: int | None = None  # torch intra-op threads; fix it for bit-identical results across machines' loads
    matmul_precision: str = "high"
    # null: on for CUDA (cuDNN's fast path), off elsewhere: on CPUs, PyTorch 2.14's channels_last 1×1 stride-2
    # convolution backward is nondeterministic and can corrupt memory (seen with narrow ResNets).
    channels_last: bool | None = None
    print_table: bool = True


@dataclass
class Task:
    """What kind of experiment the dataset poses, and the function that runs one job of it."""

    name: str = "image_classification"
    runner: str = "unlearnbench.job.execute"


@dataclass
class Strategy:
    name: str = MISSING
    fabric: str = MISSING  # the strategy name Fabric understands
    devices: int = 1
    num_nodes: int = 1
    max_devices: int | None = None
    relaunches_script: bool = False  # starts ranks >= 1 by re-running sys.argv: only safe under SLURM
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
class Study:
    """The seed-sensitivity design of `experiment=seed_sensitivity`: I training seeds × J unlearning seeds nested in
    each. `repeat` is the unlearning index j in 0..J-1 (swept); the unlearning seed is seeds.train·J + repeat."""

    I: int = 5  # noqa: E741 (the study's own notation)
    J: int = 5
    repeat: int = 0


@dataclass
class Config:
    task: Task = field(default_factory=Task)  # set by the datasets of other tasks (ranking: `experiment=foltr`)
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
    method: Any = None  # absent from the defaults list: `+method=X` selects, none means every method of the task
    study: Study | None = None  # set by `experiment=seed_sensitivity`


ConfigStore.instance().store(name="unlearnbench_schema", node=Config)


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
        raise ValueError(f"study.repeat must lie in 0..study.J-1 = 0..{count - 1}, got {repeat}")
    if train < 0:
        raise ValueError(f"seeds.train must be >= 0 in the seed-sensitivity study, got {train}")
    return train * count + repeat


if not OmegaConf.has_resolver("ub_suffix"):
    OmegaConf.register_new_resolver("ub_suffix", _subdir_suffix)
if not OmegaConf.has_resolver("ub_unlearn_seed"):
    OmegaConf.register_new_resolver("ub_unlearn_seed", _unlearn_seed)
