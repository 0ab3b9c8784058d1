"""What a text job needs of a strategy that shards the model (FSDP, DeepSpeed), checked on the CPU where those
strategies cannot run: generation goes through the strategy's wrapper, inside which FSDP gathers the weights;
under DeepSpeed the engine clips the gradients and each backward names the model it trains."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import DeepSpeedStrategy, FSDPStrategy
from lightning_fabric.wrappers import _FabricModule
from torch import nn

from unlearnbench.runtime.train import NonFiniteStep
from unlearnbench.tasks.text.bench import shards_weights
from unlearnbench.tasks.text.benchmarks.tofu import TextEvaluator
from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.model.causal_lm import CausalLM, tiny_llama
from unlearnbench.tasks.text.model.train import MAX_GRAD_NORM, adamw, step
from unlearnbench.tasks.text.scenario import ForgetEntities


class Gathering(nn.Module):
    """A stand-in for FSDP's wrapper: the inner model's weights may only be used inside its `forward`."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.inside, self.calls = inner, False, 0
        inner.get_input_embeddings().register_forward_pre_hook(self.check)

    def check(self, module, inputs) -> None:
        assert self.inside, "the weights were used outside the strategy's wrapper (FSDP: still sharded)"

    def forward(self, *args, **kwargs):
        self.inside, self.calls = True, self.calls + 1
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.inside = False


def test_generation_runs_inside_the_strategy_wrapper_and_gives_the_same_text():
    data = fictitious(entities=4, holdout_entities=1, general=2, seed=5)
    lm = CausalLM(hidden=16, heads=2, max_new_tokens=6)
    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    fabric = Fabric(accelerator="cpu", devices=1)
    evaluator = TextEvaluator(fabric, lm.encoder(tokenizer), splits, 4, 6)
    model = tiny_llama(len(tokenizer), 1, hidden=16, heads=2).eval()
    prompts = evaluator.items["retain"].prompts
    plain = evaluator.generate(model, prompts)
    wrapper = Gathering(model)
    sharded = _FabricModule(wrapper, fabric.strategy, original_module=model)
    assert evaluator.generate(sharded, prompts) == plain and any(plain)
    assert wrapper.calls == -(-len(prompts) // 4)  # one wrapped call per batch: generate ran inside it
    with pytest.raises(AssertionError, match="outside the strategy's wrapper"):
        model.generate(input_ids=torch.tensor([prompts[0]]), max_new_tokens=2, pad_token_id=tokenizer.pad_token_id)


class EngineFabric:
    """What `text.train` uses of a Fabric under DeepSpeed: its strategy's config, setup, backward, the world size
    (one process), and a `clip_gradients` that refuses, as Fabric's does for DeepSpeed."""

    world_size = 1

    def __init__(self) -> None:
        self.strategy = DeepSpeedStrategy.__new__(DeepSpeedStrategy)  # the type only: deepspeed is not installed
        self.strategy.config = {}
        self.backward_models: list[nn.Module | None] = []

    def setup(self, model, optimizer):
        return model, optimizer

    def backward(self, loss, model=None) -> None:
        self.backward_models.append(model)
        loss.backward()

    def clip_gradients(self, *args, **kwargs):
        raise NotImplementedError("DeepSpeed handles gradient clipping automatically within the optimizer")


def test_under_deepspeed_the_engine_clips_and_each_backward_names_its_model():
    fabric = EngineFabric()
    model = nn.Linear(3, 1)
    before = model.weight.detach().clone()
    model, optimizer, schedule = adamw(fabric, model, 0.1, 0.0, 1, 2, 0.0)
    assert fabric.strategy.config["gradient_clipping"] == MAX_GRAD_NORM
    step(fabric, model, optimizer, schedule, model(torch.ones(2, 3)).sum())
    assert fabric.backward_models == [model] and not torch.equal(model.weight, before)


def test_relearn_time_is_refused_where_the_weights_are_split_across_ranks():
    fsdp = SimpleNamespace(strategy=FSDPStrategy.__new__(FSDPStrategy))
    zero = [DeepSpeedStrategy.__new__(DeepSpeedStrategy) for _ in range(2)]
    zero[0].config, zero[1].config = {"zero_optimization": {"stage": 3}}, {"zero_optimization": {"stage": 2}}
    assert shards_weights(fsdp) and shards_weights(SimpleNamespace(strategy=zero[0]))
    assert not shards_weights(SimpleNamespace(strategy=zero[1]))
    assert not shards_weights(Fabric(accelerator="cpu", devices=1))


def test_under_deepspeed_a_non_finite_loss_still_stops_before_the_update():
    """The engine clips, so no gradient norm comes back to check: the loss alone decides."""
    fabric = EngineFabric()
    model = nn.Linear(3, 1)
    before = model.weight.detach().clone()
    model, optimizer, schedule = adamw(fabric, model, 0.1, 0.0, 1, 2, 0.0)
    with pytest.raises(NonFiniteStep, match=r"^diverged at step 1 \(loss nan\)$"):
        step(fabric, model, optimizer, schedule, model(torch.ones(2, 3)).sum() * math.nan)
    assert torch.equal(model.weight, before)
