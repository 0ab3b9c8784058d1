"""Bad Teacher's loss and UNSIR's noise objective against independent plain-PyTorch oracles of the reference code.

The oracles transcribe the SSD authors' code (github if-loops/selective-synaptic-dampening, src/unlearn.py:
`UnlearnerLoss` l. 11-23, `UNSIR_noise_train` l. 134-154), which runs the original implementations of
vikram2000b/bad-teaching-unlearning and vikram2000b/Fast-Machine-Unlearning, and share no code with unlearnbench.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.tasks.image.methods.bad_teacher import unlearner_loss
from unlearnbench.tasks.image.methods.unsir import noise_loss, optimise_noise

CLASSES = 10


def reference_unlearner_loss(output: Tensor, labels: Tensor, full_teacher_logits: Tensor,
                             unlearn_teacher_logits: Tensor, kl_temperature: float) -> Tensor:
    """src/unlearn.py `UnlearnerLoss`, verbatim but for names: labels 1 forget, 0 retain; F.kl_div's default
    reduction ('mean': over batch × classes, with the deprecation warning silenced here)."""
    labels = torch.unsqueeze(labels, dim=1)
    f_teacher_out = F.softmax(full_teacher_logits / kl_temperature, dim=1)
    u_teacher_out = F.softmax(unlearn_teacher_logits / kl_temperature, dim=1)
    overall_teacher_out = labels * u_teacher_out + (1 - labels) * f_teacher_out
    student_out = F.log_softmax(output / kl_temperature, dim=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return F.kl_div(student_out, overall_teacher_out)


def reference_noise_loss(model: nn.Module, inputs: Tensor, forget_class_label: int) -> Tensor:
    """src/unlearn.py `UNSIR_noise_train`'s loss, verbatim but for names (the weight 0.1 is hard-coded there)."""
    labels = torch.zeros(inputs.shape[0]) + forget_class_label
    outputs = model(inputs)
    return -F.cross_entropy(outputs, labels.long()) + 0.1 * torch.mean(torch.sum(inputs**2, [1, 2, 3]))


def reference_noise_train(noise: Tensor, model: nn.Module, forget_class_label: int, num_epochs: int) -> Tensor:
    """src/unlearn.py `UNSIR_noise_train`'s loop: Adam lr 0.1 on the noise alone (the model's gradients accumulate
    there but no optimizer reads them)."""
    noise = nn.Parameter(noise.clone())
    opt = torch.optim.Adam([noise], lr=0.1)
    for _ in range(num_epochs):
        loss = reference_noise_loss(model, noise, forget_class_label)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return noise.detach()


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def small_model(seed: int, channels: int = 3) -> nn.Module:
    """A small CNN with batch normalisation (whose mode matters to the noise), initialised from `seed`."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, CLASSES))


# --- Bad Teacher --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_bad_teacher_loss_and_gradient_equal_the_reference(temperature):
    """A fixed batch of 12 (7 forget, 5 retain, interleaved), logits on several scales."""
    student = (torch.randn(12, CLASSES, generator=generator(0)) * 3).requires_grad_(True)
    full = torch.randn(12, CLASSES, generator=generator(1)) * 5
    unlearn = torch.randn(12, CLASSES, generator=generator(2))
    labels = torch.tensor([1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1])  # integers, as the reference's UnLearningData gives
    expected = reference_unlearner_loss(student, labels, full, unlearn, temperature)
    (expected_grad,) = torch.autograd.grad(expected, student)
    ours = unlearner_loss(student, labels.float(), full, unlearn, temperature)
    (ours_grad,) = torch.autograd.grad(ours, student)
    assert torch.equal(ours, expected)
    assert torch.equal(ours_grad, expected_grad)


def test_bad_teacher_loss_is_the_mean_over_batch_and_classes_without_t_squared():
    """'mean' (sum / (B·C)), not 'batchmean' (sum / B); and the temperature only divides the logits: no T² factor."""
    student, full = torch.randn(6, CLASSES, generator=generator(3)), torch.randn(6, CLASSES, generator=generator(4))
    unlearn, flags = torch.randn(6, CLASSES, generator=generator(5)), torch.tensor([1.0, 0, 1, 0, 0, 1])
    for temperature in (1.0, 3.0):
        target = torch.where(flags[:, None] == 1, F.softmax(unlearn / temperature, 1), F.softmax(full / temperature, 1))
        log_student = F.log_softmax(student / temperature, 1)
        kl_sum = (target * (target.log() - log_student)).sum()
        torch.testing.assert_close(unlearner_loss(student, flags, full, unlearn, temperature), kl_sum / (6 * CLASSES))


def test_bad_teacher_targets_follow_the_flags_alone():
    """All-forget batches learn from the random teacher only, all-retain ones from M_o only."""
    student, full = torch.randn(4, CLASSES, generator=generator(6)), torch.randn(4, CLASSES, generator=generator(7))
    unlearn = torch.randn(4, CLASSES, generator=generator(8))
    forget = unlearner_loss(student, torch.ones(4), full, unlearn, 1.0)
    retain = unlearner_loss(student, torch.zeros(4), full, unlearn, 1.0)
    torch.testing.assert_close(forget, unlearner_loss(student, torch.ones(4), full * 7 + 1, unlearn, 1.0))
    torch.testing.assert_close(retain, unlearner_loss(student, torch.zeros(4), full, unlearn * 7 + 1, 1.0))
    assert torch.equal(forget, reference_unlearner_loss(student, torch.ones(4, dtype=torch.long), full, unlearn, 1.0))


# --- UNSIR --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("label", [0, 3])
def test_unsir_noise_objective_and_its_gradient_equal_the_reference(label):
    """On fixed noise through a fixed model in eval mode: the same value and the same gradient on the noise."""
    model = small_model(0).eval()
    noise = torch.randn(32, 3, 8, 8, generator=generator(9)).requires_grad_(True)
    expected = reference_noise_loss(model, noise, label)
    (expected_grad,) = torch.autograd.grad(expected, noise)
    ours = noise_loss(model(noise), label, noise, 0.1)
    (ours_grad,) = torch.autograd.grad(ours, noise)
    assert torch.equal(ours, expected)
    assert torch.equal(ours_grad, expected_grad)


def test_unsir_noise_objective_weights_the_mean_squared_norm_per_image():
    """−CE + w · mean_i Σ N_i²: with logits that do not depend on the noise, scaling the noise by s moves the loss
    by w · (s² − 1) · mean_i Σ N_i²; the weight is the option's (0 turns the L2 term off)."""
    noise = torch.randn(5, 1, 4, 4, generator=generator(10))
    logits = torch.randn(5, CLASSES, generator=generator(11))
    mean_norm = noise.pow(2).flatten(1).sum(1).mean()
    torch.testing.assert_close(noise_loss(logits, 2, noise * 2, 0.1) - noise_loss(logits, 2, noise, 0.1),
                               0.1 * 3 * mean_norm)
    torch.testing.assert_close(noise_loss(logits, 2, noise, 0.0), -F.cross_entropy(logits, torch.full((5,), 2)))


def test_unsir_noise_optimisation_equals_the_reference_loop_in_eval_mode():
    """25 Adam steps at lr 0.1 (the reference's full-class setting) give the reference loop's noise exactly, with
    the model in eval mode for both (the reference runs it in train mode: a documented difference)."""
    reference_model, model = small_model(1), small_model(1)
    start = torch.randn(32, 3, 8, 8, generator=generator(12))
    expected = reference_noise_train(start, reference_model.eval(), 3, 25)
    fabric = Fabric(accelerator="cpu", devices=1)
    ours, losses = optimise_noise(fabric, fabric.setup_module(model), start, 3, 25, 0.1, 0.1)
    assert torch.equal(ours, expected)
    assert len(losses) == 25 and losses[-1] < losses[0]
    assert all(p.grad is None for p in model.parameters())  # unlike the reference, nothing reaches the model
