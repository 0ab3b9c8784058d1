"""Every training, unlearning and evaluation loop of every task is a safe point for Ctrl-C (runtime/interrupt.py):
with an interrupt asked for, none of them takes a single step (a forward pass, a client's local training) before it
raises `Interrupted`. Each registered method of each task is found from conf/method/, so a new method whose loop
does not go through `interrupt.checked` fails here. (The processes that stop and exit 130: test_interrupts.py.)"""

from __future__ import annotations

import signal
from contextlib import contextmanager, suppress
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import REPO, make_task, method_configs
from omegaconf import OmegaConf
from tiny import stub_federation, tiny_setting

from unlearnbench.core.components import build, target_of
from unlearnbench.core.relearn import RelearnSettings
from unlearnbench.runtime import interrupt
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass
from unlearnbench.tasks.image.evaluate import predict
from unlearnbench.tasks.image.models.resnet import ResNet18
from unlearnbench.tasks.image.train import train_recipe
from unlearnbench.tasks.ranking import pdgd
from unlearnbench.tasks.text.benchmarks.tofu import TextEvaluator
from unlearnbench.tasks.text.methods.base import TextTask
from unlearnbench.tasks.text.model.train import fine_tune
from unlearnbench.tasks.text.relearn import TextRelearning


def methods_of(task: str) -> list[str]:
    """The names of every registered method of `task`, from each YAML's `_target_` (collection runs in every test
    worker: composing every method config there would cost each of them seconds)."""
    return [path.stem for path in sorted((REPO / "conf" / "method").glob("*.yaml"))
            if target_of(OmegaConf.load(path), "method").task == task]


def method(name: str):
    return build(method_configs()[name], "method")


@contextmanager
def forward_passes():
    """A count of every module's forward passes while the block runs (`calls[0]`)."""
    calls = [0]

    def count(module, inputs):
        calls[0] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        yield calls
    finally:
        handle.remove()


@pytest.fixture
def requested(monkeypatch):
    """Ctrl-C asked for (the handler has recorded it; the next safe point raises)."""
    monkeypatch.setattr(interrupt, "requested", signal.SIGINT)


def assert_stops_before_a_step(run) -> None:
    """`run()` raises `Interrupted` before any forward pass, or needs none at all (a method that returns a stored
    model takes no step to stop)."""
    with forward_passes() as calls, suppress(interrupt.Interrupted):
        run()
    assert calls[0] == 0


def test_checked_is_a_safe_point_before_every_item(monkeypatch):
    seen = []
    with pytest.raises(interrupt.Interrupted, match="SIGTERM"):
        for item in interrupt.checked(range(5)):
            seen.append(item)
            if item == 2:
                monkeypatch.setattr(interrupt, "requested", signal.SIGTERM)
    assert seen == [0, 1, 2]  # the loop that asked never reached item 3


# ------------------------------------------------------------------ images


@pytest.fixture(scope="module")
def digits():
    return Digits(name="digits", mean=[0.3053], std=[0.3759], targets={"full_class": ["3"]}).load()


def image_task(digits):
    return make_task(digits, FullClass(name="full_class"), "3", lambda: ResNet18(10, 1, width=8))


@pytest.mark.parametrize("name", (methods_of("image")))
def test_every_image_method_stops_before_its_first_step(digits, requested, name):
    task, load = image_task(digits)
    assert_stops_before_a_step(lambda: method(name).unlearn(load(), task))


def test_image_training_and_evaluation_stop_before_their_first_batch(digits, requested):
    task, load = image_task(digits)
    recipe = SimpleNamespace(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=64, epochs=2,
                             warmup_epochs=0, milestones=[], gamma=1.0, schedule="step",
                             augment=SimpleNamespace(crop_padding=0, flip=False, rotation=0))
    assert_stops_before_a_step(lambda: train_recipe(task.fabric, load(), task.splits.retain_train, recipe,
                                                    task.normalizer, torch.Generator()))
    assert_stops_before_a_step(lambda: predict(task.fabric, load(), task.splits.forget_train, 64, task.normalizer))


# ------------------------------------------------------------------ text


@pytest.fixture(scope="module")
def text():
    return tiny_setting()


def text_task(text, name: str) -> TextTask:
    fabric, encoder, splits, forget, retain, _, reference, _, _ = text
    recipe = SimpleNamespace(epochs=2, batch_size=4, lr=1e-3, weight_decay=0.01, warmup_epochs=1.0)
    return TextTask(fabric, encoder, splits, forget, retain, streams("method", 0, name), recipe,
                    original=lambda: reference, retrained=reference, retrained_cost=Cost())


@pytest.mark.parametrize("name", (methods_of("text")))
def test_every_text_method_stops_before_its_first_step(text, requested, name):
    model = text[5]
    assert_stops_before_a_step(lambda: method(name).unlearn(model, text_task(text, name)))


def test_text_fine_tuning_evaluation_and_relearning_stop_before_their_first_batch(text, requested):
    fabric, encoder, splits, forget, retain, model, _, _, _ = text
    recipe = text_task(text, "fine_tune").recipe
    assert_stops_before_a_step(lambda: fine_tune(fabric, model, retain, recipe, torch.Generator()))
    evaluator = TextEvaluator(fabric, encoder, splits, 4, max_new_tokens=8)
    assert_stops_before_a_step(lambda: evaluator.outputs(model))
    relearning = TextRelearning(fabric, lambda records: forget, splits.forget, RelearnSettings(None, 4, 1, 1e-3, 4),
                                0.01, 0, "t", 4, lambda m: m)
    assert_stops_before_a_step(lambda: relearning.original(model))


def test_generation_stops_within_one_token_of_an_interrupt(text, monkeypatch):
    """A generation of 32 new tokens, with Ctrl-C arriving during its first forward pass: one pass, then it stops
    (without the per-token safe point it would take all 32)."""
    fabric, encoder, splits, _, _, model, _, _, _ = text
    evaluator = TextEvaluator(fabric, encoder, splits, 4, max_new_tokens=32)
    prompts = [encoder.prompt(splits.forget[0]["question"])]
    passes = []

    def interrupt_on_first(module, inputs):
        if module is model:
            passes.append(1)
            monkeypatch.setattr(interrupt, "requested", signal.SIGINT)

    handle = model.register_forward_pre_hook(interrupt_on_first)
    try:
        with pytest.raises(interrupt.Interrupted):
            evaluator.generate(model, prompts)
    finally:
        handle.remove()
    assert len(passes) == 1


# ------------------------------------------------------------------ ranking


@pytest.mark.parametrize("name", (methods_of("ranking")))
def test_every_ranking_method_stops_before_its_first_round(requested, name):
    trained, task = stub_federation()
    local_trainings = []
    simulator = task.simulator
    original = simulator.local_models
    simulator.local_models = lambda *args, **kwargs: local_trainings.append(1) or original(*args, **kwargs)
    with suppress(interrupt.Interrupted):
        method(name).unlearn(trained, task)
    assert local_trainings == []


def test_ranking_evaluation_stops_before_its_first_chunk(requested):
    labels = np.array([[2, 0, 1], [1, 0, 0]])
    ndcg = pdgd.Ndcg(np.ones((2, 3, 2)), labels)
    with pytest.raises(interrupt.Interrupted):
        ndcg.curve(np.ones((3, 2)))
