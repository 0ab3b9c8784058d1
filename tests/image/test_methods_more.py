"""Gradient ascent, NegGrad+, SCRUB, SalUn and l1-sparse: they run in every scenario, and each does what makes it
that method (what they achieve in a job: test_outcomes.py)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fabricate import write_cifar100
from helpers import compose_config, make_task
from omegaconf import OmegaConf
from torch import nn

from unlearnbench.core.components import SEARCH_SPACE, build
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import global_seed
from unlearnbench.tasks.image.data.base import full_pool
from unlearnbench.tasks.image.data.cifar import Cifar100
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass, SubClass
from unlearnbench.tasks.image.methods import l1_sparse, neggrad_plus
from unlearnbench.tasks.image.methods.base import setting
from unlearnbench.tasks.image.methods.l1_sparse import l1_norm, l1_weight
from unlearnbench.tasks.image.methods.neggrad_plus import neggrad_loss
from unlearnbench.tasks.image.methods.salun import MaskedTrainer, saliency_mask, top_fraction
from unlearnbench.tasks.image.methods.scrub import Scrub, distill_kl
from unlearnbench.tasks.image.models.resnet import ResNet18
from unlearnbench.tasks.image.train import Batches

METHODS = ["gradient_ascent", "neggrad_plus", "scrub", "salun", "l1_sparse"]


def method(name: str, **options):
    """The method as its YAML builds it, with `options` replacing config values."""
    config = OmegaConf.to_container(compose_config([f"+method={name}"]).method, resolve=True)
    return build({**config, **options}, "method")


# --- whole jobs --------------------------------------------------------------------------------------------------


def test_each_method_runs_sub_class_on_cifar20(tmp_path):
    write_cifar100(tmp_path)
    data = Cifar100(name="cifar20", coarse=True, mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], root=str(tmp_path),
                    targets={"sub_class": ["rocket"]}).load()
    task, load = make_task(data, SubClass("sub_class"), "rocket", lambda: ResNet18(num_classes=20, width=8))
    original = load().state_dict()
    for name in METHODS:
        unlearned = method(name, epochs=1).unlearn(load(), task)
        state = unlearned.state_dict()
        assert all(torch.isfinite(v).all() for v in state.values()), name
        assert any(not torch.equal(v, original[k]) for k, v in state.items()), name


# --- unit level, on digits with a briefly trained original model ---------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return Digits(name="digits", mean=[0.3053], std=[0.3759]).load()


@pytest.fixture(scope="module")
def trained(digits):
    """The state of a narrow ResNet18 trained for two epochs on all of digits: an original model that knows class 3."""
    with global_seed(0):
        model = ResNet18(num_classes=10, in_channels=1, width=8)
    task, _ = make_task(digits, FullClass("full_class"), "3", lambda: model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = task.batches(full_pool(digits, "train"), 64)
    model.train()
    for _ in range(2):
        for inputs, labels in batches:
            optimizer.zero_grad()
            F.cross_entropy(model(inputs), labels).backward()
            optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def digits_task(digits, trained, seed: int = 0):
    def factory():
        model = ResNet18(num_classes=10, in_channels=1, width=8)
        model.load_state_dict(trained)
        return model

    return make_task(digits, FullClass("full_class"), "3", factory, seed=seed)


def forget_loss(model, task) -> float:
    model.eval()
    with torch.no_grad():
        inputs, labels = next(iter(task.batches(task.splits.forget_train, 10_000, shuffle=False)))
        return float(F.cross_entropy(model(inputs), labels))


def test_gradient_ascent_raises_the_forget_loss(digits, trained):
    task, load = digits_task(digits, trained)
    before = forget_loss(load(), task)
    after = forget_loss(method("gradient_ascent").unlearn(load(), task), task)
    assert after > before + 1


def test_neggrad_plus_loss_descends_on_retain_and_ascends_on_forget():
    with global_seed(0):
        model = ResNet18(num_classes=10, in_channels=1, width=8).eval()
        retain = torch.randn(6, 1, 8, 8), torch.randint(10, (6,))
        forget = torch.randn(4, 1, 8, 8), torch.randint(10, (4,))
    expected = 0.95 * F.cross_entropy(model(retain[0]), retain[1]) - 0.05 * F.cross_entropy(model(forget[0]),
                                                                                             forget[1])
    assert torch.allclose(neggrad_loss(model, retain, forget, 0.95), expected)
    assert torch.allclose(neggrad_loss(model, retain, None, 0.95), 0.95 * F.cross_entropy(model(retain[0]),
                                                                                          retain[1]))


def test_neggrad_plus_pairs_every_retain_batch_with_a_cycled_forget_batch(digits, trained, monkeypatch):
    calls = []

    def spy(model, retain, forget, alpha):
        calls.append((len(retain[1]), None if forget is None else len(forget[1]), alpha))
        return neggrad_loss(model, retain, forget, alpha)

    monkeypatch.setattr(neggrad_plus, "neggrad_loss", spy)
    task, load = digits_task(digits, trained)
    method("neggrad_plus", epochs=2).unlearn(load(), task)
    n_retain, n_forget = len(task.splits.retain_train), len(task.splits.forget_train)
    per_epoch = -(-n_retain // 256)
    assert len(calls) == 2 * per_epoch  # an epoch is one pass over D_r
    assert sum(r for r, _, _ in calls) == 2 * n_retain
    assert all(f == n_forget and a == 0.95 for _, f, a in calls)  # D_f (< 256 samples) comes back every step


def test_scrub_kl_is_the_tempered_kl_scaled_by_t_squared():
    with global_seed(0):
        student, teacher = torch.randn(5, 10), torch.randn(5, 10)
    p_teacher = F.softmax(teacher / 2, dim=1)
    kl = (p_teacher * (p_teacher.log() - F.log_softmax(student / 2, dim=1))).sum(1).mean()
    assert torch.allclose(distill_kl(student, teacher, 2.0), 4 * kl)
    assert torch.allclose(distill_kl(teacher, teacher, 2.0), torch.zeros(()), atol=1e-6)


def scrub_passes(digits, trained, monkeypatch, **options) -> tuple[list, object]:
    """The passes SCRUB runs (kind, set size, batch size, lr, optimiser class), with the passes themselves stubbed."""
    passes = []

    def spy(kind):
        def record(self, student, teacher, optimizer, batches, task):
            passes.append((kind, len(batches.subset), batches.batch_size, optimizer.param_groups[0]["lr"],
                           type(optimizer.optimizer).__name__))
        return record

    monkeypatch.setattr(Scrub, "max_pass", spy("max"))
    monkeypatch.setattr(Scrub, "min_pass", spy("min"))
    task, load = digits_task(digits, trained)
    method("scrub", **options).unlearn(load(), task)
    return passes, task


def test_scrub_on_digits_runs_the_small_scale_notebook_schedule(digits, trained, monkeypatch):
    passes, task = scrub_passes(digits, trained, monkeypatch)
    n_forget, n_retain = len(task.splits.forget_train), len(task.splits.retain_train)
    lr = [5e-4 * 0.1 ** sum(epoch > e for e in (5, 8, 9)) for epoch in range(1, 11)]  # decay after 5, 8, 9
    expected = []
    for epoch in range(1, 11):  # Adam; max passes in epochs 1-3 (batch 64), a min pass (batch 32) in all 10
        expected += [("max", n_forget, 64, lr[epoch - 1], "Adam")] * (epoch <= 3)
        expected += [("min", n_retain, 32, lr[epoch - 1], "Adam")]
    assert passes == expected


def test_scrub_max_steps_only_in_the_first_msteps_epochs(digits, trained, monkeypatch):
    passes, task = scrub_passes(digits, trained, monkeypatch, optimizer="sgd", epochs=5, msteps=3,
                                lr_decay_epochs=[3, 5, 9], batch_size=256, forget_batch_size=512)
    n_forget, n_retain = len(task.splits.forget_train), len(task.splits.retain_train)
    high, low = 5e-4, 5e-4 * 0.1
    assert passes == [("max", n_forget, 512, high, "SGD"), ("min", n_retain, 256, high, "SGD")] * 3 + \
        [("min", n_retain, 256, low, "SGD")] * 2


def resolved(name: str, dataset: str) -> dict:
    """The method's YAML options as `setting` resolves them for a dataset (model resnet18, full-class)."""
    config = OmegaConf.to_container(compose_config([f"+method={name}"]).method, resolve=True)
    task = SimpleNamespace(model_name="resnet18", data=SimpleNamespace(name=dataset),
                           scenario=SimpleNamespace(name="full_class"))
    return {k: setting(v, task) for k, v in config.items() if k not in ("_target_", "name", SEARCH_SPACE)}


def test_scrub_defaults_are_the_large_scale_notebook_and_the_small_scale_one_on_digits():
    assert resolved("scrub", "cifar10") == {
        "optimizer": "sgd", "epochs": 3, "msteps": 2, "lr": 5e-4, "momentum": 0.9, "weight_decay": 5e-4,
        "temperature": 4, "gamma": 0.99, "alpha": 0.001, "batch_size": 256, "forget_batch_size": 512,
        "lr_decay_epochs": [3, 5, 9], "lr_decay_rate": 0.1}
    assert resolved("scrub", "digits") == {
        "optimizer": "adam", "epochs": 10, "msteps": 3, "lr": 5e-4, "momentum": 0.9, "weight_decay": 0.1,
        "temperature": 2, "gamma": 1.0, "alpha": 0.5, "batch_size": 32, "forget_batch_size": 64,
        "lr_decay_epochs": [5, 8, 9], "lr_decay_rate": 0.1}


def test_scrub_with_adam_refuses_a_float16_model(digits, trained):
    task, load = digits_task(digits, trained)
    with pytest.raises(UserError, match="float16"):
        method("scrub", optimizer="adam").unlearn(load().half(), task)


def test_scrub_max_pass_ascends_the_kl_to_the_teacher_on_the_forget_set(digits):
    def small_model():  # no batch norm: only the parameters, not running statistics, move the student
        with global_seed(0):
            return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(512, 10))

    task, load = make_task(digits, FullClass("full_class"), "3", small_model)
    teacher, student = task.fabric.setup_module(load()).eval(), load()
    with torch.no_grad():  # KL(teacher ‖ student) has zero gradient where the student equals the teacher
        for p in student.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    student, optimizer = task.fabric.setup(student, torch.optim.SGD(student.parameters(), lr=0.05))

    def kl() -> float:
        with torch.no_grad():
            inputs, _ = next(iter(task.batches(task.splits.forget_train, 10_000, shuffle=False)))
            return float(distill_kl(student(inputs), teacher(inputs), 2.0))

    before = kl()
    method("scrub").max_pass(student, teacher, optimizer, task.batches(task.splits.forget_train, 64), task)
    assert kl() > 2 * before


def test_salun_mask_ranks_all_parameters_together():
    values = [torch.tensor([1.0, -5.0]), torch.tensor([[3.0, 0.5], [-2.0, 4.0]])]
    masks = top_fraction(values, 0.5)
    assert [m.tolist() for m in masks] == [[False, True], [[True, False], [False, True]]]


def test_salun_mask_keeps_the_top_half_of_summed_forget_gradients(digits, trained):
    task, load = digits_task(digits, trained)
    batches = task.batches(task.splits.forget_train, 64, shuffle=False)  # several batches, summed
    model = load().eval()
    total = [torch.zeros_like(p) for p in model.parameters()]
    for inputs, labels in batches:
        model.zero_grad()
        (-F.cross_entropy(model(inputs), labels)).backward()
        for t, p in zip(total, model.parameters(), strict=True):
            t += p.grad
    magnitude = torch.cat([t.abs().flatten() for t in total])
    mask = saliency_mask(task.fabric, task.fabric.setup_module(load()), batches, 0.5)
    kept = torch.cat([m.flatten() for m in mask])
    assert int(kept.sum()) == magnitude.numel() // 2
    assert magnitude[kept].min() >= magnitude[~kept].max()
    share = [float(m.float().mean()) for m in mask]
    assert max(share) > 0.75 and min(share) < 0.25  # one ranking over all layers, not half of every layer


def test_salun_trains_only_the_salient_weights(digits, trained):
    task, load = digits_task(digits, trained)
    forget = task.batches(task.splits.forget_train, 256, shuffle=False)
    mask = saliency_mask(task.fabric, task.fabric.setup_module(load()), forget, 0.5)
    before = list(load().parameters())
    after = list(method("salun", epochs=2).unlearn(load(), task).parameters())
    changed = 0
    for b, a, m in zip(before, after, mask, strict=True):
        assert torch.equal(a.detach()[~m], b.detach()[~m])
        changed += int((a.detach() != b.detach())[m].sum())
    assert changed > 0.5 * sum(int(m.sum()) for m in mask)


def salun_steps(digits, trained, monkeypatch, **options) -> tuple[list, object]:
    """Every optimiser step SalUn takes, as (training indices of its batch, its labels); the steps are stubbed."""
    steps, batch = [], {}
    original_indexed = Batches.indexed

    def indexed(self):
        for inputs, labels, where in original_indexed(self):
            batch["indices"] = self.subset.indices[where]
            yield inputs, labels, where

    def step(self, inputs, labels):
        steps.append((batch["indices"], labels.clone()))

    monkeypatch.setattr(Batches, "indexed", indexed)
    monkeypatch.setattr(MaskedTrainer, "step", step)
    task, load = digits_task(digits, trained)
    method("salun", **options).unlearn(load(), task)
    return steps, task


def test_salun_passes_visit_the_relabelled_forget_set_then_the_retain_set_each_epoch(digits, trained, monkeypatch):
    steps, task = salun_steps(digits, trained, monkeypatch, epochs=2, batch_size=64, mask_fraction=0.5)
    forget, retain = task.splits.forget_train, task.splits.retain_train
    true = forget.labels  # the dataset's labels, by training index
    n_forget_steps = -(-len(forget) // 64)
    per_epoch = n_forget_steps + -(-len(retain) // 64)
    assert len(steps) == 2 * per_epoch
    drawn = []
    for epoch in (steps[:per_epoch], steps[per_epoch:]):
        forget_part, retain_part = epoch[:n_forget_steps], epoch[n_forget_steps:]
        seen, new = torch.cat([i for i, _ in forget_part]), torch.cat([y for _, y in forget_part])
        assert sorted(seen.tolist()) == sorted(forget.indices.tolist())  # D_f once, first
        assert not (new == true[seen]).any()  # never the own label (relabel: other)
        drawn.append(dict(zip(seen.tolist(), new.tolist(), strict=True)))
        seen = torch.cat([i for i, _ in retain_part])
        assert sorted(seen.tolist()) == sorted(retain.indices.tolist())  # then D_r once, with its own labels
        assert all(torch.equal(y, true[i]) for i, y in retain_part)
    assert drawn[0] != drawn[1]  # labels redrawn every epoch


def test_salun_mixed_order_runs_one_stream_and_may_keep_the_own_label_with_relabel_any(digits, trained,
                                                                                        monkeypatch):
    steps, task = salun_steps(digits, trained, monkeypatch, epochs=1, batch_size=64, order="mixed",
                              relabel="any")
    forget, retain = task.splits.forget_train, task.splits.retain_train
    seen, labels = torch.cat([i for i, _ in steps]), torch.cat([y for _, y in steps])
    assert sorted(seen.tolist()) == sorted(torch.cat([forget.indices, retain.indices]).tolist())
    is_forget = torch.isin(seen, forget.indices)
    assert not is_forget[: len(forget)].all()  # one shuffled stream: D_f is not visited first
    own = labels[is_forget] == forget.labels[seen[is_forget]]
    assert 0 < int(own.sum()) < len(forget)  # drawn among all classes: about 1 in 10 keeps its label
    assert torch.equal(labels[~is_forget], retain.labels[seen[~is_forget]])


def test_salun_order_defaults_follow_the_reference_branch_by_dataset():
    assert resolved("salun", "cifar10")["order"] == "passes" and resolved("salun", "digits")["order"] == "passes"
    assert resolved("salun", "cifar100")["order"] == "mixed" and resolved("salun", "cifar20")["order"] == "mixed"
    assert resolved("salun", "cifar10")["relabel"] == "other"


@pytest.mark.parametrize(("name", "option", "value"), [("salun", "order", "interleaved"),
                                                       ("salun", "relabel", "own"), ("scrub", "optimizer", "rmsp")])
def test_choice_options_outside_their_choices_are_refused(name, option, value):
    with pytest.raises(UserError, match=f"method.{option}='{value}' is not valid; valid: one of"):
        method(name, **{option: value})


def test_l1_weight_decays_linearly_from_alpha_to_zero():
    weights = [l1_weight(1e-4, epoch, 10) for epoch in range(11)]
    assert weights[0] == 1e-4 and weights[10] == 0
    assert all(abs((a - b) - 1e-5) < 1e-15 for a, b in itertools.pairwise(weights))


def test_l1_sparse_adds_the_decaying_l1_norm_to_cross_entropy(digits, trained, monkeypatch):
    seen = {}

    def spy(fabric, model, optimizer, batches, epochs, scheduler=None, regulariser=None):
        seen.update(model=model, batches=batches, epochs=epochs, regulariser=regulariser)
        return 0.0

    monkeypatch.setattr(l1_sparse, "cross_entropy_epochs", spy)  # the loop adds regulariser(step) to the CE
    task, load = digits_task(digits, trained)
    method("l1_sparse").unlearn(load(), task)
    steps, norm = len(seen["batches"]), sum(p.abs().sum() for p in seen["model"].parameters())
    assert seen["epochs"] == 10 and seen["batches"].subset is task.splits.retain_train
    for step in (0, steps - 1, steps, 4 * steps + 2, 10 * steps - 1):
        expected = 1e-4 * (1 - (step // steps) / 10) * norm
        assert torch.allclose(seen["regulariser"](step), expected)


def test_l1_sparse_shrinks_the_weights_more_than_plain_fine_tuning(digits, trained):
    task, load = digits_task(digits, trained)
    plain = method("l1_sparse", alpha=0.0, epochs=2).unlearn(load(), task)
    sparse = method("l1_sparse", alpha=1e-2, epochs=2).unlearn(load(), task)
    assert l1_norm(list(sparse.parameters())) < 0.9 * l1_norm(list(plain.parameters()))


@pytest.mark.parametrize("name", ["salun", "neggrad_plus"])
def test_same_unlearning_seed_same_model_other_seed_other_model(digits, trained, name):
    def unlearned(seed):
        task, load = digits_task(digits, trained, seed=seed)
        return method(name, epochs=1).unlearn(load(), task).state_dict()

    first, again, other = unlearned(0), unlearned(0), unlearned(1)
    assert all(torch.equal(v, again[k]) for k, v in first.items())
    assert not all(torch.equal(v, other[k]) for k, v in first.items())
