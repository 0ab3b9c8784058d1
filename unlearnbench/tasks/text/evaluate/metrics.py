"""TOFU's and OpenUnlearning's metrics on per-example arrays, so that they can be checked against published logs.

Every function takes what a model evaluation yields per example: the mean negative log-likelihood of an answer over
its labelled tokens (L̄ = NLL / n, the answer-only loss), token log-probabilities, or greedy predictions. The
formulas are those of TOFU (Maini et al. 2024, locuslab/tofu `aggregate_eval_stat.py`) and OpenUnlearning
(Dorna et al. 2025, locuslab/open-unlearning `src/evals/metrics/`), with these decisions where the two differ:

- **Truth ratio direction.** `truth_ratio` returns false/true, P̃(perturbed)/P̃(true), as OpenUnlearning does and as
  TOFU logs it per example (`truth_ratio` in its eval logs); TOFU's aggregation script builds the inverse. The
  aggregates and the KS p-value are the same either way.
- **The mean over perturbed answers** is taken on the losses (a geometric mean of the probabilities), as both codes
  do; the TOFU paper writes an arithmetic mean of probabilities (open-unlearning #26).
- **No 1e-10 in the ratio.** The references add 1e-10 to the denominator; here the ratio is exp(L̄_true − mean L̄_pert),
  computed in log space, which differs from theirs only when P̃_true < 1e-8, where theirs is an artefact.
- **Forget quality** is the two-sided KS p-value of `scipy.stats.ks_2samp` (default method), as both codes compute it.
- **Model utility** is the harmonic mean, 0 as soon as one value is 0 (`scipy.stats.hmean`'s value).

`reference_numerics=True` (`evaluation.reference_numerics`) gives OpenUnlearning's values exactly where these
decisions differ from its code: the truth ratio exp(−mean L̄_pert) / (exp(−L̄_true) + 1e-10), the forget aggregate
mean(min(TR, 1/(TR + 1e-10))), the normalised probability P̃(true) / (P̃(true) + Σ P̃(pert) + 1e-10), and extraction
strength 1/n where no suffix matches; forget quality and model utility follow from them.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from unlearnbench.core.catalogue import RETRAINED, Derived, Metric
from unlearnbench.runtime.errors import UserError

REFERENCE_EPSILON = 1e-10  # OpenUnlearning's guard in its truth ratio and normalised probability


def _per_example(values: ArrayLike, name: str, ndim: int = 1) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    assert array.ndim == ndim, f"{name} must have {ndim} dimension(s) (one row per example), got shape {array.shape}"
    return array


# Likelihoods, ROUGE, truth ratio, utility and the MIA AUCs are best where M_r is.
PROB = Metric("prob", "prob", RETRAINED)


def probability(loss: ArrayLike) -> np.ndarray:
    """Per example, the length-normalised probability P̃ = exp(−L̄): the per-token geometric mean probability of
    the answer, never the raw P(y|x) (OpenUnlearning's `probability` metric)."""
    return np.exp(-_per_example(loss, "loss"))


TRUTH_RATIO = Metric("truth_ratio", "TR", RETRAINED)


def truth_ratio(loss_true: ArrayLike, loss_perturbed: ArrayLike, reference_numerics: bool = False) -> np.ndarray:
    """Per example, TR = P̃(false)/P̃(true) = exp(L̄_true − mean_j L̄_perturbed,j).

    `loss_true` (n,) holds each example's mean NLL of the true answer (the paraphrase for forget and retain, the
    answer itself for real authors and world facts), `loss_perturbed` (n, k) those of its k perturbed answers."""
    true = _per_example(loss_true, "loss_true")
    perturbed = _per_example(loss_perturbed, "loss_perturbed", ndim=2)
    assert perturbed.shape[0] == true.shape[0], (f"loss_perturbed has {perturbed.shape[0]} rows but loss_true has "
                                                 f"{true.shape[0]}: one row per example in both")
    if reference_numerics:
        return np.exp(-perturbed.mean(axis=1)) / (np.exp(-true) + REFERENCE_EPSILON)
    return np.exp(true - perturbed.mean(axis=1))


def closer_to_1_better(tr: ArrayLike, reference_numerics: bool = False) -> float:
    """The forget-set aggregate of the truth ratio: mean(min(TR, 1/TR)), 1 when true and false answers are alike."""
    tr = _per_example(tr, "tr")
    return float(np.mean(np.minimum(tr, 1 / (tr + REFERENCE_EPSILON if reference_numerics else tr))))


def true_better(tr: ArrayLike) -> float:
    """The retain-side aggregate of the truth ratio: mean(max(0, 1 − TR)), 1 when the true answer is far likelier."""
    return float(np.mean(np.maximum(0.0, 1 - _per_example(tr, "tr"))))


def normalised_probability(loss_true: ArrayLike, loss_perturbed: ArrayLike, reference_numerics: bool = False) -> float:
    """Real authors and world facts: mean over examples of P̃(true) / (P̃(true) + Σ_j P̃(perturbed_j))."""
    true = probability(loss_true)
    perturbed = np.exp(-_per_example(loss_perturbed, "loss_perturbed", ndim=2)).sum(axis=1)
    return float(np.mean(true / (true + perturbed + (REFERENCE_EPSILON if reference_numerics else 0.0))))


FORGET_QUALITY = Metric("forget_quality", "FQ", 1.0)
# the report's: each model's forget truth ratios against the M_r of the configuration's first job
FORGET_QUALITY_FIRST = Metric("forget_quality_first", "FQ first M_r", 1.0)
FIRST_RETAIN_MODEL = Derived("forget_quality_first", source="forget_quality", split="forget", column="truth_ratio",
                             statistic="ks_p_value")


def forget_quality(tr_unlearned: ArrayLike, tr_retained: ArrayLike) -> float:
    """The p-value of the two-sided Kolmogorov–Smirnov test between the unlearned model's per-example forget truth
    ratios and the retained model's: high when the unlearned model is indistinguishable from retraining."""
    unlearned, retained = _per_example(tr_unlearned, "tr_unlearned"), _per_example(tr_retained, "tr_retained")
    return float(stats.ks_2samp(unlearned, retained).pvalue)


MODEL_UTILITY = Metric("model_utility", "MU", RETRAINED)


def model_utility(values: Sequence[float] | ArrayLike) -> float:
    """The harmonic mean of the utility values (TOFU's nine: probability, ROUGE-L recall and truth ratio on retain,
    real authors and world facts); 0 if any value is 0. A UserError for a negative or non-finite value, which an
    imported run's files can hold."""
    array = _per_example(values, "values")
    if array.size == 0 or np.any(array < 0) or not np.all(np.isfinite(array)):
        raise UserError(f"model_utility needs finite values ≥ 0, got {array.tolist()}")
    return 0.0 if np.any(array == 0) else float(stats.hmean(array))


# each attack's AUC as the benchmarks record it, `mia_<score>_auc` (the reference attack's against M_r's losses)
MIA_AUCS = (Metric("mia_loss_auc", "mia_loss_auc", RETRAINED),
            Metric("mia_zlib_auc", "mia_zlib_auc", RETRAINED),
            Metric("mia_min_k_auc", "MinK AUC", RETRAINED),
            Metric("mia_min_k_pp_auc", "mia_min_k_pp_auc", RETRAINED),
            Metric("mia_reference_auc", "mia_reference_auc", RETRAINED),
            Metric("mia_gradnorm_auc", "mia_gradnorm_auc", RETRAINED))


def mia_auc(member_scores: ArrayLike, nonmember_scores: ArrayLike) -> float:
    """The AUC of a membership score that is higher for non-members (a loss): the probability that a non-member
    scores above a member, ties counting half. 1: the members are told apart perfectly; 0.5: not at all."""
    from sklearn.metrics import roc_auc_score

    members, others = _per_example(member_scores, "member_scores"), _per_example(nonmember_scores, "nonmember_scores")
    labels = np.r_[np.zeros(members.size), np.ones(others.size)]  # members 0, as OpenUnlearning's `mia_auc`
    return float(roc_auc_score(labels, np.r_[members, others]))


# 0: M_r's own leakage; in percent, so that a tuning objective counts its distances in hundredths
PRIVLEAK = Metric("privleak", "privleak", 0.0, scale=100.0)


def privleak(auc: float, auc_retained: float) -> float:
    """OpenUnlearning's privleak, in percent: the relative gap between the model's (1 − AUC) and the retained model's;
    0 for a model that leaks as much as retraining, strongly negative for one that still remembers D_f."""
    return ((1 - auc) - (1 - auc_retained)) / ((1 - auc_retained) + 1e-10) * 100


def min_k(token_logprobs: ArrayLike, k: float = 0.4) -> float:
    """Min-K% (Shi et al. 2024): minus the mean of the lowest max(1, ⌊k·n⌋) token log-probabilities of the answer."""
    lp = np.sort(_per_example(token_logprobs, "token_logprobs"))
    return float(-lp[:max(1, int(k * lp.size))].mean())


def min_k_plus_plus(token_logprobs: ArrayLike, mean: ArrayLike, variance: ArrayLike, k: float = 0.4) -> float:
    """Min-K%++ (Zhang et al. 2024): Min-K% over z_t = (log p_t − μ_t)/σ_t, where μ_t and σ_t² are the mean and
    variance of log p under the model's own next-token distribution at t (σ_t² clamped at 1e-6, as OpenUnlearning)."""
    z = (_per_example(token_logprobs, "token_logprobs") - _per_example(mean, "mean")) / np.sqrt(
        np.maximum(_per_example(variance, "variance"), 1e-6))
    return min_k(z, k)


def zlib_score(loss: float, answer: str) -> float:
    """ZLib (Carlini et al. 2021): the answer's mean NLL over its zlib-compressed length in bytes."""
    return loss / len(zlib.compress(answer.encode("utf-8")))


@functools.cache
def _rouge_scorer():
    """One scorer per process, made without absl's "Using default tokenizer." line in the job's log."""
    import logging

    from rouge_score.rouge_scorer import RougeScorer

    logging.getLogger("absl").setLevel(logging.WARNING)

    return RougeScorer(["rougeL"], use_stemmer=True)


ROUGE_L_RECALL = Metric("rouge_l_recall", "ROUGE", RETRAINED)


def rouge_l_recall(generations: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per example, ROUGE-L recall of a generation against its reference answer: the longest common subsequence of
    their (Porter-stemmed, lower-cased) words over the reference's word count, scored by Google's `rouge-score`
    package as TOFU and OpenUnlearning score it (`RougeScorer(["rougeL"], use_stemmer=True)`)."""
    return _rouge_l(generations, references, "recall")


def rouge_l_f1(generations: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per example, ROUGE-L F1 of a generation against its reference (the same scorer as `rouge_l_recall`): MUSE's
    VerbMem and KnowMem as OpenUnlearning scores them (`rouge_type: rougeL_f1`, in [0, 1])."""
    return _rouge_l(generations, references, "fmeasure")


def _rouge_l(generations: Sequence[str], references: Sequence[str], measure: str) -> np.ndarray:
    assert len(generations) == len(references), (f"{len(generations)} generations for {len(references)} references: "
                                                 "one of each per example")
    scorer = _rouge_scorer()
    return np.array([getattr(scorer.score(reference, generation)["rougeL"], measure)
                     for generation, reference in zip(generations, references, strict=True)], dtype=np.float64)


def sample_recalls(samples: Sequence[Sequence[str]], references: Sequence[str]) -> np.ndarray:
    """(prompts, n): the ROUGE-L recall (`rouge_l_recall`) of each of a prompt's n sampled generations against its
    reference; every prompt has the same number of samples, at least one."""
    counts = {len(drawn) for drawn in samples}
    assert len(samples) == len(references) and len(counts) <= 1 and 0 not in counts, (
        f"sampled scores need the same number (at least one) of samples for each of the {len(references)} references; "
        f"got {[len(drawn) for drawn in samples]} samples")
    flat = [text for drawn in samples for text in drawn]
    return rouge_l_recall(flat, [ref for drawn, ref in zip(samples, references, strict=True) for _ in drawn]).reshape(
        len(references), -1)


def _per_prompt(values: ArrayLike, k: int, name: str) -> np.ndarray:
    array = np.asarray(values)
    assert array.ndim == 2 and 1 <= k <= array.shape[1], (
        f"{name} needs (prompts, n) values with 1 <= k <= n; got shape {array.shape} and k={k}")
    return array


MAX_ROUGE_AT_K = Metric("max_rouge_at_k", "max ROUGE@k", RETRAINED)


def max_rouge_at_k(recalls: ArrayLike, k: int) -> np.ndarray:
    """Per prompt, the expected largest ROUGE-L recall among k of its n samples (a k-subset drawn uniformly, without
    replacement): Σ_i r_(i)·C(i−1, k−1)/C(n, k) over the recalls sorted ascending, since r_(i) is the largest of
    exactly C(i−1, k−1) of the C(n, k) subsets. With n = k it is the largest recall: the graded variant this package
    recorded as `leak_at_k` before it followed the paper's binary one."""
    recalls = _per_prompt(recalls, k, "max_rouge_at_k").astype(np.float64)
    n, subsets = recalls.shape[1], math.comb(recalls.shape[1], k)
    weights = np.array([math.comb(i, k - 1) / subsets for i in range(n)], dtype=np.float64)
    return np.sort(recalls, axis=1) @ weights


def leaked(recalls: ArrayLike, threshold: float, entailed: ArrayLike | None = None) -> np.ndarray:
    """Per sample, whether it leaks the answer: its ROUGE-L recall reaches `threshold` and, where an NLI judge ran,
    the judge found the answer entailed (the paper's code labels a sample so: a recall under 0.1 is never judged)."""
    gate = np.asarray(recalls, dtype=np.float64) >= threshold
    return gate if entailed is None else gate & np.asarray(entailed, dtype=bool)


LEAK_AT_K = Metric("leak_at_k", "Leak@k", RETRAINED)


def leak_at_k(leaks: ArrayLike, k: int) -> np.ndarray:
    """Per prompt, Leak@k (arXiv 2511.04934): the probability that at least one of k samples leaks, estimated from
    c leaking samples among n (n >= k) without bias as 1 − C(n−c, k)/C(n, k), the pass@k estimator (Chen et al.
    2021) as the paper's code computes it (OptimAI-Lab/Leak-k, `TOFU/eval/whole_eval.py`, `calculate_pass_at_k`)."""
    leaks = _per_prompt(leaks, k, "leak_at_k").astype(bool)
    n, subsets = leaks.shape[1], math.comb(leaks.shape[1], k)
    return np.array([1.0 - math.comb(n - int(c), k) / subsets for c in leaks.sum(axis=1)], dtype=np.float64)


EXACT_MEMORIZATION = Metric("exact_memorization", "EM", RETRAINED)


def exact_memorization(predictions: ArrayLike, labels: ArrayLike) -> float:
    """The fraction of answer positions where the teacher-forced argmax prediction is the label."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels)) if labels.size else 0.0


EXTRACTION_STRENGTH = Metric("extraction_strength", "ES", RETRAINED)


def extraction_strength(predictions: ArrayLike, labels: ArrayLike, reference_numerics: bool = False) -> float:
    """Extraction strength (Carlini et al. 2021, as OpenUnlearning): 1 − k/n, with k the smallest position from
    which every prediction matches its label; 0 when not even the last one matches (OpenUnlearning scores that case
    1/n, an off-by-one kept out here), and 0 for an empty answer."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if labels.size == 0:
        return 0.0
    mismatches = np.flatnonzero(predictions != labels)
    first_of_matching_suffix = int(mismatches[-1]) + 1 if mismatches.size else 0
    if reference_numerics:  # the reference's loop stops at the last position, matching or not
        first_of_matching_suffix = min(first_of_matching_suffix, labels.size - 1)
    return 1 - first_of_matching_suffix / labels.size
