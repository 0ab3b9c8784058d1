"""Hand-computed cases for the metrics of docs/metrics.md (unlearnbench.tasks.image.metrics.functions and
.scoring)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from unlearnbench.tasks.image.data.base import ImageData
from unlearnbench.tasks.image.data.scenarios import FullClass
from unlearnbench.tasks.image.metrics import functions as fn
from unlearnbench.tasks.image.metrics.scoring import Outputs, Scorer


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def js(probs_r: torch.Tensor, probs_u: torch.Tensor) -> float:
    """JS divergence of probabilities given as such (js_divergence takes log-probabilities; log 0 = -inf)."""
    return fn.js_divergence(probs_r.log(), probs_u.log())


# ------------------------------------------------------------------------------------ js_divergence


def test_js_divergence_identical_outputs_is_zero():
    p = t([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    assert js(p, p.clone()) == 0.0


def test_js_divergence_disjoint_one_hot_is_one_bit():
    r = t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    u = t([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert js(r, u) == pytest.approx(1.0, abs=1e-12)


def test_js_divergence_hand_computed_pair():
    # p = (1/2, 1/2), q = (1, 0), m = (3/4, 1/4), logs base 2, 0·log0 = 0.
    kl_p_m = 0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)
    kl_q_m = 1.0 * math.log2(1.0 / 0.75) + 0.0
    expected = (kl_p_m + kl_q_m) / 2
    assert expected == pytest.approx(1.5 - 0.75 * math.log2(3))  # ≈ 0.311278
    assert js(t([[0.5, 0.5]]), t([[1.0, 0.0]])) == pytest.approx(expected, abs=1e-12)
    # the mean over samples: a second, identical sample contributes 0
    two = js(t([[0.5, 0.5], [0.3, 0.7]]), t([[1.0, 0.0], [0.3, 0.7]]))
    assert two == pytest.approx(expected / 2, abs=1e-12)


def test_js_divergence_symmetric_and_in_unit_interval_on_random_softmax():
    g = torch.Generator().manual_seed(0)
    for scale in (0.1, 1.0, 10.0, 100.0):
        a = fn.log_probabilities(scale * torch.randn(50, 7, generator=g))
        b = fn.log_probabilities(scale * torch.randn(50, 7, generator=g))
        ab, ba = fn.js_divergence(a, b), fn.js_divergence(b, a)
        assert ab == pytest.approx(ba, abs=1e-12)
        assert 0.0 <= ab <= 1.0
        assert not math.isnan(ab)


def test_js_divergence_empty_is_nan():
    assert math.isnan(fn.js_divergence(torch.zeros(0, 3), torch.zeros(0, 3)))


# ------------------------------------------------------------------------------ activation_distance


def test_activation_distance_disjoint_one_hot_is_sqrt2():
    r = t([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    u = t([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert fn.activation_distance(r, u) == pytest.approx(math.sqrt(2), abs=1e-12)


def test_activation_distance_identical_is_zero():
    p = t([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])
    assert fn.activation_distance(p, p.clone()) == 0.0


def test_activation_distance_two_samples_hand_case():
    r = t([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    u = t([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    squared = [1.0 + 1.0 + 0.0, 0.3**2 + 0.2**2 + 0.5**2]  # 2 and 0.38
    expected = math.sqrt(sum(squared) / 2)  # sqrt(1.19)
    assert fn.activation_distance(r, u) == pytest.approx(expected, abs=1e-12)
    assert fn.activation_distance(u, r) == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------- completeness


def test_completeness_fraction_of_equal_argmax():
    logits_r = t([[3, 1, 0], [0, 2, 1], [0, 0, 5], [1, 0, 0], [0, 4, 0]])
    logits_u = t([[9, 1, 0], [0, 1, 2], [0, 0, 1], [0, 7, 0], [0, 1, 0]])  # argmax differs on samples 2 and 4
    assert fn.completeness(logits_r, logits_u) == pytest.approx(3 / 5)
    assert fn.completeness(logits_r, logits_r) == 1.0


# ------------------------------------------------------------------------------ accuracy, mean_loss


def test_accuracy_hand_case():
    logits = t([[2, 1, 0], [0, 1, 0], [0, 0, 1], [5, 0, 0]])
    labels = torch.tensor([0, 1, 2, 1])
    assert fn.accuracy(logits, labels) == pytest.approx(3 / 4)


def test_accuracy_is_per_sample_not_mean_of_batch_means():
    logits = t([[1, 0], [1, 0], [0, 1], [0, 1], [0, 1]])
    labels = torch.tensor([0, 1, 1, 1, 1])  # batch 1: 1 of 2 right, batch 2: 3 of 3 right
    batch_means = (fn.accuracy(logits[:2], labels[:2]) + fn.accuracy(logits[2:], labels[2:])) / 2  # 0.75
    assert fn.accuracy(logits, labels) == pytest.approx(4 / 5)
    assert batch_means == pytest.approx(0.75)


def test_mean_loss_hand_case_natural_log():
    # sample 1: logits (0, 0) → p_y = 1/2; sample 2: logits (ln 3, 0), label 0 → p_y = 3/4;
    # sample 3: logits (ln 3, 0), label 1 → p_y = 1/4.
    logits = t([[0.0, 0.0], [math.log(3), 0.0], [math.log(3), 0.0]])
    labels = torch.tensor([0, 0, 1])
    expected = (math.log(2) - math.log(3 / 4) - math.log(1 / 4)) / 3
    assert fn.mean_loss(logits, labels) == pytest.approx(expected, abs=1e-12)
    per_sample = fn.per_sample_loss(logits, labels)
    assert per_sample.tolist() == pytest.approx([math.log(2), -math.log(3 / 4), -math.log(1 / 4)], abs=1e-12)


def test_accuracy_and_loss_of_empty_split_are_nan():
    empty = torch.zeros(0, 3)
    labels = torch.zeros(0, dtype=torch.long)
    assert math.isnan(fn.accuracy(empty, labels))
    assert math.isnan(fn.mean_loss(empty, labels))


# ----------------------------------------------------------------------------------- layer_distance


def test_layer_distance_hand_case():
    params_u = {"conv.weight": t([[1.0, 2.0], [3.0, 4.0]]), "fc.bias": t([0.5, -1.0, 2.0])}
    params_r = {"conv.weight": t([[1.0, 0.0], [3.0, 1.0]]), "fc.bias": t([0.5, 1.0, 0.0])}
    # differences: 0, 2, 0, 3 and 0, -2, 2 → 4 + 9 + 4 + 4 = 21
    assert fn.layer_distance(params_u, params_r) == pytest.approx(math.sqrt(21), abs=1e-12)
    assert fn.layer_distance(params_r, params_r) == 0.0


def test_layer_distance_float32_inputs_are_summed_in_float64():
    a = {"w": torch.full((1000,), 1.0, dtype=torch.float32)}
    b = {"w": torch.full((1000,), 1.1, dtype=torch.float32)}
    diff = float(torch.tensor(1.1, dtype=torch.float32).double() - 1.0)
    assert fn.layer_distance(a, b) == pytest.approx(math.sqrt(1000 * diff**2), rel=1e-12)


# ------------------------------------------------------------------------------------------ entropy


@pytest.mark.parametrize("k", [2, 3, 10])
def test_entropy_uniform_is_log_k(k):
    probs = fn.probabilities(torch.zeros(4, k))
    assert fn.entropy(probs).tolist() == pytest.approx([math.log(k)] * 4, abs=1e-12)


def test_entropy_one_hot_is_zero_without_nan():
    probs = t([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert fn.entropy(probs).tolist() == [0.0, 0.0]
    saturated = fn.probabilities(t([[1000.0, 0.0, 0.0]]))  # softmax underflows to an exact one-hot
    value = fn.entropy(saturated)
    assert not torch.isnan(value).any()
    assert value.tolist() == pytest.approx([0.0], abs=1e-300)


# -------------------------------------------------------------------------------------- entropy_mia


def test_entropy_mia_low_entropy_forget_samples_are_members():
    rng = np.random.default_rng(0)
    members = torch.from_numpy(rng.uniform(0.0, 0.2, 200))
    nonmembers = torch.from_numpy(rng.uniform(0.9, 1.1, 100))
    low = torch.from_numpy(rng.uniform(0.0, 0.2, 30))
    high = torch.from_numpy(rng.uniform(0.9, 1.1, 30))
    assert fn.entropy_mia(members, nonmembers, low, 1000, np.random.default_rng(1)) == pytest.approx(1.0)
    assert fn.entropy_mia(members, nonmembers, high, 1000, np.random.default_rng(1)) == pytest.approx(0.0)
    mixed = torch.cat([low[:10], high[:30]])
    mia = fn.entropy_mia(members, nonmembers, mixed, 1000, np.random.default_rng(1))
    assert mia == pytest.approx(10 / 40)


def test_entropy_mia_subsampling_is_reproducible_from_the_rng():
    # Overlapping distributions, so that the attacker (and its verdicts near the boundary) depends on which
    # members the subsample holds.
    data = np.random.default_rng(0)
    members = torch.from_numpy(data.normal(0.5, 0.3, 400))
    nonmembers = torch.from_numpy(data.normal(0.8, 0.3, 60))
    forget = torch.from_numpy(np.linspace(0.5, 0.8, 301))

    def score(seed: int) -> float:
        return fn.entropy_mia(members, nonmembers, forget, 20, np.random.default_rng(seed))

    assert score(7) == score(7)
    assert len({score(seed) for seed in range(6)}) > 1  # the subsample does depend on the rng

    # the rng is consumed only when there are more members than max_members
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    fn.entropy_mia(members, nonmembers, forget, 1000, rng)
    assert rng.bit_generator.state == before
    fn.entropy_mia(members, nonmembers, forget, 20, rng)
    assert rng.bit_generator.state != before


def test_entropy_mia_empty_inputs_are_nan():
    some = torch.tensor([0.1, 0.2])
    empty = torch.zeros(0, dtype=torch.float64)
    assert math.isnan(fn.entropy_mia(some, some, empty, 10, np.random.default_rng(0)))
    assert math.isnan(fn.entropy_mia(empty, some, some, 10, np.random.default_rng(0)))


# ----------------------------------------------------------------------------------------- loss_mia


def test_loss_mia_indistinguishable_is_about_one_half():
    data = np.random.default_rng(0)
    forget = torch.from_numpy(data.exponential(1.0, 1000))
    test = torch.from_numpy(data.exponential(1.0, 1000))
    value = fn.loss_mia(forget, test, 5, np.random.default_rng(1))
    # 2000 samples from one distribution: a 1-D threshold classifier's held-out accuracy has a standard
    # deviation of about sqrt(0.25 / 2000) ≈ 0.011 around 0.5; 0.06 is more than 5 of them.
    assert abs(value - 0.5) < 0.06


def test_loss_mia_perfectly_separated_is_one():
    data = np.random.default_rng(0)
    forget = torch.from_numpy(data.uniform(0.0, 0.1, 200))
    test = torch.from_numpy(data.uniform(5.0, 6.0, 300))  # the larger side is subsampled to 200
    assert fn.loss_mia(forget, test, 5, np.random.default_rng(1)) == 1.0


def test_loss_mia_fewer_samples_than_folds_is_nan():
    forget = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    test = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64)
    assert math.isnan(fn.loss_mia(forget, test, 5, np.random.default_rng(0)))


def test_loss_mia_is_reproducible_from_the_rng():
    data = np.random.default_rng(0)
    forget = torch.from_numpy(data.normal(0.0, 1.0, 80))
    test = torch.from_numpy(data.normal(0.5, 1.0, 120))
    a = fn.loss_mia(forget, test, 5, np.random.default_rng(4))
    b = fn.loss_mia(forget, test, 5, np.random.default_rng(4))
    assert a == b


# --------------------------------------------------------------------------------------- tug_of_war


def test_tug_of_war_hand_case():
    assert fn.tug_of_war(0.1, -0.5, 0.2) == pytest.approx((1 - 0.1) * (1 - 0.5) * (1 - 0.2))  # 0.36
    assert fn.tug_of_war(-0.25, 0.0, -1.0) == pytest.approx(0.0)


def test_tug_of_war_all_zero_is_one():
    assert fn.tug_of_war(0.0, 0.0, 0.0) == 1.0


# ------------------------------------------------------------------------------------------- Scorer

N_TRAIN, N_TEST, CLASSES = 20, 10, ["a", "b", "c"]


@pytest.fixture
def setting():
    g = torch.Generator().manual_seed(0)
    train_labels = torch.arange(N_TRAIN) % 3  # class "a" (0): 7 train samples
    test_labels = torch.arange(N_TEST) % 3  # class "a": 4 test samples
    data = ImageData(
        "tiny",
        torch.randint(0, 256, (N_TRAIN, 1, 4, 4), dtype=torch.uint8, generator=g), train_labels,
        torch.randint(0, 256, (N_TEST, 1, 4, 4), dtype=torch.uint8, generator=g), test_labels,
        list(CLASSES), (0.5,), (0.25,),
    )
    splits = FullClass(name="full_class").split(data, "a", torch.Generator().manual_seed(0))
    return data, splits


def one_hot_logits(labels: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Logit `scale` on the given class, 0 elsewhere: loss log(1 + 2·exp(−scale)) when it is the label."""
    return F.one_hot(labels, len(CLASSES)).double() * scales[:, None]


def confident_model(data: ImageData) -> Outputs:
    """Right on every sample; confident on train (low entropy), unsure on test (high entropy)."""
    train = one_hot_logits(data.train_labels, torch.linspace(6.0, 8.0, N_TRAIN, dtype=torch.float64))
    test = one_hot_logits(data.test_labels, torch.linspace(0.2, 1.0, N_TEST, dtype=torch.float64))
    return Outputs(train=train, test=test, params={"w": t([1.0, 2.0, 3.0]), "b": t([0.5])})


def make_scorer(splits) -> Scorer:
    return Scorer(splits, seed_eval=0, target="a", mia_max_members=1000, mia_loss_folds=2)


SPLITS = ("forget_train", "retain_train", "forget_test", "retain_test")


def test_scenario_splits_of_the_tiny_setting(setting):
    _, splits = setting
    assert splits.forget_train.indices.tolist() == [0, 3, 6, 9, 12, 15, 18]
    assert splits.forget_test.indices.tolist() == [0, 3, 6, 9]
    assert len(splits.retain_train) == 13 and len(splits.retain_test) == 6


def test_model_scores_keys_and_hand_values(setting):
    data, splits = setting
    out = confident_model(data)
    # make the model wrong on two retain-test samples (test indices 1 and 2, labels b and c → predict a)
    out.test[1] = t([2.0, 0.0, 0.0])
    out.test[2] = t([2.0, 0.0, 0.0])
    scores = make_scorer(splits).model_scores(out)

    expected_keys = {(m, s) for m in ("acc", "loss") for s in SPLITS} | {("mia", "forget_train"),
                                                                           ("mia_loss", "forget_train")}
    assert set(scores) == expected_keys

    assert scores["acc", "forget_train"] == 1.0
    assert scores["acc", "retain_train"] == 1.0
    assert scores["acc", "forget_test"] == 1.0
    assert scores["acc", "retain_test"] == pytest.approx(4 / 6)

    train_scales = torch.linspace(6.0, 8.0, N_TRAIN, dtype=torch.float64).tolist()
    forget_rows, retain_rows = [0, 3, 6, 9, 12, 15, 18], [i for i in range(N_TRAIN) if i % 3]
    for split, rows in (("forget_train", forget_rows), ("retain_train", retain_rows)):
        expected = sum(math.log(1 + 2 * math.exp(-train_scales[i])) for i in rows) / len(rows)
        assert scores["loss", split] == pytest.approx(expected, rel=1e-12)
    test_scales = torch.linspace(0.2, 1.0, N_TEST, dtype=torch.float64).tolist()
    expected = sum(math.log(1 + 2 * math.exp(-test_scales[i])) for i in (0, 3, 6, 9)) / 4
    assert scores["loss", "forget_test"] == pytest.approx(expected, rel=1e-12)
    # retain test: rows 4, 5, 7, 8 right as before; rows 1 and 2 put logit 2 on a wrong class, so their label
    # has probability e⁰ / (e² + 1 + 1) and loss log(e² + 2)
    right = sum(math.log(1 + 2 * math.exp(-test_scales[i])) for i in (4, 5, 7, 8))
    expected = (right + 2 * math.log(math.exp(2) + 2)) / 6
    assert scores["loss", "retain_test"] == pytest.approx(expected, rel=1e-12)

    # members (train) are confident, non-members (test) unsure: the forget samples look like members
    assert scores["mia", "forget_train"] == 1.0
    assert 0.0 <= scores["mia_loss", "forget_train"] <= 1.0


def test_model_scores_mia_of_a_model_unsure_on_the_forget_set(setting):
    data, splits = setting
    out = confident_model(data)
    forget = splits.forget_train.indices
    unsure = torch.linspace(0.3, 0.9, len(forget), dtype=torch.float64)
    out.train[forget] = one_hot_logits(data.train_labels[forget], unsure)
    scores = make_scorer(splits).model_scores(out)
    assert scores["mia", "forget_train"] == 0.0


def test_model_scores_are_reproducible(setting):
    data, splits = setting
    a = make_scorer(splits).model_scores(confident_model(data))
    b = make_scorer(splits).model_scores(confident_model(data))
    assert a == b


def test_comparison_of_a_model_with_itself(setting):
    data, splits = setting
    scorer = make_scorer(splits)
    out = confident_model(data)
    out.test[1] = t([2.0, 0.0, 0.0])  # some errors, so that nothing is trivially 1
    scores = scorer.model_scores(out)
    comparison = scorer.comparison_scores(out, scores, out, scores)

    assert comparison["layer_distance", None] == 0.0
    assert comparison["tow", None] == 1.0
    for split in SPLITS:
        assert comparison["completeness", split] == 1.0
        assert comparison["js_divergence", split] == 0.0
        assert comparison["activation_distance", split] == 0.0
        assert comparison["delta_acc", split] == 0.0
        assert comparison["delta_loss", split] == 0.0
    assert comparison["delta_mia", "forget_train"] == 0.0
    deltas = [key for key in comparison if key[0].startswith("delta_")]
    assert len(deltas) == 2 * len(SPLITS) + 1
    assert all(comparison[key] == 0.0 for key in deltas)


@pytest.mark.parametrize("k", [0, 1, 2, 7])
def test_completeness_on_forget_train_counts_changed_predictions(setting, k):
    data, splits = setting
    scorer = make_scorer(splits)
    out_r = confident_model(data)
    out_u = Outputs(out_r.train.clone(), out_r.test.clone(), {"w": t([1.0, 0.0, 3.0]), "b": t([2.5])})
    forget = splits.forget_train.indices  # all of class 0
    n = len(forget)
    changed = forget[:k]
    out_u.train[changed] = one_hot_logits(torch.full((k,), 1), torch.full((k,), 5.0, dtype=torch.float64))

    scores_r, scores_u = scorer.model_scores(out_r), scorer.model_scores(out_u)
    comparison = scorer.comparison_scores(out_u, scores_u, out_r, scores_r)
    assert comparison["completeness", "forget_train"] == pytest.approx((n - k) / n)
    for split in ("retain_train", "forget_test", "retain_test"):
        assert comparison["completeness", split] == 1.0
        assert comparison["activation_distance", split] == 0.0
    assert comparison["delta_acc", "forget_train"] == pytest.approx(-k / n)
    assert comparison["tow", None] == pytest.approx(1 - k / n)
    assert comparison["layer_distance", None] == pytest.approx(math.sqrt(2.0**2 + 2.0**2))
    if k:
        assert 0.0 < comparison["js_divergence", "forget_train"] <= 1.0
