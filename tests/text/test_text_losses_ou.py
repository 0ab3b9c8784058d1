"""The forget losses of WGA, SatImp, CE-U and PDU against the reference's formulas written out here from the papers and
OpenUnlearning's `compute_wga_loss`, `compute_satimp_loss`, `cross_entropy_unlearning_loss` and `PDU.compute_loss`
(flattened tokens,
boolean indexing, soft-target cross-entropy), on a fixed batch: values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.encoding import IGNORE


def batch():
    """Logits of 3 sequences × 6 positions × 7 tokens, labels with a prompt and padding left out (IGNORE), one
    sequence with a single answer token."""
    generator = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 6, 7, generator=generator) * 2  # float32, as the losses compute
    labels = torch.tensor([[IGNORE, IGNORE, 3, 1, 4, 2],
                           [IGNORE, 5, 0, 6, IGNORE, IGNORE],
                           [IGNORE, IGNORE, IGNORE, IGNORE, 2, IGNORE]])
    return logits.requires_grad_(), labels


def reference_weighted(logits, labels, weight):
    """−mean over the labelled shifted tokens of weight(p)·CE, CE per flattened token with ignore_index -100."""
    shift_logits, shift_labels = logits[..., :-1, :], labels[..., 1:]
    ce = F.cross_entropy(shift_logits.reshape(-1, 7), shift_labels.reshape(-1), ignore_index=-100, reduction="none")
    p = torch.exp(-ce).detach()
    return -(weight(p) * ce)[shift_labels.reshape(-1) != -100].mean()


def reference_ceu(logits, labels, first):
    valid = labels != -100
    labels = labels.masked_fill((valid.cumsum(-1) <= first) & valid, -100)
    shift_logits, shift_labels = logits[..., :-1, :], labels[..., 1:]
    mask = shift_labels != -100
    chosen, targets = shift_logits[mask], shift_labels[mask]
    target_logits = chosen.detach().clone()
    target_logits[torch.arange(len(targets)), targets] = float("-inf")
    return F.cross_entropy(chosen, F.softmax(target_logits, -1))


def reference_margin(logits, labels):
    """PDU: (max − mean)² of the flattened, unshifted logits, masked by the unshifted labels."""
    flat = logits.reshape(-1, logits.size(-1))
    margin = (flat.max(dim=-1)[0] - flat.mean(dim=-1)) ** 2
    mask = (labels != -100).reshape(-1)
    return (margin * mask).sum() / mask.sum()


def value_and_gradient(loss_of):
    logits, labels = batch()
    loss = loss_of(logits, labels)
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize(("mine", "theirs"), [
    (lambda z, y: losses.weighted_ascent(z, y, lambda p: p ** 1.0),
     lambda z, y: reference_weighted(z, y, lambda p: p ** 1.0)),
    (lambda z, y: losses.weighted_ascent(z, y, lambda p: p ** 2.5),
     lambda z, y: reference_weighted(z, y, lambda p: p ** 2.5)),
    (lambda z, y: losses.weighted_ascent(z, y, lambda p: p ** 5.0 * (1 - p) ** 1.0),
     lambda z, y: reference_weighted(z, y, lambda p: p ** 5.0 * (1 - p) ** 1.0)),
    (lambda z, y: losses.cross_entropy_unlearning(z, losses.without_first_answer_tokens(y, 1)),
     lambda z, y: reference_ceu(z, y, 1)),
    (lambda z, y: losses.cross_entropy_unlearning(z, losses.without_first_answer_tokens(y, 0)),
     lambda z, y: reference_ceu(z, y, 0)),
    (losses.logit_margin, reference_margin),
], ids=["wga", "wga_beta", "satimp", "ceu", "ceu_all_tokens", "pdu"])
def test_each_forget_loss_is_the_references_formula_in_value_and_gradient(mine, theirs):
    value, gradient = value_and_gradient(mine)
    expected_value, expected_gradient = value_and_gradient(theirs)
    assert value.item() == pytest.approx(expected_value.item(), rel=1e-6)
    assert torch.allclose(gradient, expected_gradient, rtol=1e-5, atol=1e-8)
    assert gradient.abs().sum() > 0


def test_wga_at_beta_0_is_gradient_ascent_and_ceu_drives_the_true_token_down():
    logits, labels = batch()
    assert losses.weighted_ascent(logits, labels, lambda p: p ** 0.0).item() == pytest.approx(
        -losses.token_mean_nll(logits, labels).item(), rel=1e-6)
    masked = losses.without_first_answer_tokens(labels, 1)
    assert masked.tolist() == [[IGNORE, IGNORE, IGNORE, 1, 4, 2], [IGNORE, IGNORE, 0, 6, IGNORE, IGNORE],
                               [IGNORE] * 6]  # the one-token answer leaves nothing
    loss = losses.cross_entropy_unlearning(logits, masked)
    loss.backward()
    # dL/dz = (p − q) / n: positive on the true token (q_y = 0), so descent lowers its logit
    assert logits.grad[0, 2, 1] > 0 and logits.grad[1, 2, 6] > 0
    assert losses.cross_entropy_unlearning(logits.detach(), torch.full_like(labels, IGNORE)).item() == 0.0
