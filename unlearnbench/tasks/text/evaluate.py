"""Evaluating a causal LM on the text task's splits: per example, then the metrics of TOFU and OpenUnlearning.

`TextEvaluator.outputs(model)` reads every split once: the mean NLL of the answer, of the paraphrased answer and of
each perturbed answer (teacher-forced, right-padded batches), the token log-probabilities and Min-K%++ moments,
the argmax predictions, and a greedy generation scored by ROUGE-L recall. `model_scores` turns a model's outputs,
and M_r's, into `result.json` records (`docs/text.md` lists each with the reference's value where it differs).

Which side of the truth ratio is "true": the paraphrased answer where the records have one (forget and retain, as
OpenUnlearning), the answer itself on the general sets (TOFU's real authors and world facts).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from lightning_fabric import Fabric
from lightning_fabric.wrappers import is_wrapped
from torch import nn

from unlearnbench.core.examples import COLUMNS, ExampleTable
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.text import metrics
from unlearnbench.tasks.text.data import collate
from unlearnbench.tasks.text.losses import shifted
from unlearnbench.tasks.text.model import Encoder, answer_scores
from unlearnbench.tasks.text.nli import NliJudge
from unlearnbench.tasks.text.nli import judge as nli_judge
from unlearnbench.tasks.text.scenario import TextSplits
from unlearnbench.tasks.text.train import Items, forward

MIA_K = 0.4  # Min-K% and Min-K%++'s k (OpenUnlearning's mia_min_k.yaml)
MIA_SCORES = ("loss", "zlib", "min_k", "min_k_pp", "gradnorm")  # gradnorm where `evaluation.gradnorm` is on
FORGET = "forget"
UTILITY_SPLITS = ("retain", "general_authors", "general_facts")  # model utility's 9 values: 3 metrics × these
GENERAL = "general_"  # the prefix of the general sets' split names (TOFU's real authors and world facts)


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


@dataclass
class SplitOutputs:
    """Per example of one split (arrays of its length)."""

    loss: np.ndarray  # the answer's mean NLL over its labelled tokens (L̄)
    loss_true: np.ndarray | None  # the true side of the truth ratio: paraphrase (forget, retain) or answer
    loss_perturbed: np.ndarray | None  # (n, k)
    rouge: np.ndarray
    exact: np.ndarray  # exact memorisation
    extraction: np.ndarray  # extraction strength
    mia: dict[str, np.ndarray] = field(default_factory=dict)  # higher = less likely a member
    leak: np.ndarray | None = None  # Leak@k per prompt, where `evaluation.sampling` draws samples
    max_rouge: np.ndarray | None = None  # the expected largest ROUGE-L recall among k samples, per prompt
    reference_numerics: bool = False  # OpenUnlearning's exact numerics (`metrics` module docstring)

    @property
    def truth_ratio(self) -> np.ndarray | None:
        return None if self.loss_perturbed is None else metrics.truth_ratio(self.loss_true, self.loss_perturbed,
                                                                             self.reference_numerics)

    def finite(self) -> bool:
        arrays = [self.loss, self.rouge] + [a for a in (self.loss_true, self.loss_perturbed) if a is not None]
        return all(np.isfinite(a).all() for a in arrays)


class TextEvaluator:
    def __init__(self, fabric: Fabric, encoder: Encoder, splits: TextSplits, batch_size: int,
                 max_new_tokens: int, sampling: Sampling | None = None, gradnorm: bool = False,
                 reference_numerics: bool = False) -> None:
        self.fabric, self.encoder, self.batch_size, self.max_new_tokens = fabric, encoder, batch_size, max_new_tokens
        self.sampling, self.gradnorm, self.reference_numerics = sampling, gradnorm, reference_numerics
        self.judge = None if sampling is None else sampling.judge(fabric)
        self.items = {name: self.encode(records, not name.startswith(GENERAL))
                      for name, records in splits.evaluated().items()}

    def encode(self, records: list[dict], paraphrased: bool = True) -> SplitItems:
        try:
            return self.encoded(records, paraphrased)
        except ValueError as error:  # a record too long for the model, or a template that cuts into the answer
            raise UserError(str(error)) from None

    def encoded(self, records: list[dict], paraphrased: bool) -> SplitItems:
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
            rouge=metrics.rouge_l_recall(self.generate(model, items.prompts), items.references),
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


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding for Leak@k (`evaluation.sampling`): `draws` generations per prompt (`n`, or `k` where `n` is
    None) at `temperature` with nucleus `top_p` (no top-k cut), the draws from the global RNG seeded with `seed`
    (derived from the evaluation seed) for every model alike; a sample leaks where its ROUGE-L recall reaches
    `threshold` and, with `nli` (a local NLI model), where that model finds the answer entailed."""

    k: int
    temperature: float
    top_p: float
    seed: int
    n: int | None = None
    threshold: float = 0.1
    nli: str | None = None

    @property
    def draws(self) -> int:
        return self.k if self.n is None else self.n

    @classmethod
    def of(cls, options: dict, eval_seed: int) -> Sampling | None:
        """The job's sampling, or None where `evaluation.sampling.k` is 0."""
        if not options["k"]:
            return None
        return cls(options["k"], options["temperature"], options["top_p"], streams("sampling", eval_seed).seed,
                   options["n"], options["threshold"], options["nli"])

    def judge(self, fabric: Fabric) -> NliJudge | None:
        """The NLI judge on the job's device, loaded once per process; None where `nli` is not set."""
        return None if self.nli is None else nli_judge(self.nli, str(fabric.device))


def sampled_scores(samples: list[list[str]], references: list[str], sampling: Sampling,
                   judge: NliJudge | None, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, Leak@k (the binary leaks of its n samples: the ROUGE-L gate, then the judge's entailment of the
    answer by the sample where a judge is set) and the expected largest ROUGE-L recall among k samples."""
    recalls = metrics.sample_recalls(samples, references)
    leaks = metrics.leaked(recalls, sampling.threshold)
    if judge is not None:  # only the samples through the gate are judged, as the reference
        gated = np.argwhere(leaks)
        leaks[tuple(gated.T)] = judge.entails([samples[p][j] for p, j in gated], [references[p] for p, _ in gated],
                                              batch_size)
    return metrics.leak_at_k(leaks, sampling.k), metrics.max_rouge_at_k(recalls, sampling.k)


def generate(fabric: Fabric, model: nn.Module, tokenizer, prompts: list[list[int]], batch_size: int,
             max_new_tokens: int, sampling: Sampling | None = None) -> list[str]:
    """Continuations of left-padded prompts, cut at the first end id (`end_ids`): greedy (OpenUnlearning's
    generation defaults, with `max_new_tokens` from the model config or the benchmark), or `sampling.draws` sampled
    ones per prompt, a prompt's samples consecutive.

    `generate` runs inside the strategy's wrapper (Fabric's `mark_forward_method`), where FSDP gathers the
    parameters it shards; with several ranks every rank takes a step until all are done (`synced_gpus`), as
    sharded weights are gathered by all of them at each step."""
    from transformers import StoppingCriteriaList

    if is_wrapped(model):
        model.mark_forward_method("generate")
    ends = end_ids(model, tokenizer)
    decoding = {"do_sample": False} if sampling is None else {
        "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0,
        "num_return_sequences": sampling.draws}
    texts = []
    with drawn_from(fabric, None if sampling is None else sampling.seed):
        for start in interrupt.checked(range(0, len(prompts), batch_size)):
            chunk = [{"input_ids": p, "labels": p} for p in prompts[start:start + batch_size]]
            batch = {k: v.to(fabric.device) for k, v in collate(chunk, tokenizer.pad_token_id, left=True).items()}
            with fabric.autocast():
                out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                     max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     eos_token_id=ends, synced_gpus=fabric.world_size > 1,
                                     stopping_criteria=StoppingCriteriaList([StopOnInterrupt()]), **decoding)
            for row in out[:, batch["input_ids"].shape[1]:].tolist():
                cut = next((i for i, token in enumerate(row) if token in ends), len(row))
                texts.append(tokenizer.decode(row[:cut], skip_special_tokens=True).strip())
    return texts


def end_ids(model: nn.Module, tokenizer) -> list[int]:
    """Every id that ends a generation: the model's `generation_config.eos_token_id` (one id or several: Llama 3.x
    Instruct lists 128001, 128008, 128009) and the tokenizer's eos, as OpenUnlearning generates with the model's
    generation config."""
    inner = model
    while getattr(inner, "generation_config", None) is None and hasattr(inner, "module"):
        inner = inner.module  # Fabric's wrapper, then the strategy's (DDP, FSDP)
    declared = getattr(getattr(inner, "generation_config", None), "eos_token_id", None)
    declared = [] if declared is None else [declared] if isinstance(declared, int) else list(declared)
    return list(dict.fromkeys([*declared, *([] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id])]))


def sampled(fabric: Fabric, model: nn.Module, tokenizer, prompts: list[list[int]], batch_size: int,
            max_new_tokens: int, sampling: Sampling) -> list[list[str]]:
    """`sampling.draws` sampled continuations of each prompt."""
    texts, n = generate(fabric, model, tokenizer, prompts, batch_size, max_new_tokens, sampling), sampling.draws
    return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]


@contextmanager
def drawn_from(fabric: Fabric, seed: int | None) -> Iterator[None]:
    """The block's draws from the global RNGs (the CPU's and the job's accelerator's) seeded with `seed`, restored
    afterwards; nothing changes where `seed` is None."""
    if seed is None:
        yield
        return
    devices = [fabric.device] if fabric.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def batch_scores(fabric: Fabric, model: nn.Module, items: Items, batch_size: int) -> list:
    """`answer_scores` of every batch of `items`, in order."""
    with fabric.autocast():
        return [answer_scores(model, items.rows(torch.arange(start, min(start + batch_size, len(items)))))
                for start in interrupt.checked(range(0, len(items), batch_size))]


class StopOnInterrupt:
    """A stopping criterion of `generate` that is a safe point at every generated token (runtime/interrupt.py): a
    long generation (a large model, many new tokens) stops within one token of Ctrl-C. It never ends a sequence."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        interrupt.check()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def split_scores(name: str, out: SplitOutputs) -> dict:
    """A split's aggregates: probability (normalised over the options on the general sets, as TOFU's ra/wf),
    truth ratio (closer_to_1_better on forget, true_better elsewhere), ROUGE-L recall; and on forget, exact
    memorisation, extraction strength and, where samples were drawn, Leak@k and the expected largest ROUGE-L recall
    among k samples."""
    general = name.startswith(GENERAL)
    scores = {("rouge_l_recall", name): float(out.rouge.mean())}
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


def reference_score(out: SplitOutputs, reference: SplitOutputs) -> np.ndarray:
    """The reference-model attack's score per example (OpenUnlearning's `mia_reference`): the model's mean answer NLL
    minus the reference model's (this job's M_r), higher for non-members."""
    return out.loss - reference.loss


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


EXAMPLE_SPLITS = ("forget", "retain", "holdout")
TEXT_COLUMNS = (*COLUMNS, "loss_true", "loss_perturbed", "truth_ratio", "prob", "rouge_l_recall", "mia_zlib",
                "mia_min_k", "mia_min_k_pp", "mia_reference", "mia_gradnorm")


def confidence(loss: np.ndarray) -> np.ndarray:
    """The logit-scaled confidence of an answer, log P̃ − log(1 − P̃) with P̃ = exp(−L̄): the image task's `conf`
    for a sequence, so the report's per-example pools (ε, F, LiRA) read text jobs unchanged. L̄ is floored at 1e-30
    (P̃ = 1 in float64 would make it infinite)."""
    loss = np.maximum(loss, 1e-30)
    return -loss - np.log(-np.expm1(-loss))


@dataclass
class TextExamples(ExampleTable):
    """`examples.parquet` of a text job: one row per (target, model, split, example) of forget, retain and holdout.
    `index` is the record's position in `full` (forget) or in its evaluated split, `label` its entity's position
    among the entities (−1 for holdout), `pred` 1 where the teacher-forced argmax reproduces the whole answer."""

    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in TEXT_COLUMNS})

    def add_model(self, target: str, role: str, method: str | None, outputs: dict[str, SplitOutputs],
                  positions: dict[str, tuple[np.ndarray, np.ndarray]], reference: dict[str, SplitOutputs]) -> None:
        """The model's rows; `reference` (M_r's outputs) gives the reference attack's score."""
        for split in EXAMPLE_SPLITS:
            out, (index, label) = outputs[split], positions[split]
            n, missing = len(out.loss), np.full(len(out.loss), np.nan)
            tr = out.truth_ratio
            values = {"index": index, "label": label, "conf": confidence(out.loss), "loss": out.loss,
                      "pred": (out.exact == 1).astype(np.int64), "loss_true": missing if out.loss_true is None
                      else out.loss_true, "loss_perturbed": missing if out.loss_perturbed is None
                      else out.loss_perturbed.mean(1), "truth_ratio": missing if tr is None else tr,
                      "prob": metrics.probability(out.loss), "rouge_l_recall": out.rouge,
                      "mia_zlib": out.mia["zlib"], "mia_min_k": out.mia["min_k"], "mia_min_k_pp": out.mia["min_k_pp"],
                      "mia_reference": reference_score(out, reference[split]),
                      "mia_gradnorm": out.mia.get("gradnorm", missing)}
            self.extend(n, {"target": target, "role": role, "method": method, "split": split}, values)
