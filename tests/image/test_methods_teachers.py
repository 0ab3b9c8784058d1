"""Bad Teacher, Random Labels and UNSIR as the SSD authors' code runs them (github
if-loops/selective-synaptic-dampening): their data, targets and noise checked directly, their seeding, UNSIR's fixed
reference defects and its refusal of the random-sample scenario (the losses against the reference:
test_oracle_teachers.py; whole jobs of every method: test_methods_all.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from fabricate import write_cifar100
from helpers import compose_config, make_task
from lightning_fabric import Fabric

from unlearnbench.core.plan import plan_job
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.data.cifar import Cifar100
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, SubClass
from unlearnbench.tasks.image.methods.bad_teacher import BadTeacher, teacher_targets
from unlearnbench.tasks.image.methods.random_labels import RandomLabels, relabelled
from unlearnbench.tasks.image.methods.unsir import NoisyBatches, Unsir, optimise_noise, retain_sample
from unlearnbench.tasks.image.models.resnet import ResNet18

CIFAR_MEAN, CIFAR_STD = [0.5071, 0.4865, 0.4409], [0.2673, 0.2564, 0.2762]
# Width 8, not 4: a width-4 ResNet18 on digits with one CPU thread intermittently corrupted the heap in PyTorch 2.14.
WIDTH = 8
# Cheap settings where a test is about seeding or plumbing, not about the reference's amount of work.
QUICK = {"bad_teacher": {}, "random_labels": {"epochs": 1},
         "unsir": {"noise_steps": 3, "noise_copies": 2, "retain_per_class": 20}}
CLASSES = {"bad_teacher": BadTeacher, "random_labels": RandomLabels, "unsir": Unsir}


@pytest.fixture(autouse=True)
def one_thread():
    """One CPU thread (as the jobs' `runtime.threads=1`): fast on a shared 2-core machine, and bit-reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def digits():
    return Digits(name="digits", mean=[0.3053], std=[0.3759], targets={"full_class": ["3"]}).load()


@pytest.fixture(scope="module")
def cifar20(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar100")
    write_cifar100(root, n_train=300, n_test=40)
    return Cifar100(name="cifar20", coarse=True, mean=CIFAR_MEAN, std=CIFAR_STD, root=str(root),
                    targets={"sub_class": ["rocket"]}).load()


def digits_task(data, seed: int = 0):
    return make_task(data, FullClass(name="full_class"), "3", lambda: ResNet18(10, 1, width=WIDTH), seed=seed)


def cifar20_task(data, seed: int = 0):
    return make_task(data, SubClass(name="sub_class"), "rocket", lambda: ResNet18(20, 3, width=WIDTH), seed=seed)


def with_seed(task, seed: int):
    """The same task with the method streams of another unlearning seed."""
    return replace(task, rng=streams("method", seed, "test", task.target))


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- Random Labels --------------------------------------------------------------------------------------------------

def test_random_labels_full_class_never_assigns_the_forgotten_class_and_every_other_one(digits):
    task, _ = digits_task(digits)
    subset, labels = relabelled(task)
    forget, retain = task.splits.forget_train, task.splits.retain_train
    assert torch.equal(subset.indices, torch.cat([forget.indices, retain.indices]))
    new = labels[:len(forget)]
    assert len(forget) > 100 and not (new == 3).any()
    assert set(new.tolist()) == set(range(10)) - {3}
    assert torch.equal(labels[len(forget):], retain.labels[retain.indices])  # D_r keeps its labels


def test_random_labels_sub_class_never_assigns_the_forgotten_super_class(cifar20):
    task, _ = cifar20_task(cifar20)
    forgotten = task.forget_label
    assert cifar20.classes[forgotten] == "vehicles_2"
    drawn = torch.cat([relabelled(with_seed(task, seed))[1][:len(task.splits.forget_train)] for seed in range(200)])
    assert len(drawn) >= 400 and not (drawn == forgotten).any()
    assert set(drawn.tolist()) == set(range(20)) - {forgotten}


def test_random_labels_relabelling_follows_the_unlearning_seed(digits):
    task, _ = digits_task(digits)
    first, second, other = (relabelled(with_seed(task, s))[1] for s in (5, 5, 6))
    assert torch.equal(first, second) and not torch.equal(first, other)


# --- Bad Teacher ----------------------------------------------------------------------------------------------------

def test_bad_teacher_targets_are_the_random_teachers_on_forget_and_the_originals_on_retain(digits):
    task, load = digits_task(digits)
    competent, incompetent = load().eval(), task.random_model(torch.Generator().manual_seed(1)).eval()
    forget, retain = task.splits.forget_train, task.splits.retain_train
    subset = forget.with_indices(torch.cat([forget.indices[:5], retain.indices[:5]]))
    flags = torch.tensor([1.0] * 5 + [0.0] * 5)
    inputs, _ = next(iter(task.batches(subset, 10, shuffle=False)))
    with torch.no_grad():
        good, bad = competent(inputs), incompetent(inputs)
    for temperature in (1.0, 2.0):
        targets = teacher_targets(flags, good, bad, temperature)
        torch.testing.assert_close(targets[:5], F.softmax(bad[:5] / temperature, dim=1))
        torch.testing.assert_close(targets[5:], F.softmax(good[5:] / temperature, dim=1))
        torch.testing.assert_close(targets.sum(1), torch.ones(10))
    assert not torch.allclose(F.softmax(good, 1), F.softmax(bad, 1), atol=1e-3)  # the two teachers differ


def test_bad_teacher_data_is_the_forget_set_and_floor_of_30_percent_of_the_retain_set(digits):
    task, _ = digits_task(digits)
    forget, retain = task.splits.forget_train, task.splits.retain_train
    method = BadTeacher("bad_teacher")
    subset, flags = method.unlearning_data(task)
    count = int(0.3 * len(retain))  # floor, as the reference's int(0.3 * len)
    assert len(subset) == len(forget) + count and flags.sum() == len(forget)
    assert torch.equal(subset.indices[:len(forget)], forget.indices) and (flags[:len(forget)] == 1).all()
    chosen = subset.indices[len(forget):]
    assert (flags[len(forget):] == 0).all() and len(set(chosen.tolist())) == count
    assert set(chosen.tolist()) <= set(retain.indices.tolist())
    same = method.unlearning_data(digits_task(digits)[0])[0].indices
    other = method.unlearning_data(with_seed(task, 1))[0].indices
    assert torch.equal(same, subset.indices) and not torch.equal(other, subset.indices)


# --- UNSIR ----------------------------------------------------------------------------------------------------------

def test_unsir_noise_leaves_the_model_alone_and_maximises_the_error(digits):
    task, load = digits_task(digits)
    model = load()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, optimizer = task.fabric.setup(model, optimizer)
    model.train()
    before = weights(model)
    noise = Unsir("unsir").initial_noise(task)
    assert noise.shape == (32, 1, 8, 8)
    optimised, losses = optimise_noise(task.fabric, model, noise, task.forget_label, 25, 0.1, 0.1)
    after = weights(model)
    assert before.keys() == after.keys() and any("running_mean" in k for k in after)
    assert all(torch.equal(before[k], after[k]) for k in before)  # running statistics included
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    assert model.training  # the mode is restored
    assert len(losses) == 25 and losses[-1] < losses[0]
    assert not torch.allclose(optimised, noise)
    with torch.no_grad():
        model.eval()
        error = F.cross_entropy(model(optimised), torch.full((32,), task.forget_label))
        start = F.cross_entropy(model(noise), torch.full((32,), task.forget_label))
    assert error > start  # the optimised noise is error-maximising for the forgotten class


@pytest.mark.parametrize("copies", [1, 80])
def test_unsir_impair_epoch_uses_every_noise_image(digits, copies):
    task, _ = digits_task(digits)
    retain = retain_sample(task, 500)
    noise = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(0)) + 100  # unlike any real image
    batches = NoisyBatches(task.fabric, noise, 3, copies, retain, 32, task.normalizer, task.rng.torch)
    seen, per_batch, retain_seen = torch.zeros(32, dtype=torch.long), [], 0
    for inputs, labels in batches:
        is_noise = inputs.flatten(1).min(1).values > 50
        matches = (inputs[is_noise].flatten(1)[:, None] == noise.flatten(1)[None]).all(2)
        assert (matches.sum(1) == 1).all() and (labels[is_noise] == 3).all()
        seen += matches.sum(0)
        per_batch.append(matches.any(0))
        retain_seen += int((~is_noise).sum())
    assert len(per_batch) == len(batches)
    assert (seen == copies).all() and retain_seen == len(retain)
    if copies == 1:
        assert (torch.stack(per_batch).sum(0) == 1).all()  # each noise image in exactly one batch


def test_unsir_retain_sample_full_class_is_the_first_samples_of_every_other_class(digits):
    task, _ = digits_task(digits)
    sample = retain_sample(task, 5)
    labels = digits.train_labels
    expected = torch.cat([torch.nonzero(labels == c).flatten()[:5] for c in range(10) if c != 3])
    assert torch.equal(sample.indices, expected)
    assert set(retain_sample(task, 500).indices.tolist()) == set(task.splits.retain_train.indices.tolist())


def test_unsir_retain_sample_sub_class_is_per_sub_class_as_the_reference(cifar20):
    task, _ = cifar20_task(cifar20)
    groups, names = cifar20.train_groups, cifar20.group_names
    sample = retain_sample(task, 1)
    sample_groups = groups[sample.indices]
    present = set(groups.tolist()) - {names.index("rocket")}
    assert sorted(sample_groups.tolist()) == sorted(present)  # one per other sub-class, rocket's siblings included
    assert {names.index("tractor"), names.index("streetcar")} <= set(sample_groups.tolist())
    for index in sample.indices.tolist():
        assert index == int(torch.nonzero(groups == groups[index])[0])  # the first one in dataset order
    assert set(retain_sample(task, 500).indices.tolist()) == set(task.splits.retain_train.indices.tolist())


def test_unsir_serves_targeted_scenarios_only(tmp_path):
    method = Unsir("unsir")
    assert method.serves(FullClass(name="full_class")) and method.serves(SubClass(name="sub_class"))
    assert not method.serves(RandomSample(name="random_sample"))
    cfg = compose_config(["+method=unsir", "scenario=random_sample", f"paths.data_dir={tmp_path / 'data'}",
                          f"paths.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(UserError, match="unsir does not serve scenario random_sample"):
        plan_job(cfg, tmp_path)


def test_unsir_config_has_the_reference_noise_steps_per_scenario():
    method = compose_config(["+method=unsir"]).method
    assert dict(method.noise_steps) == {"full_class": 25, "sub_class": 250}
    assert method.noise_images == 32 and method.noise_copies == 80


# --- every method: sub-class, seeding ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bad_teacher", "random_labels", "unsir"])
def test_method_runs_sub_class_on_cifar20(cifar20, name):
    task, load = cifar20_task(cifar20)
    model = CLASSES[name](name, **QUICK[name]).unlearn(load(), task)
    with torch.no_grad():
        logits = model.eval()(torch.randn(4, 3, 32, 32))
    assert logits.shape == (4, 20) and torch.isfinite(logits).all()
    after, before = weights(model), weights(load())
    assert after.keys() == before.keys() and any(not torch.equal(after[k], before[k]) for k in after)


@pytest.mark.parametrize("name", ["bad_teacher", "random_labels", "unsir"])
def test_method_is_reproducible_from_the_unlearning_seed(digits, name):
    def unlearned(seed: int) -> dict[str, torch.Tensor]:
        task, load = digits_task(digits, seed)
        return weights(CLASSES[name](name, **QUICK[name]).unlearn(load(), task))

    first, second, other = unlearned(0), unlearned(0), unlearned(1)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize("name", ["bad_teacher", "random_labels", "unsir"])
def test_method_refuses_a_float16_model_rather_than_turning_it_into_nan(digits, name):
    task, load = make_task(digits, FullClass(name="full_class"), "3", lambda: ResNet18(10, 1, width=WIDTH),
                           fabric=Fabric(accelerator="cpu", devices=1, precision="16-true"))
    with pytest.raises(UserError, match=r"Adam.*float16.*bf16-true"):
        CLASSES[name](name).unlearn(load(), task)
