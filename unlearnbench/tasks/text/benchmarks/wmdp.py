"""WMDP's evaluation (Li et al. 2024) of a corpus job: `mc_accuracy` on the hazard questions (split `forget`) and on
the general questions (split `general`: MMLU's, or the built-in stand-in), zero-shot as lm-evaluation-harness scores
them (`evaluate/multiple_choice.py`: the task's description and prompt, argmax of log p(" A") … log p(" D"), the ids as
lm-eval 0.4.8's HF model makes them, with the tokenizer's BOS only where `evaluation.add_bos_token` is true). Chance
is 0.25; WMDP's RMU brings the hazard accuracy of zephyr-7b-beta near it while keeping MMLU's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.core.catalogue import RETRAINED, Metric, Roles, Selection
from unlearnbench.tasks.text.benchmarks.corpus import CorpusBench
from unlearnbench.tasks.text.data.corpus import CorpusData
from unlearnbench.tasks.text.evaluate import multiple_choice
from unlearnbench.tasks.text.evaluate.during import PointMetrics

SPLITS = ("forget", "general")
# `WmdpEvaluator.values`: the hazard and general accuracies closest to M_r's
MC_ACCURACY = Metric("mc_accuracy", "Acc", RETRAINED)
# WMDP's jobs: its accuracies; they write no examples.parquet the report's per-example scores read
SELECTION = Selection((Roles("mc_accuracy", headline=SPLITS, leaderboard=SPLITS, figure=SPLITS),), SPLITS,
                      per_example=False)
POINTS = PointMetrics(("mc_accuracy",))  # a point of a method's dynamics (evaluate/during.py): nothing generated


class WmdpEvaluator:
    """Per question of each split: the log-likelihood of each letter; `values` the accuracy per split."""

    def __init__(self, fabric: Fabric, tokenizer, data: CorpusData, batch_size: int,
                 add_bos_token: bool = False) -> None:
        self.fabric, self.tokenizer, self.batch_size = fabric, tokenizer, batch_size
        self.add_bos_token = add_bos_token
        self.questions = {split: data.probes[split] for split in SPLITS}
        self.contexts = {split: [multiple_choice.context(q["question"], q["choices"], q["subject"]) for q in rows]
                         for split, rows in self.questions.items()}

    def sizes(self) -> dict[str, int]:
        """The questions of each split, which a point of the dynamics samples (evaluate/during.py)."""
        return {split: len(rows) for split, rows in self.questions.items()}

    def restricted(self, rows: dict[str, np.ndarray], generates: bool, samples: bool) -> WmdpEvaluator:
        """This evaluator on the questions at `rows` of each split (it generates and samples nothing)."""
        point = copy.copy(self)
        point.questions = {split: [self.questions[split][row] for row in kept] for split, kept in rows.items()}
        point.contexts = {split: [self.contexts[split][row] for row in kept] for split, kept in rows.items()}
        return point

    @staticmethod
    def selected(outputs: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {split: likelihoods[rows[split]] for split, likelihoods in outputs.items()}

    def encoder(self, model: nn.Module) -> multiple_choice.HarnessEncoder:
        """As `HFLM(model, add_bos_token=evaluation.add_bos_token)` makes ids for this model: its config gives the
        length a request is cut to (and, for gemma, the BOS)."""
        return multiple_choice.HarnessEncoder.of(self.tokenizer, getattr(model, "config", None), self.add_bos_token)

    def outputs(self, model: nn.Module) -> dict[str, np.ndarray]:
        model.eval()
        encoder = self.encoder(model)
        with self.fabric.autocast():
            return {split: multiple_choice.letter_log_likelihoods(model, encoder, contexts,
                                                                  self.tokenizer.pad_token_id, self.fabric.device,
                                                                  self.batch_size)
                    for split, contexts in self.contexts.items()}

    def values(self, outputs: dict[str, np.ndarray], retrained: dict[str, np.ndarray]) -> dict:
        answers = {split: [q["answer"] for q in rows] for split, rows in self.questions.items()}
        return {("mc_accuracy", split): float(multiple_choice.correct(likelihoods, answers[split]).mean())
                for split, likelihoods in outputs.items()}

    @staticmethod
    def finite(outputs: dict[str, np.ndarray]) -> bool:
        return all(np.isfinite(likelihoods).all() for likelihoods in outputs.values())


class WmdpBench(CorpusBench):
    """`task.bench` of `dataset=wmdp|wmdp_fictitious`."""

    preset = "experiment=wmdp"
    selection = SELECTION
    points = POINTS
    ignores: ClassVar[Mapping[str, str]] = {**CorpusBench.ignores,  # multiple choice: nothing generated
               "evaluation.sampling.k": "its benchmark generates no text to sample (Leak@k is scored on TOFU-format "
                                        "and MUSE data)"}

    def evaluator(self, batch_size: int) -> WmdpEvaluator:
        return WmdpEvaluator(self.fabric, self.tokenizer, self.data, batch_size,
                             self.config["evaluation"]["add_bos_token"])
