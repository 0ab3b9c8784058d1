"""MUSE's evaluation (Shi et al. 2025) of a corpus job, as OpenUnlearning runs it (configs/eval/muse.yaml and
muse_metrics/*.yaml at d3d7cf9; `docs/text.md` lists where MUSE's own code differs):

- `verbmem_rouge` (forget): ROUGE-L F1 of the greedy continuation of each VerbMem prompt against its `gt`, the
  reference the `gt` tokens read back (OpenUnlearning: the decoded labels, the whole `gt`; MUSE: the first 128
  tokens); stemmed (OpenUnlearning; MUSE: not); in [0, 1] (MUSE: ×100).
- `extraction_strength` (forget): on the VerbMem items, prompt + " " + gt teacher-forced, the `gt` tokens scored.
- `knowmem_rouge` (forget, retain): ROUGE-L F1 of the greedy answer after the in-context prompt (`knowmem_prompt`),
  cut at the stop strings (`KNOWMEM_STOPS`, and as the tokenizer reads them back).
- `mia_min_k_auc` (forget): the AUC of Min-40% (loss-like: higher for non-members) between the PrivLeak forget
  texts (members) and holdout texts, OpenUnlearning's orientation (≈ 1 when memorised).
- `leak_at_k` and `max_rouge_at_k` (forget), where `evaluation.sampling.k` > 0: Leak@k over the KnowMem forget
  questions (`generation.sampled_scores`), each sampled answer cut at the stop strings as a greedy one.
- `privleak` (forget): against this job's own M_r's AUC, (AUC_r − AUC) / (1 − AUC_r) · 100 in OpenUnlearning's terms
  (`metrics.privleak`): never MUSE's hard-coded retrained AUCs, never OpenUnlearning's 0.5 fallback.

Generation lengths are the data's (`CorpusData.new_tokens`): MUSE's files 128 (VerbMem) and 32 (KnowMem), as the
reference; the built-in corpus 32 and 16, the length of its continuations.

MUSE's text handling, as OpenUnlearning runs it (locuslab/open-unlearning at d3d7cf9):

- **KnowMem prompt** (`src/data/qa.py` with `few_shot_dataset_hf_args`, the `Question: ` / `\\n` / `Answer: ` tags,
  and MUSE's own `metrics/knowmem.py`, character for character): every in-context pair in file order as
  "Question: {q}\\nAnswer: {a}\\n\\n", then "Question: {q}\\nAnswer: ".
- **Stop strings** (`configs/eval/muse_metrics/forget_knowmem_ROUGE.yaml`, `src/evals/metrics/utils.py`
  `eval_text_similarity`; MUSE's `metrics/knowmem.py` the same three): generation stops at "\\n\\n", "\\nQuestion" or
  "Question:", and the decoded text is cut before the first of them (and of the end-of-sequence token's text), then
  stripped; only a tokenizer that cannot write a stop is cut where it writes it instead (`decoded_stops`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.core.catalogue import RETRAINED, Metric, Roles, Selection
from unlearnbench.core.examples import COLUMNS
from unlearnbench.tasks.text.benchmarks.corpus import CorpusBench
from unlearnbench.tasks.text.data.corpus import CorpusData
from unlearnbench.tasks.text.evaluate import metrics
from unlearnbench.tasks.text.evaluate.during import PointMetrics
from unlearnbench.tasks.text.evaluate.examples import TextExamples, confidence
from unlearnbench.tasks.text.evaluate.generation import Sampling, generate, sampled, sampled_scores
from unlearnbench.tasks.text.evaluate.scoring import MIA_K, batch_scores
from unlearnbench.tasks.text.model.pretraining import chunk_item, completion_item
from unlearnbench.tasks.text.model.train import Items

FORGET, RETAIN = "forget", "retain"
PRIVLEAK_SPLITS = (FORGET, RETAIN, "holdout")  # members, members M_r trained on too, never trained on
MUSE_COLUMNS = (*COLUMNS, "mia_min_k")
NEW_TOKENS = {"verbmem": 128, "knowmem": 32}  # OpenUnlearning's generation_args for MUSE
KNOWMEM_STOPS = ("\n\n", "\nQuestion", "Question:")

# `MuseEvaluator.values`: memorisation and knowledge closest to M_r's
VERBMEM_ROUGE = Metric("verbmem_rouge", "VerbMem", RETRAINED)
KNOWMEM_ROUGE = Metric("knowmem_rouge", "KnowMem", RETRAINED)

# MUSE's jobs: its own metrics, then privleak (0: M_r's own leakage) and the text task's metrics it records too
SELECTION = Selection(
    (Roles("verbmem_rouge", headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,)),
     Roles("knowmem_rouge", headline=(FORGET, RETAIN), leaderboard=(FORGET, RETAIN), figure=(FORGET, RETAIN)),
     Roles("privleak", headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,)),
     Roles("mia_min_k_auc"), Roles("extraction_strength"), Roles("leak_at_k"), Roles("max_rouge_at_k")),
    PRIVLEAK_SPLITS)
SAMPLED = frozenset({"leak_at_k", "max_rouge_at_k"})
# What a point of a method's dynamics records (evaluate/during.py): every metric of `MuseEvaluator.values`; by default
# privleak, and for VerbMem's ROUGE the extraction strength of the same VerbMem texts, teacher-forced
POINTS = PointMetrics(("verbmem_rouge", "knowmem_rouge", "extraction_strength", "mia_min_k_auc", "privleak",
                       *sorted(SAMPLED)),
                      frozenset({"verbmem_rouge", "knowmem_rouge", *SAMPLED}), SAMPLED,
                      {"verbmem_rouge": ("extraction_strength",)})


@dataclass
class MuseOutputs:
    """Per example: VerbMem's ROUGE-L F1 and extraction strength, KnowMem's ROUGE-L F1 by split, and the PrivLeak
    texts' Min-K% scores and mean NLL by split (forget, holdout)."""

    verbmem: np.ndarray | None  # None where a point of the dynamics generates nothing
    extraction: np.ndarray
    knowmem: dict[str, np.ndarray]  # empty where a point generates nothing
    min_k: dict[str, np.ndarray]
    loss: dict[str, np.ndarray]
    exact: dict[str, np.ndarray]  # 1 where the teacher-forced argmax reproduces every scored token of the text
    leak: np.ndarray | None = None  # Leak@k per KnowMem forget question, where `evaluation.sampling` draws samples
    max_rouge: np.ndarray | None = None  # the expected largest ROUGE-L recall among k samples, per question

    def subset(self, rows: dict[str, np.ndarray]) -> MuseOutputs:
        """The outputs of the probes' examples at `rows` (by probe: `MuseEvaluator.sizes`)."""
        def rows_of(values: np.ndarray | None, probe: str) -> np.ndarray | None:
            return None if values is None else values[rows[probe]]
        return replace(self, verbmem=rows_of(self.verbmem, "verbmem"), extraction=self.extraction[rows["verbmem"]],
                       knowmem={split: values[rows[f"knowmem_{split}"]] for split, values in self.knowmem.items()},
                       **{name: {split: values[rows[f"privleak_{split}"]] for split, values in
                                 getattr(self, name).items()} for name in ("min_k", "loss", "exact")},
                       leak=rows_of(self.leak, "knowmem_forget"), max_rouge=rows_of(self.max_rouge, "knowmem_forget"))


class MuseEvaluator:
    def __init__(self, fabric: Fabric, tokenizer, data: CorpusData, max_length: int, batch_size: int,
                 sampling: Sampling | None = None, reference_numerics: bool = False) -> None:
        self.fabric, self.tokenizer, self.batch_size, self.sampling = fabric, tokenizer, batch_size, sampling
        self.judge = None if sampling is None else sampling.judge(fabric)
        self.reference_numerics = reference_numerics
        self.new_tokens = {**NEW_TOKENS, **data.new_tokens}
        probes, pad = data.probes, tokenizer.pad_token_id
        verbmem = [completion_item(tokenizer, row["prompt"], row["gt"], max_length, insert_space=True)
                   for row in probes["verbmem"]]
        self.verbmem_items = Items(fabric, verbmem, pad)
        self.verbmem_prompts = [item["prompt"] for item in verbmem]
        self.verbmem_references = [self.read_back(item["input_ids"][len(item["prompt"]):]) for item in verbmem]
        self.knowmem = {split: self.knowmem_probe(probes[f"knowmem_{split}"], probes[f"knowmem_{split}_icl"])
                        for split in (FORGET, RETAIN)}
        self.stops = decoded_stops(tokenizer)
        self.privleak = {split: Items(fabric, [chunk_item(tokenizer, row["text"], max_length)
                                               for row in probes[f"privleak_{split}"]], pad)
                         for split in PRIVLEAK_SPLITS if probes.get(f"privleak_{split}")}
        self.generates = True  # VerbMem's and KnowMem's greedy answers (a point of the dynamics may go without)

    def sizes(self) -> dict[str, int]:
        """The examples of each probe, which a point of the dynamics samples (evaluate/during.py)."""
        return {"verbmem": len(self.verbmem_prompts),
                **{f"knowmem_{split}": len(prompts) for split, (prompts, _) in self.knowmem.items()},
                **{f"privleak_{split}": len(items) for split, items in self.privleak.items()}}

    def restricted(self, rows: dict[str, np.ndarray], generates: bool, samples: bool) -> MuseEvaluator:
        """This evaluator on the rows of each probe, generating and sampling only where asked."""
        point = copy.copy(self)
        verbmem = rows["verbmem"]
        point.verbmem_items = self.verbmem_items.subset(verbmem)
        point.verbmem_prompts = [self.verbmem_prompts[row] for row in verbmem]
        point.verbmem_references = [self.verbmem_references[row] for row in verbmem]
        point.knowmem = {split: ([prompts[row] for row in rows[f"knowmem_{split}"]],
                                 [answers[row] for row in rows[f"knowmem_{split}"]])
                         for split, (prompts, answers) in self.knowmem.items()}
        point.privleak = {split: items.subset(rows[f"privleak_{split}"]) for split, items in self.privleak.items()}
        point.generates, point.sampling = generates, self.sampling if samples else None
        return point

    @staticmethod
    def selected(outputs: MuseOutputs, rows: dict[str, np.ndarray]) -> MuseOutputs:
        return outputs.subset(rows)

    def read_back(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def knowmem_probe(self, questions: list[dict], examples: list[dict]) -> tuple[list[list[int]], list[str]]:
        """The prompts' ids and the answers as the tokenizer reads them back."""
        prompts = [self.tokenizer(knowmem_prompt(examples, row["question"]), add_special_tokens=True)["input_ids"]
                   for row in questions]
        answers = [self.read_back(self.tokenizer(row["answer"], add_special_tokens=False)["input_ids"])
                   for row in questions]
        return prompts, answers

    def outputs(self, model: nn.Module) -> MuseOutputs:
        model.eval()
        generated = generate(self.fabric, model, self.tokenizer, self.verbmem_prompts, self.batch_size,
                             self.new_tokens["verbmem"]) if self.generates else None
        scored = [(b, i) for b in batch_scores(self.fabric, model, self.verbmem_items, self.batch_size)
                  for i in range(len(b.labels))]
        extraction = [metrics.extraction_strength(b.predictions[i][:-1].cpu().numpy(), b.labels[i][:-1].cpu().numpy(),
                                                  self.reference_numerics)
                      for b, i in scored]  # the last label dropped, as every OpenUnlearning token metric
        knowmem = {}
        for split, (prompts, answers) in self.knowmem.items() if self.generates else ():
            answered = generate(self.fabric, model, self.tokenizer, prompts, self.batch_size,
                                self.new_tokens["knowmem"])
            knowmem[split] = metrics.rouge_l_f1([cut_at_stops(text, self.stops) for text in answered], answers)
        leak = max_rouge = None
        if self.sampling is not None:  # Leak@k on the KnowMem forget questions, each sample cut as a greedy answer
            prompts, answers = self.knowmem[FORGET]
            samples = sampled(self.fabric, model, self.tokenizer, prompts, self.batch_size, self.new_tokens["knowmem"],
                              self.sampling)
            leak, max_rouge = sampled_scores([[cut_at_stops(text, self.stops) for text in drawn] for drawn in samples],
                                             answers, self.sampling, self.judge, self.batch_size)
        min_k, loss, exact = {}, {}, {}
        for split, items in self.privleak.items():
            batches = batch_scores(self.fabric, model, items, self.batch_size)
            rows = [(b, i) for b in batches for i in range(len(b.labels))]
            loss[split] = np.concatenate([b.loss.double().cpu().numpy() for b in batches])
            min_k[split] = np.array([metrics.min_k(b.logprobs[i][:-1].double().cpu().numpy(), MIA_K) for b, i in rows])
            exact[split] = np.array([int(bool((b.predictions[i] == b.labels[i]).all())) for b, i in rows])
        verbmem = None if generated is None else metrics.rouge_l_f1(generated, self.verbmem_references)
        return MuseOutputs(verbmem, np.array(extraction), knowmem,
                           min_k, loss, exact, leak, max_rouge)

    @staticmethod
    def values(outputs: MuseOutputs, retrained: MuseOutputs) -> dict:
        auc = metrics.mia_auc(outputs.min_k[FORGET], outputs.min_k["holdout"])
        auc_r = metrics.mia_auc(retrained.min_k[FORGET], retrained.min_k["holdout"])
        return {**({} if outputs.verbmem is None else {("verbmem_rouge", FORGET): float(outputs.verbmem.mean())}),
                ("extraction_strength", FORGET): float(outputs.extraction.mean()),
                **{("knowmem_rouge", split): float(values.mean()) for split, values in outputs.knowmem.items()},
                ("mia_min_k_auc", FORGET): auc, ("privleak", FORGET): metrics.privleak(auc, auc_r),
                **({} if outputs.leak is None else {("leak_at_k", FORGET): float(outputs.leak.mean()),
                                                    ("max_rouge_at_k", FORGET): float(outputs.max_rouge.mean())})}

    @staticmethod
    def finite(outputs: MuseOutputs) -> bool:
        return all(np.isfinite(values).all() for values in (*outputs.loss.values(), *outputs.min_k.values()))


@dataclass
class MuseExamples(TextExamples):
    """`examples.parquet` of a MUSE job: one row per (model, PrivLeak text) of forget (D_f's texts), retain (texts
    of the retain corpus, where the data has them) and holdout (never trained on), so that the report's per-example
    scores (ε, F, LiRA, KLOM) read MUSE's jobs as the text task's: `conf` from the text's mean NLL, `label` −1 (no
    class), `pred` 1 where the teacher-forced argmax reproduces the whole text."""

    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in MUSE_COLUMNS})

    def add_model(self, target: str, role: str, method: str | None, outputs: MuseOutputs, positions: dict,
                  reference: MuseOutputs) -> None:
        for split, loss in outputs.loss.items():
            n = len(loss)
            index = positions.get(f"privleak_{split}", np.arange(n))  # in the whole set, where a job scores a part
            values = {"index": index, "label": np.full(n, -1), "conf": confidence(loss), "loss": loss,
                      "pred": outputs.exact[split], "mia_min_k": outputs.min_k[split]}
            self.extend(n, {"target": target, "role": role, "method": method, "split": split}, values)


class MuseBench(CorpusBench):
    """`task.bench` of `dataset=muse_news|muse_books|muse_fictitious`."""

    preset = "experiment=muse"
    selection = SELECTION
    points = POINTS

    def examples(self) -> MuseExamples:
        return MuseExamples()

    def evaluator(self, batch_size: int) -> MuseEvaluator:
        return MuseEvaluator(self.fabric, self.tokenizer, self.data, self.model.max_length, batch_size,
                             self.sampling(), self.config["evaluation"]["reference_numerics"])


def knowmem_prompt(examples: Sequence[dict], question: str) -> str:
    """The in-context pairs (`question`, `answer`) in order, then the question, as MUSE and OpenUnlearning write
    it."""
    shots = "".join(f"Question: {pair['question']}\nAnswer: {pair['answer']}\n\n" for pair in examples)
    return f"{shots}Question: {question}\nAnswer: "


def decoded_stops(tokenizer, stops: Sequence[str] = KNOWMEM_STOPS) -> tuple[str, ...]:
    """The stop strings, and, for each that the tokenizer cannot write, the form it writes instead.

    MUSE (swj0419/muse_bench `metrics/knowmem.py`, `get_prefix_before_words_occur`) and OpenUnlearning
    (`eval_text_similarity`) cut the decoded text at the stop strings themselves, so a tokenizer that writes them
    (Llama's, GPT-2's) is cut at them alone: at "\\nQuestion", never at a bare "Question" inside an answer. A
    tokenizer that reads a stop back as another string holding it (" \\nQuestion") needs nothing more. One that
    cannot write it at all (the built-in word-level tokenizer has no line break: "\\nQuestion" comes back as
    "Question", "Question:" as "Question :") gets its own reading of the stop, unstripped, the only form a
    generated stop takes in its text."""
    read_back = (tokenizer.decode(tokenizer(stop, add_special_tokens=False)["input_ids"]) for stop in stops)
    unwritable = (text for stop, text in zip(stops, read_back, strict=True) if text.strip() and stop not in text)
    return tuple(dict.fromkeys([*stops, *unwritable]))


def cut_at_stops(text: str, stops: Sequence[str] = KNOWMEM_STOPS) -> str:
    """The text before the earliest of `stops`, stripped."""
    end = min((text.find(stop) for stop in stops if stop and stop in text), default=len(text))
    return text[:end].strip()
