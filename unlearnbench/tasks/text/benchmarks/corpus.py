"""The bench of the text task's corpus benchmarks (MUSE, WMDP; `data/corpus.py`): the text task's job steps over
pretraining chunks instead of question–answer records. A benchmark's bench derives from `CorpusBench` and says how
its models are evaluated (`evaluator`).

    data, tokenizer <- dataset.load(), model.tokenizer(the data's text)
    D_f, D_r, D_r+ <- the forget, retain and extra corpora cut into chunks of model.max_length tokens
    M_o <- the base model trained on D_f ∪ D_r ∪ D_r+ with the training seed (or from the cache)
    M_r <- the base model trained on D_r ∪ D_r+ with the unlearning seed (or from the cache)
    records += M_r's and M_o's metrics (the benchmark's), relearn time where `evaluation.relearn` is on
    for each method a: M_u <- a(copy of M_o) on D_f with D_r as its retain set; records += M_u's metrics
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar

import numpy as np
from lightning_fabric import Fabric

from unlearnbench.core.outcome import Outcome
from unlearnbench.core.plan import JobPlan
from unlearnbench.core.validation import scored_part
from unlearnbench.runtime import progress
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.bench import EVAL_BATCH, TextBench, TextEvaluation, TunedModel
from unlearnbench.tasks.text.data.corpus import CorpusData, CorpusSplits, ForgetCorpus
from unlearnbench.tasks.text.evaluate.examples import TextExamples
from unlearnbench.tasks.text.model.pretraining import chunk_item
from unlearnbench.tasks.text.model.train import Items


class CorpusBench(TextBench):
    scenario_type = ForgetCorpus
    ignores: ClassVar[Mapping[str, str]] = {
        "evaluation.gradnorm": "its benchmark runs no GradNorm attack (the text task's, on TOFU-format data)"}

    def __init__(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        self.prepare(fabric, plan, outcome)
        self.data: CorpusData
        self.probe_rows: dict[str, np.ndarray] = {}  # where a tuning's job scores a part of a held-out probe
        self.data = self.scored_probes(self.data)  # after the tokenizer and the cache's identity: both see every text
        self.targets = self.scenario.targets(self.data)
        corpus = self.scenario.split(self.tokenizer, self.data, self.model.max_length)
        empty = [name for name, chunks in (("forget", corpus.forget), ("retain", corpus.retain)) if not chunks]
        if empty:
            raise UserError(f"dataset {self.data.name}: its {' and '.join(empty)} corpus holds no text; a corpus "
                            f"benchmark unlearns a forget corpus with a retain corpus")
        self.splits = {target: corpus for target in self.targets}
        if plan.config["evaluation"]["examples"]:
            outcome.examples = self.examples()

    def scored_probes(self, data: CorpusData) -> CorpusData:
        """The data with the part of each held-out probe (`CorpusData.held_out`: MUSE's PrivLeak holdout texts,
        WMDP's MMLU questions) this job scores: a tuning's trials one part, its held-out judgement the other
        (core/validation.py); every probe whole outside tuning. The corpora, and the probes of what they hold
        (VerbMem, KnowMem, the other PrivLeak texts, WMDP's hazard questions), are the object of unlearning: whole."""
        parts = [scored_part(self.config, name, len(data.probes[name])) for name in data.held_out]
        parts = [part for part in parts if part is not None]
        if not parts:
            return data
        self.outcome.dataset["scored"] = {part.name: part.describe() for part in parts}
        self.probe_rows = {part.name: part.rows for part in parts}
        return replace(data, probes=data.probes | {part.name: [data.probes[part.name][row] for row in part.rows]
                                                   for part in parts})

    def split(self, target: str) -> CorpusSplits:
        splits = self.splits[target]
        progress.say(f"target {target}: forget {len(splits.forget)} chunks, retain {len(splits.retain)} (M_r trains "
                     f"on {len(splits.retrained_on)})")
        return splits

    def data_note(self) -> str:
        return (f"{len(self.data.forget):,} forget, {len(self.data.retain):,} retain and {len(self.data.extra):,} "
                f"other texts")

    def items(self, records: list[dict]) -> Items:
        """Pretraining items of chunk records (`pretraining.chunk_item`)."""
        encoded = [chunk_item(self.tokenizer, r["text"], self.model.max_length) for r in records]
        return Items(self.fabric, encoded, self.encoder.pad_id)

    def original_records(self) -> list[dict]:
        splits = self.splits[self.targets[0]]
        return splits.forget + splits.retrained_on

    def retrained_records(self, splits: CorpusSplits) -> list[dict]:
        return splits.retrained_on

    def method_retain(self, splits: CorpusSplits) -> list[dict]:
        return splits.retain

    def evaluation(self, target: str, splits: CorpusSplits, original: TunedModel,
                   retrained: TunedModel) -> TextEvaluation:
        evaluator = self.evaluator(self.config["evaluation"]["batch_size"] or EVAL_BATCH)
        return TextEvaluation(self.outcome, evaluator, target, self.probe_rows, original, retrained, self.points,
                              self.during)

    def examples(self) -> TextExamples | None:
        """The benchmark's examples.parquet, or None where it writes none."""
        return None

    @abstractmethod
    def evaluator(self, batch_size: int):
        """The benchmark's evaluator: `outputs(model)`, `values(outputs, M_r's outputs)` (result.json's records
        as {(metric, split): value}) and `finite(outputs)`."""
