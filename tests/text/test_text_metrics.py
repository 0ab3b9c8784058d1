"""unlearnbench.tasks.text.evaluate.metrics against independent loops written here, against scipy, and against TOFU's
own aggregation on its published evaluation logs (tests/data/tofu_eval_logs.json: a copy of the per-example numbers
that locuslab/tofu's aggregate_eval_stat.py reads, for Llama-2-7b fine-tuned on full and on retain90)."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import hmean, ks_2samp

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.evaluate import metrics

LOGS = json.loads((Path(__file__).parent.parent / "data" / "tofu_eval_logs.json").read_text())["models"]
SPLITS = ("eval_log.json", "eval_real_author_wo_options.json", "eval_real_world_wo_options.json")


def tofu_forget_quality(unlearned: dict, retained: dict) -> float:
    """aggregate_eval_stat.py's get_forget_quality, in its own direction (true/false)."""
    def ratios(log):
        return np.exp(np.array(log["average_perturb_loss"]).mean(-1) - np.array(log["avg_paraphrased_loss"]))
    return ks_2samp(ratios(unlearned), ratios(retained)).pvalue


def tofu_model_utility(logs: dict) -> float:
    """aggregate_eval_stat.py's get_model_utility over the three utility splits: nine values, harmonic mean."""
    values = []
    for name in SPLITS:
        log = logs[name]
        true = np.exp(-np.array(log["avg_gt_loss"]))
        if name == "eval_log.json":
            values.append(true.mean())
        else:
            false = np.exp(-np.array(log["average_perturb_loss"]))
            values.append(np.mean(true / (true + false.sum(-1))))
        values.append(np.mean(log["rougeL_recall"]))
        ratio = np.exp(np.array(log["average_perturb_loss"]).mean(-1) - np.array(log["avg_paraphrased_loss"]))
        values.append(np.mean(np.maximum(0, 1 - 1 / ratio)))
    return hmean(values)


def our_truth_ratio(log: dict) -> np.ndarray:
    return metrics.truth_ratio(log["avg_paraphrased_loss"], log["average_perturb_loss"])


def our_model_utility(logs: dict) -> float:
    values = []
    for name in SPLITS:
        log = logs[name]
        if name == "eval_log.json":
            values.append(metrics.probability(log["avg_gt_loss"]).mean())
        else:
            values.append(metrics.normalised_probability(log["avg_gt_loss"], log["average_perturb_loss"]))
        values += [np.mean(log["rougeL_recall"]), metrics.true_better(our_truth_ratio(log))]
    return metrics.model_utility(values)


def test_the_truth_ratio_is_false_over_true_as_tofu_logs_it_per_example():
    for model in ("full", "retain90"):
        forget = LOGS[model]["eval_log_forget.json"]
        np.testing.assert_allclose(our_truth_ratio(forget), forget["truth_ratio"], rtol=1e-5)


def test_forget_quality_agrees_with_tofus_aggregation_on_its_logs():
    full, retain = LOGS["full"]["eval_log_forget.json"], LOGS["retain90"]["eval_log_forget.json"]
    ours = metrics.forget_quality(our_truth_ratio(full), our_truth_ratio(retain))
    assert ours == pytest.approx(tofu_forget_quality(full, retain), rel=1e-9)
    assert ours == pytest.approx(1.834e-21, rel=1e-3)  # the fine-tuned model is far from retraining
    assert metrics.forget_quality(our_truth_ratio(retain), our_truth_ratio(retain)) == 1.0
    inverted = metrics.forget_quality(1 / our_truth_ratio(full), 1 / our_truth_ratio(retain))
    assert inverted == pytest.approx(ours, rel=1e-9)


def test_model_utility_agrees_with_tofus_aggregation_on_its_logs():
    for model in ("full", "retain90"):
        ours, tofu = our_model_utility(LOGS[model]), tofu_model_utility(LOGS[model])
        assert ours == pytest.approx(tofu, rel=1e-9)
        assert ours == pytest.approx({"full": 0.6227, "retain90": 0.6137}[model], abs=1e-4)


def test_the_truth_ratio_aggregators_against_tofus_inverse_forms():
    tr = our_truth_ratio(LOGS["full"]["eval_log_forget.json"])
    inverse = 1 / tr
    assert metrics.closer_to_1_better(tr) == pytest.approx(np.mean(np.minimum(inverse, 1 / inverse)), rel=1e-12)
    assert metrics.true_better(tr) == pytest.approx(np.mean(np.maximum(0, 1 - 1 / inverse)), rel=1e-12)


def test_the_per_example_functions_against_loops():
    rng = np.random.default_rng(0)
    true, perturbed = rng.uniform(0.1, 4, 20), rng.uniform(0.1, 4, (20, 5))
    loop = [math.exp(-sum(row) / len(row)) / math.exp(-t) for t, row in zip(true, perturbed, strict=True)]
    np.testing.assert_allclose(metrics.truth_ratio(true, perturbed), loop, rtol=1e-12)
    normalised = [math.exp(-t) / (math.exp(-t) + sum(math.exp(-p) for p in row))
                  for t, row in zip(true, perturbed, strict=True)]
    assert metrics.normalised_probability(true, perturbed) == pytest.approx(sum(normalised) / 20, rel=1e-12)
    values = [0.5, 0.25, 1.0]
    assert metrics.model_utility(values) == pytest.approx(3 / (2 + 4 + 1))
    assert metrics.model_utility([0.5, 0.0, 1.0]) == 0.0


def test_the_mia_auc_is_the_chance_a_non_member_scores_above_a_member():
    rng = np.random.default_rng(1)
    members, others = rng.normal(0, 1, 30), rng.normal(0.8, 1, 25)
    members[:5] = others[:5]  # ties count half
    pairs = [1.0 if o > m else 0.5 if o == m else 0.0 for o in others for m in members]
    assert metrics.mia_auc(members, others) == pytest.approx(sum(pairs) / len(pairs))
    assert metrics.mia_auc([0.1, 0.2], [1.0, 2.0]) == 1.0
    assert metrics.privleak(0.5, 0.5) == pytest.approx(0.0)
    assert metrics.privleak(0.981, 0.5) == pytest.approx(-96.2)  # the fallback reference of open-unlearning #167


def test_min_k_and_min_k_plus_plus_by_hand():
    lp = [-0.1, -3.0, -0.5, -2.0, -1.0]
    assert metrics.min_k(lp, k=0.4) == pytest.approx((3.0 + 2.0) / 2)
    assert metrics.min_k(lp, k=0.1) == pytest.approx(3.0)  # at least one token
    mean, variance = [-1.0] * 5, [4.0] * 5
    assert metrics.min_k_plus_plus(lp, mean, variance, k=0.4) == pytest.approx(-((-2.0 / 2) + (-1.0 / 2)) / 2)
    assert metrics.min_k_plus_plus([-1.0], [0.0], [0.0], k=0.4) == pytest.approx(1 / math.sqrt(1e-6))
    assert metrics.zlib_score(2.0, "abc") == pytest.approx(2.0 / len(zlib.compress(b"abc")))


def test_rouge_l_recall_is_the_lcs_of_stemmed_words_over_the_reference():
    recall = metrics.rouge_l_recall(["the cat on mat", "Two cats.", "", "mat the on"],
                                    ["the cat sat on the mat", "two cat", "a b", "the cat sat on the mat"])
    assert recall.tolist() == pytest.approx([4 / 6, 1.0, 0.0, 2 / 6])
    with pytest.raises(AssertionError, match="2 generations for 1 references"):
        metrics.rouge_l_recall(["a", "b"], ["a"])


def test_max_rouge_at_k_is_the_best_samples_rouge_l_recall_per_prompt_and_leak_at_k_counts_gated_samples():
    samples = [["the dog", "the cat on mat", "mat"], ["nothing here", "a", "b"], ["two", "Two cats.", "cat"]]
    recalls = metrics.sample_recalls(samples, ["the cat sat on the mat", "a b", "two cat"])
    np.testing.assert_allclose(recalls, [[1 / 6, 4 / 6, 1 / 6], [0, 0.5, 0.5], [0.5, 1, 0.5]])
    assert metrics.max_rouge_at_k(recalls, 3).tolist() == pytest.approx([4 / 6, 0.5, 1.0])
    assert metrics.max_rouge_at_k(recalls, 1).tolist() == pytest.approx([1 / 3, 1 / 3, 2 / 3])  # the mean recall
    leaks = metrics.leaked(recalls, 0.5)  # (0, 1, 0), (0, 1, 1), (1, 1, 1)
    assert metrics.leak_at_k(leaks, 1).tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert metrics.leak_at_k(leaks, 2).tolist() == pytest.approx([1 - 1 / 3, 1.0, 1.0])  # C(2, 2)/C(3, 2) = 1/3


@pytest.mark.parametrize(("predictions", "labels", "em", "es"), [
    ([1, 2, 3, 4], [1, 2, 3, 4], 1.0, 1.0),
    ([9, 2, 3, 4], [1, 2, 3, 4], 0.75, 0.75),
    ([1, 2, 9, 4], [1, 2, 3, 4], 0.75, 0.25),
    ([1, 2, 3, 9], [1, 2, 3, 4], 0.75, 0.0),
    ([], [], 0.0, 0.0),
])
def test_exact_memorization_and_extraction_strength_by_hand(predictions, labels, em, es):
    assert metrics.exact_memorization(predictions, labels) == pytest.approx(em)
    assert metrics.extraction_strength(predictions, labels) == pytest.approx(es)


def test_wrong_shapes_are_an_internal_error_and_bad_utility_values_a_refusal():
    with pytest.raises(AssertionError, match=r"loss_perturbed must have 2 dimension\(s\)"):
        metrics.truth_ratio([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(AssertionError, match="loss_perturbed has 3 rows but loss_true has 2"):
        metrics.truth_ratio([1.0, 2.0], np.ones((3, 5)))
    with pytest.raises(UserError, match="finite values ≥ 0"):
        metrics.model_utility([0.5, -0.1])


def test_reference_numerics_are_openunlearnings_formulas_with_their_guards():
    """OpenUnlearning's memorization.py and privacy.py, written out: TR = exp(−mean L_pert)/(exp(−L_true) + 1e-10),
    closer_to_1_better = mean(min(TR, 1/(TR + 1e-10))), prob = true/(true + Σ pert + 1e-10), ES = 1/n where no
    suffix matches (its loop stops at k = n − 1). On an over-unlearned answer (losses near 30) they part from the
    log-space values."""
    true, perturbed = np.array([30.0, 0.5, 2.0]), np.array([[29.0, 31.0], [0.7, 0.4], [2.5, 2.1]])
    reference = np.exp(-perturbed.mean(1)) / (np.exp(-true) + 1e-10)
    np.testing.assert_allclose(metrics.truth_ratio(true, perturbed, reference_numerics=True), reference, rtol=1e-12)
    assert metrics.truth_ratio(true, perturbed)[0] == pytest.approx(1.0)  # log space: exp(30 − 30)
    assert reference[0] == pytest.approx(np.exp(-30) / (np.exp(-30) + 1e-10))  # 0.00093: the guard dominates
    assert metrics.closer_to_1_better(reference, reference_numerics=True) == pytest.approx(
        np.mean(np.minimum(reference, 1 / (reference + 1e-10))), rel=1e-12)
    probability = np.exp(-true) / (np.exp(-true) + np.exp(-perturbed).sum(1) + 1e-10)
    assert metrics.normalised_probability(true, perturbed, reference_numerics=True) == pytest.approx(
        probability.mean(), rel=1e-12)
    assert metrics.extraction_strength([1, 2, 3, 4], [5, 6, 7, 8], reference_numerics=True) == 0.25
    assert metrics.extraction_strength([1, 2, 3, 4], [5, 6, 7, 8]) == 0.0
    assert metrics.extraction_strength([1, 2, 7, 4], [1, 2, 3, 4], reference_numerics=True) == 0.25  # 1 − 3/4
    assert metrics.extraction_strength([9, 2, 3, 4], [1, 2, 3, 4], reference_numerics=True) == 0.75
