"""SCRUB's and SalUn's arithmetic against the reference code, re-written here in plain PyTorch.

Each oracle follows the authors' code as read, not unlearnbench's: RepDistiller's `DistillKL`
(github meghdadk/SCRUB, thirdparty/repdistiller/distiller_zoo/KD.py), SalUn's `save_gradient_ratio`
(github OPTML-Group/Unlearn-Saliency, Classification/generate_mask.py) and its random-label loop with the saliency mask
(Classification/unlearn/RL.py: gradients multiplied by the mask, SGD with weight decay, masked-out weights and their
momentum restored after every step). Where unlearnbench deliberately differs (unshuffled mask batches; the label draw
order of its seeded stream), the oracle takes unlearnbench's documented choice, so that the values must agree.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from helpers import make_task
from torch import Tensor, nn

from unlearnbench.runtime.seeding import global_seed
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass
from unlearnbench.tasks.image.methods.salun import SalUn, saliency_mask
from unlearnbench.tasks.image.methods.scrub import distill_kl

BATCH = 64


# --- SCRUB: the distillation term ----------------------------------------------------------------------------------


def repdistiller_kl(student: Tensor, teacher: Tensor, temperature: float) -> Tensor:
    """DistillKL.forward: kl_div(log_softmax(s/T), softmax(t/T), size_average=False) · T² / batch size."""
    log_p_s = F.log_softmax(student / temperature, dim=1)
    p_t = F.softmax(teacher / temperature, dim=1)
    return F.kl_div(log_p_s, p_t, reduction="sum") * temperature**2 / student.shape[0]


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_distill_kl_is_repdistillers_distillkl_in_value_and_gradient(temperature):
    generator = torch.Generator().manual_seed(7)
    student = (3 * torch.randn(6, 10, generator=generator, dtype=torch.float64)).requires_grad_()
    teacher = 3 * torch.randn(6, 10, generator=generator, dtype=torch.float64)
    ours, = torch.autograd.grad(distill_kl(student, teacher, temperature), student)
    theirs, = torch.autograd.grad(repdistiller_kl(student, teacher, temperature), student)
    assert torch.allclose(distill_kl(student, teacher, temperature), repdistiller_kl(student, teacher, temperature),
                          rtol=1e-12, atol=0)
    assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-14)
    # the direction: KL(teacher ‖ student), not KL(student ‖ teacher)
    assert not torch.allclose(distill_kl(student, teacher, temperature), repdistiller_kl(teacher, student, temperature))


def test_distill_kl_in_float32_matches_to_float_precision():
    generator = torch.Generator().manual_seed(8)
    student, teacher = torch.randn(32, 100, generator=generator), torch.randn(32, 100, generator=generator)
    assert torch.allclose(distill_kl(student, teacher, 4.0), repdistiller_kl(student, teacher, 4.0), rtol=1e-5)


# --- SalUn: a small model on digits (forget class 3) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return Digits(name="digits", mean=[0.3053], std=[0.3759]).load()


def small_model() -> nn.Module:
    """Convolution, batch normalisation (running statistics move in train mode) and a linear head; fixed init."""
    with global_seed(3):
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 8 * 8, 10))


def inputs_of(data, indices: Tensor) -> Tensor:
    """Normalised training images, computed from the raw uint8 pixels: (x/255 − mean)/std."""
    images = data.train_images[indices].to(torch.float32) / 255
    return (images - torch.tensor(data.mean).view(1, -1, 1, 1)) / torch.tensor(data.std).view(1, -1, 1, 1)


def chunks(order: Tensor, size: int) -> Iterator[Tensor]:
    """A DataLoader's batches over `order` (drop_last=False)."""
    yield from order.split(size)


def reference_mask(model: nn.Module, inputs: Tensor, labels: Tensor, fraction: float) -> list[Tensor]:
    """generate_mask.py: Σ over forget batches of ∇(−CE), abs, one global ranking, rank < int(N · fraction)."""
    model.eval()
    gradients = [0] * len(list(model.parameters()))
    for batch in chunks(torch.arange(len(labels)), BATCH):
        model.zero_grad()
        (-F.cross_entropy(model(inputs[batch]), labels[batch])).backward()
        gradients = [g + p.grad for g, p in zip(gradients, model.parameters(), strict=True)]
    gradients = [g.abs() for g in gradients]
    all_elements = -torch.cat([g.flatten() for g in gradients])
    threshold_index = int(len(all_elements) * fraction)
    ranked = torch.sort(-all_elements, descending=True).values
    assert ranked[threshold_index - 1] > ranked[threshold_index]  # no tie at the cut: the rule is unambiguous
    ranks = torch.argsort(torch.argsort(all_elements))
    return [m.view_as(g) for m, g in zip((ranks < threshold_index).split([g.numel() for g in gradients]), gradients,
                                         strict=True)]


def forget_and_retain(task) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    forget, retain = task.splits.forget_train, task.splits.retain_train
    return (inputs_of(task.data, forget.indices), forget.labels[forget.indices],
            inputs_of(task.data, retain.indices), retain.labels[retain.indices])


@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_saliency_mask_is_generate_masks_global_top_fraction(digits, fraction):
    task, load = make_task(digits, FullClass("full_class"), "3", small_model)
    x_f, y_f, _, _ = forget_and_retain(task)
    expected = reference_mask(load(), x_f, y_f, fraction)
    batches = task.batches(task.splits.forget_train, BATCH, shuffle=False, training=False)
    mask = saliency_mask(task.fabric, task.fabric.setup_module(load()), batches, fraction)
    assert all(torch.equal(m, e) for m, e in zip(mask, expected, strict=True))
    assert sum(int(m.sum()) for m in mask) == int(sum(m.numel() for m in mask) * fraction)


# --- SalUn: one epoch of the random-label loop ---------------------------------------------------------------------


class ReferenceRL:
    """RL.py's update: CE step, gradients × mask, SGD (momentum, weight decay), masked-out weights and momentum
    restored to their values at the start of the epoch."""

    def __init__(self, model: nn.Module, mask: list[Tensor], lr: float, weight_decay: float) -> None:
        self.model, self.mask = model, [m.long() for m in mask]
        self.optimizer = torch.optim.SGD(model.parameters(), lr, momentum=0.9, weight_decay=weight_decay)
        self.theta0 = [p.detach().clone() for p in model.parameters()]

    def step(self, inputs: Tensor, target: Tensor) -> None:
        loss = F.cross_entropy(self.model(inputs), target)
        self.optimizer.zero_grad()
        loss.backward()
        for p, m in zip(self.model.parameters(), self.mask, strict=True):
            p.grad *= m
        self.optimizer.step()
        self.restore()

    @torch.no_grad()
    def restore(self) -> None:
        for p, m, theta in zip(self.model.parameters(), self.mask, self.theta0, strict=True):
            keep = m.to(p.dtype)
            p.mul_(keep).add_(theta * (1 - keep))
            state = self.optimizer.state.get(p)
            if state is not None and state.get("momentum_buffer") is not None:
                state["momentum_buffer"].mul_(keep)


def draw_labels(labels: Tensor, relabel: str, generator: torch.Generator) -> Tensor:
    """One label per forget sample from the seeded stream: RL.py's randint over all classes, or an offset draw
    among the other classes (unlearnbench's rule)."""
    if relabel == "any":
        return torch.randint(0, 10, labels.shape, generator=generator)
    return (labels + torch.randint(1, 10, labels.shape, generator=generator)) % 10


def reference_passes_epoch(rl: ReferenceRL, data: tuple[Tensor, ...], relabel: str, g: torch.Generator) -> None:
    """RL.py's CIFAR-10 branch: the forget loader (shuffled) with random labels, then the retain loader (shuffled)."""
    x_f, y_f, x_r, y_r = data
    new = draw_labels(y_f, relabel, g)
    for batch in chunks(torch.randperm(len(y_f), generator=g), BATCH):
        rl.step(x_f[batch], new[batch])
    for batch in chunks(torch.randperm(len(y_r), generator=g), BATCH):
        rl.step(x_r[batch], y_r[batch])


def reference_mixed_epoch(rl: ReferenceRL, data: tuple[Tensor, ...], relabel: str, g: torch.Generator) -> None:
    """RL.py's CIFAR-100 branch: ConcatDataset([relabelled forget, retain]) in one shuffled loader."""
    x_f, y_f, x_r, y_r = data
    x, y = torch.cat([x_f, x_r]), torch.cat([draw_labels(y_f, relabel, g), y_r])
    for batch in chunks(torch.randperm(len(y), generator=g), BATCH):
        rl.step(x[batch], y[batch])


def run_both(digits, order: str, relabel: str, weight_decay: float) -> tuple[dict, dict]:
    """One epoch of unlearnbench's SalUn and of the reference loop from the same M_o, mask and seeded stream."""
    task, load = make_task(digits, FullClass("full_class"), "3", small_model)
    data = forget_and_retain(task)
    assert all(len(y) % BATCH != 1 for y in data[1::2])  # no single-sample last batch (unlearnbench drops it)
    generator = torch.Generator()
    generator.set_state(task.rng.torch.get_state())
    reference = load()
    rl = ReferenceRL(reference, reference_mask(load(), data[0], data[1], 0.5), 0.01, weight_decay)
    reference.train()
    (reference_passes_epoch if order == "passes" else reference_mixed_epoch)(rl, data, relabel, generator)
    method = SalUn("salun", epochs=1, lr=0.01, momentum=0.9, weight_decay=weight_decay, batch_size=BATCH,
                   mask_fraction=0.5, order=order, relabel=relabel)
    ours = method.unlearn(load(), task)
    return ours.state_dict(), reference.state_dict()


@pytest.mark.parametrize("order", ["passes", "mixed"])
@pytest.mark.parametrize("relabel", ["any", "other"])
def test_one_salun_epoch_is_the_reference_loop_bit_for_bit_without_weight_decay(digits, order, relabel):
    ours, theirs = run_both(digits, order, relabel, weight_decay=0.0)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # weights and batch-norm running statistics
    initial = small_model().state_dict()  # M_o: make_task's original is this initialisation
    assert not all(torch.equal(ours[k], initial[k]) for k in ("0.weight", "1.weight", "4.weight"))  # it trained


@pytest.mark.parametrize("order", ["passes", "mixed"])
def test_one_salun_epoch_with_weight_decay_matches_the_restoring_reference(digits, order):
    """Weight decay in the masked loss equals SGD's decay followed by RL.py's restore, up to rounding."""
    ours, theirs = run_both(digits, order, "other", weight_decay=5e-4)
    for key in ours:
        assert torch.allclose(ours[key].float(), theirs[key].float(), rtol=1e-5, atol=1e-7), key
