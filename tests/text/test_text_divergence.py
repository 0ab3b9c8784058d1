"""A text run whose loss or gradient norm turns non-finite (text/model/train.py `step`): the step is not taken; a
method's divergence is that method's failure, recorded with its cost, and the job goes on; M_o's or M_r's divergence
fails the job in one line naming `train.lr`, with nothing in the cache; a relearning copy that diverges is recorded as
diverged. Never torch's own message about clipping a non-finite norm."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import plain_config, run_cli
from lightning_fabric import Fabric
from tiny import tiny_setting

from unlearnbench.core.job import JobPlan, execute
from unlearnbench.core.relearn import Measurement, relearn
from unlearnbench.runtime.train import NonFiniteStep
from unlearnbench.tasks.text.model.train import adamw, step

COST = ("time_s", "memory_gib", "utilisation_pct")  # a cost record per metric, in this order
TEXT = ["experiment=tofu", "runtime.threads=1", "runtime.print_table=false"]
# an evaluation that costs less, where the tests read neither the GradNorm attack nor the answers' length (the cache's
# keys hold neither: M_o and M_r stay the shared cache's)
CHEAP_EVALUATION = ["evaluation.gradnorm=false", "model.max_new_tokens=8"]


@pytest.fixture(scope="module")
def model():
    return tiny_setting()[5]


def updated(fabric, model, loss_of, steps: int = 3):
    """`steps` steps of `adamw` on `loss_of(model)`, then the weights (or the NonFiniteStep raised on the way)."""
    wrapped, optimizer, schedule = adamw(fabric, model, 1e-3, 0.0, 1, steps, 0.0)
    for _ in range(steps):
        step(fabric, wrapped, optimizer, schedule, loss_of(wrapped))


def parameters(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_a_non_finite_loss_raises_before_the_update_naming_its_step(model):
    fabric = Fabric(accelerator="cpu", devices=1)
    before = parameters(model)
    calls = []

    def loss_of(wrapped):  # finite twice, then NaN
        calls.append(1)
        loss = sum(p.float().pow(2).mean() for p in wrapped.parameters())
        return loss * math.nan if len(calls) == 3 else loss

    with pytest.raises(NonFiniteStep) as raised:
        updated(fabric, model, loss_of)
    assert raised.value.step == 3 and math.isnan(raised.value.loss)
    assert raised.value.where == "at step 3 (loss nan)"
    assert any(not torch.equal(a, b) for a, b in zip(before, parameters(model), strict=True))  # two steps taken
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN step was not


def test_a_finite_loss_with_a_non_finite_gradient_names_the_norm(model):
    fabric = Fabric(accelerator="cpu", devices=1)
    before = parameters(model)

    def loss_of(wrapped):  # d/dp of sqrt(|p|) at p = 0 is infinite, the loss itself 0
        first = next(wrapped.parameters())
        return (first.flatten()[0] * 0).abs().sqrt()

    with pytest.raises(NonFiniteStep) as raised:
        updated(fabric, model, loss_of)
    assert raised.value.step == 1 and raised.value.where.startswith("at step 1 (loss 0, gradient norm ")
    assert all(torch.equal(a, b) for a, b in zip(before, parameters(model), strict=True))  # no update at all


class Diverging:
    """A learner whose second step diverges."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps == 2:
            raise NonFiniteStep(2, math.inf)

    def measure(self) -> Measurement:
        return Measurement(5.0, 0.0)


def test_a_relearning_copy_that_diverges_is_recorded_as_diverged():
    run = relearn(Diverging(), threshold=1.0, max_steps=10, k=1)
    assert (run.steps, run.accuracy) == (None, None) and run.describe(1) == "diverged"


def run_text(overrides: list[str], folder, cache, methods: dict[str, list[str]]):
    config = plain_config([*TEXT, *overrides], folder, cache)
    plans = [plain_config([*TEXT, *overrides, f"+method={m}", *options], folder, cache)["method"]
             for m, options in methods.items()]
    return execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, plans, str(folder)))


def test_a_diverging_method_is_a_failure_with_its_cost_and_the_others_are_scored(tmp_path, shared_cache):
    outcome = run_text(CHEAP_EVALUATION, tmp_path, shared_cache, {"grad_ascent": ["method.lr=1e3"], "text_retrain": []})
    assert outcome.error is None and outcome.status == ("complete", None)
    [failure] = outcome.failures
    assert failure["method"] == "grad_ascent"
    assert failure["error"].startswith("grad_ascent diverged at step ")
    assert failure["error"].endswith("; lower method.lr")
    recorded = {r["metric"]: r["value"] for r in outcome.records if r["method"] == "grad_ascent"}
    assert set(recorded) == set(COST) and recorded["time_s"] > 0
    assert {r["metric"] for r in outcome.records if r["method"] == "text_retrain"} > {"forget_quality", *COST}


def test_a_diverging_original_fails_the_job_in_one_line_naming_train_lr_and_caches_nothing(tmp_path):
    outcome = run_text(["train.lr=1e3"], tmp_path, tmp_path / "cache", {"grad_ascent": []})
    assert outcome.error.startswith("the original model diverged in fine-tuning at step ")
    assert outcome.error.endswith("; lower train.lr") and outcome.trace is None
    assert not list((tmp_path / "cache").glob("*/COMPLETE"))


@pytest.mark.processes
def test_the_console_script_records_the_diverged_method_in_result_json(tmp_path, shared_cache):
    run = run_cli(["experiment=tofu", "+method=grad_ascent", "method.lr=1e3", *CHEAP_EVALUATION,
                   f"paths.cache_dir={shared_cache}"], tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stdout + run.stderr
    assert "error_if_nonfinite" not in run.stdout + run.stderr
    result = json.loads(next((tmp_path / "sweep").glob("*/result.json")).read_text())
    assert result["status"] == "failed" and "diverged at step" in result["error"]
    assert result["failures"][0]["method"] == "grad_ascent" and "diverged" in result["failures"][0]["error"]
    assert [r["metric"] for r in result["records"] if r["method"] == "grad_ascent"] == list(COST)
