"""The text task's own options (`core.config.task_options`): the unlearning loop its presets set for every method
(`train.unlearn`), and its evaluation's Leak@k sampling, GradNorm attack, reference numerics and multiple-choice BOS.
A job of another task has none of them; which of them a benchmark of this task honours, its bench says
(`Bench.ignores`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from unlearnbench.core.config import (
    AT_LEAST_0,
    AT_LEAST_1,
    POSITIVE,
    Evaluation,
    Range,
    TrainRecipe,
    ranged,
    task_options,
)


@dataclass
class UnlearnLoop:
    """The text task's unlearning loop for every forget–retain method of a job at once (docs/text.md, "Methods"):
    each option set here replaces that option of every such method, null keeps the method's own. The reference
    presets (`experiment=wmdp_reference`, …) set their experiment's trainer arguments here, as OpenUnlearning's
    experiment configs set `trainer.args` for whichever trainer runs."""

    epochs: int | None = ranged(None, AT_LEAST_1, optional=True)
    max_steps: int | None = ranged(None, AT_LEAST_1, optional=True)  # optimiser steps; replaces epochs (HF's)
    lr: float | None = ranged(None, POSITIVE, optional=True)
    batch_size: int | None = ranged(None, AT_LEAST_1, optional=True)  # rows per optimiser step
    accumulation: int | None = ranged(None, AT_LEAST_1, optional=True)  # micro-batches a step's batch is cut into
    weight_decay: float | None = ranged(None, AT_LEAST_0, optional=True)
    warmup_epochs: float | None = ranged(None, AT_LEAST_0, optional=True)
    schedule: str | None = ranged(None, Range(choices=("linear", "constant")), optional=True)


@dataclass
class TextTrain(TrainRecipe):
    unlearn: UnlearnLoop = field(default_factory=UnlearnLoop)  # the unlearning loop, for every method

    @classmethod
    def identity(cls, train: Mapping[str, Any]) -> dict[str, Any]:
        """Every option but the unlearning loop, which trains no cached model (so M_o and M_r are shared by jobs
        that unlearn differently)."""
        return {name: value for name, value in train.items() if name != "unlearn"}


@dataclass
class Sampling:
    """Leak@k (arXiv 2511.04934; docs/text.md): `n` sampled generations per forget prompt (n >= k; null: k), every
    draw from the evaluation seed, at `temperature` with nucleus `top_p`, each labelled leaked where its ROUGE-L
    recall reaches `threshold` (and, with `nli` a local NLI model's folder, where that model finds the answer
    entailed); Leak@k estimates the chance that one of k draws leaks. `k` 0: off (greedy generations alone)."""

    k: int = ranged(0, AT_LEAST_0)
    n: int | None = ranged(None, AT_LEAST_1, optional=True)
    temperature: float = ranged(1.0, POSITIVE)
    top_p: float = ranged(1.0, Range(low=0, high=1, low_open=True))
    threshold: float = ranged(0.1, Range(low=0, high=1))
    nli: str | None = None

    @staticmethod
    def problems(node: DictConfig, path: str) -> list[str]:
        """The one check across sampling options: Leak@k picks k of the n draws of a prompt, so n >= k."""
        k, n = node.get("k"), node.get("n")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (k, n)) and n < k:
            return [f"{path}n={n} is not valid; valid: >= {path}k={k} (or null: k)"]
        return []


@dataclass
class TextEvaluation(Evaluation):
    sampling: Sampling = field(default_factory=Sampling)  # Leak@k, opt-in (`evaluation.sampling.k`)
    # the GradNorm attack (a backward pass per forget and holdout example): null runs it wherever the benchmark has
    # it and the strategy keeps each model whole; true insists (refused where it cannot run); false off
    gradnorm: bool | None = None
    reference_numerics: bool = False  # the metrics with OpenUnlearning's exact numerics (its 1e-10 terms)
    # multiple-choice scoring (WMDP, MMLU) puts the tokenizer's BOS before each context where true; false is
    # lm-evaluation-harness 0.4.8's HF model (add_bos_token=False), the version OpenUnlearning pins
    add_bos_token: bool = False


task_options("text", train=TextTrain, evaluation=TextEvaluation)
