"""Each text-method loss on a fixed batch against its formula, written here independently as loops over positions."""

from __future__ import annotations

import math

import pytest
import torch

from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.encoding import IGNORE

B, T, V = 3, 6, 7


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    logits, reference = torch.randn(B, T, V, generator=g), torch.randn(B, T, V, generator=g)
    ids = torch.randint(0, V, (B, T), generator=g)
    labels = ids.clone()
    labels[:, :2] = IGNORE  # the prompt
    labels[1, 4:] = IGNORE  # padding
    return logits, reference, labels


def log_softmax(row):
    top = max(row)
    norm = top + math.log(sum(math.exp(v - top) for v in row))
    return [v - norm for v in row]


def nll_loop(logits, labels):
    """Per sequence: −Σ log p(label_{t+1} | position t) over labelled next tokens, and their count."""
    sums, counts = [], []
    for b in range(B):
        total, count = 0.0, 0
        for t in range(T - 1):
            if labels[b, t + 1] != IGNORE:
                total -= log_softmax(logits[b, t].tolist())[labels[b, t + 1]]
                count += 1
        sums.append(total)
        counts.append(count)
    return sums, counts


def logsigmoid(x):
    return -math.log1p(math.exp(-x))


def test_sequence_and_token_mean_nll(batch):
    logits, _, labels = batch
    sums, counts = nll_loop(logits, labels)
    nll, tokens = losses.sequence_nll(logits, labels)
    assert tokens.tolist() == counts == [4, 2, 4]
    assert nll.tolist() == pytest.approx(sums, rel=1e-5)
    assert losses.token_mean_nll(logits, labels).item() == pytest.approx(sum(sums) / sum(counts), rel=1e-5)


def test_kl_to_reference_averages_over_every_position(batch):
    logits, reference, _ = batch
    total = 0.0
    for b in range(B):
        for t in range(T):
            p, q = log_softmax(reference[b, t].tolist()), log_softmax(logits[b, t].tolist())
            total += sum(math.exp(a) * (a - c) for a, c in zip(p, q, strict=True))
    assert losses.kl_to_reference(logits, reference).item() == pytest.approx(total / (B * T), rel=1e-5)


def test_npo_dpo_and_simnpo(batch):
    logits, reference, labels = batch
    nll, tokens = losses.sequence_nll(logits, labels)
    ref_nll, _ = losses.sequence_nll(reference, labels)
    beta = 0.1
    expected = -(2 / beta) * sum(logsigmoid(-beta * (r - n)) for n, r in zip(nll.tolist(), ref_nll.tolist(),
                                                                             strict=True)) / B
    assert losses.npo(nll, ref_nll, beta).item() == pytest.approx(expected, rel=1e-5)
    idk, ref_idk = nll * 0.5, ref_nll * 0.7
    rw = [r - n for n, r in zip(idk.tolist(), ref_idk.tolist(), strict=True)]
    rl = [r - n for n, r in zip(nll.tolist(), ref_nll.tolist(), strict=True)]
    expected = -(2 / beta) * sum(logsigmoid(beta * (w - v)) for w, v in zip(rw, rl, strict=True)) / B
    assert losses.dpo(idk, ref_idk, nll, ref_nll, beta).item() == pytest.approx(expected, rel=1e-5)
    beta, delta = 4.5, 0.3
    expected = -(2 / beta) * sum(logsigmoid(beta * (n / c - delta)) for n, c in zip(nll.tolist(), tokens.tolist(),
                                                                                    strict=True)) / B
    assert losses.simnpo(nll, tokens, beta, delta).item() == pytest.approx(expected, rel=1e-5)


def test_npo_at_the_reference_is_2_log_2_over_beta_and_grows_with_likelihood():
    nll = torch.tensor([5.0, 7.0])
    at_reference = losses.npo(nll, nll, beta=0.1).item()
    assert at_reference == pytest.approx((2 / 0.1) * math.log(2))
    assert losses.npo(nll - 3, nll, beta=0.1).item() > at_reference  # likelier than the reference: more loss


def test_activation_distance_over_answer_tokens(batch):
    _, _, labels = batch
    g = torch.Generator().manual_seed(1)
    hidden, target = torch.randn(B, T, 4, generator=g), torch.randn(1, 1, 4, generator=g)
    per_sequence = []
    for b in range(B):
        answer = [t for t in range(T) if labels[b, t] != IGNORE]
        per_sequence.append(sum(sum((hidden[b, t, d].item() - target[0, 0, d].item()) ** 2 for d in range(4)) / 4
                                for t in answer) / len(answer))
    assert losses.activation_distance(hidden, target, labels).item() == pytest.approx(sum(per_sequence) / B,
                                                                                       rel=1e-5)


def test_undial_shifts_the_teacher_at_labelled_positions_only(batch):
    logits, reference, labels = batch
    beta, total = 10.0, 0.0
    for b in range(B):
        for t in range(T - 1):
            z = reference[b, t].tolist()
            if labels[b, t + 1] != IGNORE:
                z[labels[b, t + 1]] -= beta
            q = [math.exp(v) for v in log_softmax(z)]
            total -= sum(a * c for a, c in zip(q, log_softmax(logits[b, t].tolist()), strict=True))
    assert losses.undial(logits, reference, labels, beta).item() == pytest.approx(total / (B * (T - 1)), rel=1e-5)
