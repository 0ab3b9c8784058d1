"""Evaluating a causal LM on the text task's splits: per example, then the metrics of TOFU and OpenUnlearning.

`TextEvaluator.outputs(model)` reads every split once: the mean NLL of the answer, of the paraphrased answer and of
each perturbed answer (teacher-forced, right-padded batches), the token log-probabilities and Min-K%++ moments,
the argmax predictions, and a greedy generation scored by ROUGE-L recall. `model_scores` turns a model's outputs,
and M_r's, into `result.json` records (`docs/text.md` lists each with the reference's value where it differs).

Which side of the truth ratio is "true": the paraphrased answer where the records have one (forget and retain, as
OpenUnlearning), the answer itself on the general sets (TOFU's real authors and world facts).
"""

from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass

import numpy as np
import torch
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.core.catalogue import NO_SPLIT, Roles, Selection
from unlearnbench.runtime import interrupt
from unlearnbench.tasks.text.evaluate import metrics
from unlearnbench.tasks.text.evaluate.during import PointMetrics
from unlearnbench.tasks.text.evaluate.examples import SplitOutputs, reference_score
from unlearnbench.tasks.text.evaluate.generation import Sampling, generate, sampled, sampled_scores
from unlearnbench.tasks.text.evaluate.scoring import MIA_K, batch_scores
from unlearnbench.tasks.text.model.causal_lm import Encoder
from unlearnbench.tasks.text.model.losses import shifted
from unlearnbench.tasks.text.model.train import Items, forward
from unlearnbench.tasks.text.scenario import TextSplits

MIA_SCORES = ("loss", "zlib", "min_k", "min_k_pp", "gradnorm")  # gradnorm where `evaluation.gradnorm` is on
FORGET = "forget"
UTILITY_SPLITS = ("retain", "general_authors", "general_facts")  # model utility's 9 values: 3 metrics × these
GENERAL = "general_"  # the prefix of the general sets' split names (TOFU's real authors and world facts)

# TOFU's jobs: forget quality and model utility first, the MIA AUCs and privleak after (`model_scores`)
SELECTION = Selection(
    (Roles("forget_quality", headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,)),
     Roles("forget_quality_first", headline=(FORGET,)),
     Roles("model_utility", headline=(NO_SPLIT,), leaderboard=(NO_SPLIT,), figure=(NO_SPLIT,)),
     Roles("prob", headline=(FORGET,)), Roles("rouge_l_recall", headline=(FORGET,)),
     Roles("truth_ratio", headline=(FORGET,)), Roles("extraction_strength"), Roles("leak_at_k"),
     Roles("max_rouge_at_k"), Roles("exact_memorization"), Roles("mia_loss_auc"), Roles("mia_zlib_auc"),
     Roles("mia_min_k_auc", headline=(FORGET,)), Roles("mia_min_k_pp_auc"), Roles("mia_reference_auc"),
     Roles("mia_gradnorm_auc"), Roles("privleak", headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,))),
    (FORGET, "retain", "holdout", *UTILITY_SPLITS[1:]))
SAMPLED = frozenset({"leak_at_k", "max_rouge_at_k"})
# What a point of a method's dynamics records (evaluate/during.py): `model_scores`'s metrics but the GradNorm attack's;
# model utility holds ROUGE-L, so its probabilities and truth ratios stand in for it by default
POINTS = PointMetrics(
    ("forget_quality", "model_utility", "prob", "truth_ratio", "rouge_l_recall", "exact_memorization",
     "extraction_strength", "mia_loss_auc", "mia_zlib_auc", "mia_min_k_auc", "mia_min_k_pp_auc", "mia_reference_auc",
     "privleak", "leak_at_k", "max_rouge_at_k"),
    frozenset({"model_utility", "rouge_l_recall", *SAMPLED}), SAMPLED, {"model_utility": ("prob", "truth_ratio")})


@dataclass
class SplitItems:
    """One split's encoded records: the answers, the paraphrased answers (or the answers again), the perturbed
    answers (flattened, k per record), the generation prompts and the ROUGE references."""

    answers: Items
    true: Items | None
    perturbed: Items | None
    k: int
    prompts: list[list[int]]
    references: list[str]
    zlib_lengths: np.ndarray

    def subset(self, rows: np.ndarray) -> SplitItems:
        """The records at `rows` (each with its k perturbed answers)."""
        perturbed = (rows[:, None] * self.k + np.arange(self.k)).reshape(-1)
        return SplitItems(self.answers.subset(rows), None if self.true is None else self.true.subset(rows),
                          None if self.perturbed is None else self.perturbed.subset(perturbed), self.k,
                          [self.prompts[row] for row in rows], [self.references[row] for row in rows],
                          self.zlib_lengths[rows])


class TextEvaluator:
    def __init__(self, fabric: Fabric, encoder: Encoder, splits: TextSplits, batch_size: int,
                 max_new_tokens: int, sampling: Sampling | None = None, gradnorm: bool = False,
                 reference_numerics: bool = False) -> None:
        self.fabric, self.encoder, self.batch_size, self.max_new_tokens = fabric, encoder, batch_size, max_new_tokens
        self.sampling, self.gradnorm, self.reference_numerics = sampling, gradnorm, reference_numerics
        self.judge = None if sampling is None else sampling.judge(fabric)
        self.items = {name: self.encode(records, not name.startswith(GENERAL))
                      for name, records in splits.evaluated().items()}
        self.generates = True  # the greedy answers' ROUGE-L (a point of the dynamics may go without)

    def sizes(self) -> dict[str, int]:
        """The examples of each split, which a point of the dynamics samples (evaluate/during.py)."""
        return {name: len(items.answers) for name, items in self.items.items()}

    def restricted(self, rows: dict[str, np.ndarray], generates: bool, samples: bool) -> TextEvaluator:
        """This evaluator on the rows of each split, generating (ROUGE-L) and sampling (Leak@k) only where asked,
        without the GradNorm attack."""
        point = copy.copy(self)
        point.items = {name: items.subset(rows[name]) for name, items in self.items.items()}
        point.generates, point.gradnorm = generates, False
        point.sampling = self.sampling if samples else None
        return point

    @staticmethod
    def selected(outputs: dict[str, SplitOutputs], rows: dict[str, np.ndarray]) -> dict[str, SplitOutputs]:
        return {name: out.subset(rows[name]) for name, out in outputs.items()}

    def encode(self, records: list[dict], paraphrased: bool = True) -> SplitItems:
        """The split's items; the truth ratio's true side is the paraphrase where `paraphrased` (forget, retain) and
        the record has one, else the answer (the general sets, whatever fields their records carry, as the
        reference)."""
        enc, fabric = self.encoder, self.fabric
        answers = [enc.item(r["question"], r["answer"]) for r in records]
        scored = bool(records) and all(r.get("perturbed_answer") for r in records)
        k = min(len(r["perturbed_answer"]) for r in records) if scored else 0
        true = [enc.item(r["question"], (paraphrased and r.get("paraphrased_answer")) or r["answer"]) for r in records]
        perturbed = [enc.item(r["question"], r["perturbed_answer"][j]) for r in records for j in range(k)]
        references = [enc.answer_text(item) for item in answers]
        return SplitItems(
            answers=Items(fabric, answers, enc.pad_id),
            true=Items(fabric, true, enc.pad_id) if scored else None,
            perturbed=Items(fabric, perturbed, enc.pad_id) if scored else None, k=k,
            prompts=[enc.prompt(r["question"]) for r in records], references=references,
            zlib_lengths=np.array([len(zlib.compress(text.encode())) for text in references], dtype=np.float64))

    @torch.no_grad()
    def outputs(self, model: nn.Module) -> dict[str, SplitOutputs]:
        model.eval()
        outputs = {name: self.split_outputs(model, items) for name, items in self.items.items()}
        if self.sampling is not None:
            forget = self.items[FORGET]
            samples = sampled(self.fabric, model, self.encoder.tokenizer, forget.prompts, self.batch_size,
                              self.max_new_tokens, self.sampling)
            outputs[FORGET].leak, outputs[FORGET].max_rouge = sampled_scores(samples, forget.references,
                                                                             self.sampling, self.judge,
                                                                             self.batch_size)
        if self.gradnorm:
            for name in (FORGET, "holdout"):
                outputs[name].mia["gradnorm"] = gradient_norms(model, self.items[name].answers)
        return outputs

    def split_outputs(self, model: nn.Module, items: SplitItems) -> SplitOutputs:
        scores = self.scores(model, items.answers)
        losses = np.array([s for batch in scores for s in batch.loss.double().cpu().numpy()])
        last_dropped = [(b, i) for b in scores for i in range(len(b.labels))]  # MIA and EM/ES skip the last label
        lp = [b.logprobs[i][:-1].double().cpu().numpy() for b, i in last_dropped]
        mean = [b.mean[i][:-1].double().cpu().numpy() for b, i in last_dropped]
        var = [b.variance[i][:-1].double().cpu().numpy() for b, i in last_dropped]
        preds = [b.predictions[i][:-1].cpu().numpy() for b, i in last_dropped]
        labels = [b.labels[i][:-1].cpu().numpy() for b, i in last_dropped]
        true = self.losses(model, items.true) if items.true is not None else None
        perturbed = (self.losses(model, items.perturbed).reshape(-1, items.k) if items.perturbed is not None
                     else None)
        mia = {"loss": losses, "zlib": losses / items.zlib_lengths,
               "min_k": np.array([metrics.min_k(x, MIA_K) for x in lp]),
               "min_k_pp": np.array([metrics.min_k_plus_plus(x, m, v, MIA_K) for x, m, v in zip(lp, mean, var,
                                                                                              strict=True)])}
        return SplitOutputs(
            loss=losses, loss_true=true, loss_perturbed=perturbed,
            rouge=(metrics.rouge_l_recall(self.generate(model, items.prompts), items.references) if self.generates
                   else None),
            exact=np.array([metrics.exact_memorization(p, t) for p, t in zip(preds, labels, strict=True)]),
            extraction=np.array([metrics.extraction_strength(p, t, self.reference_numerics)
                                 for p, t in zip(preds, labels, strict=True)]),
            mia=mia, reference_numerics=self.reference_numerics)

    def scores(self, model: nn.Module, items: Items) -> list:
        return batch_scores(self.fabric, model, items, self.batch_size)

    def losses(self, model: nn.Module, items: Items) -> np.ndarray:
        return np.concatenate([b.loss.double().cpu().numpy() for b in self.scores(model, items)])

    def generate(self, model: nn.Module, prompts: list[list[int]]) -> list[str]:
        return generate(self.fabric, model, self.encoder.tokenizer, prompts, self.batch_size, self.max_new_tokens)

    @staticmethod
    def values(outputs: dict[str, SplitOutputs], retrained: dict[str, SplitOutputs]) -> dict:
        return model_scores(outputs, retrained)

    @staticmethod
    def finite(outputs: dict[str, SplitOutputs]) -> bool:
        return all(out.finite() for out in outputs.values())


def split_scores(name: str, out: SplitOutputs) -> dict:
    """A split's aggregates: probability (normalised over the options on the general sets, as TOFU's ra/wf),
    truth ratio (closer_to_1_better on forget, true_better elsewhere), ROUGE-L recall; and on forget, exact
    memorisation, extraction strength and, where samples were drawn, Leak@k and the expected largest ROUGE-L recall
    among k samples."""
    general = name.startswith(GENERAL)
    scores = {} if out.rouge is None else {("rouge_l_recall", name): float(out.rouge.mean())}
    if out.leak is not None:
        scores[("leak_at_k", name)] = float(out.leak.mean())
        scores[("max_rouge_at_k", name)] = float(out.max_rouge.mean())
    if general and out.loss_perturbed is not None:
        scores[("prob", name)] = metrics.normalised_probability(out.loss, out.loss_perturbed, out.reference_numerics)
    else:
        scores[("prob", name)] = float(metrics.probability(out.loss).mean())
    if out.truth_ratio is not None:
        scores[("truth_ratio", name)] = (metrics.closer_to_1_better(out.truth_ratio, out.reference_numerics)
                                         if name == FORGET else metrics.true_better(out.truth_ratio))
    if name == FORGET:
        scores[("exact_memorization", name)] = float(out.exact.mean())
        scores[("extraction_strength", name)] = float(out.extraction.mean())
    return scores


def gradient_norms(model: nn.Module, items: Items) -> np.ndarray:
    """The GradNorm attack's score per example (OpenUnlearning's `mia_gradnorm`, p = 2, batch 1): the example's
    mean answer NLL (its last label left out, as the reference's token log-probabilities), one backward pass, then
    the mean over the parameter tensors of their gradient's L2 norm (not the global norm, as the reference and mimir
    compute it); higher for non-members. Every parameter takes a gradient for it, frozen or not (a method that
    trains some of them leaves the attack the same tensors), and the flags are restored after. Ranks replicate the
    model (the strategies that shard it are refused) and each computes alike, on the unwrapped module."""
    bare = getattr(model, "_original_module", model)
    parameters = list(bare.parameters())
    flags = [parameter.requires_grad for parameter in parameters]
    scores = []
    try:
        for parameter in parameters:
            parameter.requires_grad_(True)
        with torch.enable_grad():
            for row in interrupt.checked(range(len(items))):
                batch = items.rows(torch.tensor([row]))
                bare.zero_grad(set_to_none=True)
                logits, labels, labelled = shifted(forward(bare, batch), batch["labels"])
                labelled[0, labelled[0].nonzero()[-1]] = False  # the last label left out
                logp = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
                (-(logp * labelled).sum() / labelled.sum().clamp(min=1)).backward()
                norms = [parameter.grad.double().norm() for parameter in parameters if parameter.grad is not None]
                scores.append(float(torch.stack(norms).mean()))
    finally:
        bare.zero_grad(set_to_none=True)
        for parameter, flag in zip(parameters, flags, strict=True):
            parameter.requires_grad_(flag)
    return np.array(scores, dtype=np.float64)


def mia_aucs(outputs: dict[str, SplitOutputs]) -> dict[str, float]:
    """Each attack's AUC, forget (members) against holdout (non-members)."""
    return {score: metrics.mia_auc(outputs[FORGET].mia[score], outputs["holdout"].mia[score])
            for score in MIA_SCORES if score in outputs[FORGET].mia}


def model_scores(outputs: dict[str, SplitOutputs], retrained: dict[str, SplitOutputs]) -> dict:
    """A model's records against M_r's outputs: every split's aggregates, forget quality (the KS p-value of the
    forget truth ratios against M_r's), model utility (the harmonic mean of 9), the MIA AUCs, the reference attack's
    (against M_r's losses) and privleak (against M_r's Min-K% AUC)."""
    scores = {}
    for name, out in outputs.items():
        scores |= split_scores(name, out)
    aucs, aucs_r = mia_aucs(outputs), mia_aucs(retrained)
    scores |= {(f"mia_{score}_auc", FORGET): auc for score, auc in aucs.items()}
    scores[("privleak", FORGET)] = metrics.privleak(aucs["min_k"], aucs_r["min_k"])
    scores[("mia_reference_auc", FORGET)] = metrics.mia_auc(reference_score(outputs[FORGET], retrained[FORGET]),
                                                            reference_score(outputs["holdout"], retrained["holdout"]))
    scores[("forget_quality", FORGET)] = metrics.forget_quality(outputs[FORGET].truth_ratio,
                                                                retrained[FORGET].truth_ratio)
    utility = [scores.get((metric, split)) for split in UTILITY_SPLITS
               for metric in ("prob", "rouge_l_recall", "truth_ratio")]
    scores[("model_utility", None)] = metrics.model_utility(utility) if None not in utility else None
    return scores
