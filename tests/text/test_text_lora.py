"""LoRA on the text task (peft), in process on the tiny model: adapters seeded by their stage's seed, the base frozen
and never copied into the cache, a method's fresh adapters on M_o, the options checked."""

from __future__ import annotations

import pytest
import torch
from helpers import plain_config
from lightning_fabric import Fabric
from safetensors.torch import load_file

from unlearnbench.core.job import JobPlan, execute
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.bench import TextBench
from unlearnbench.tasks.text.model.causal_lm import CausalLM

# greedy answers of 8 tokens, not 32: no test here reads their length, and both runs of the job compared below
# generate alike (the GradNorm attack stays: the only run of it on a model whose base is frozen)
LORA = ["experiment=tofu", "model.lora.enabled=true", "train.epochs=2", "dataset.entities=6", "dataset.general=4",
        "model.max_new_tokens=8"]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The LoRA job run twice into one folder and cache (a cold run, then a cache hit), and that folder: `bench`
    builds in it, its M_o the job's cached one."""
    folder = tmp_path_factory.mktemp("lora")
    config = plain_config([*LORA, "+method=npo"], folder)
    runs = [execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, [config["method"]], str(folder)))
            for _ in range(2)]
    return runs, folder


@pytest.fixture(scope="module")
def bench(jobs):
    _, folder = jobs
    config = plain_config([*LORA, "+method=npo"], folder)
    fabric = Fabric(accelerator="cpu", devices=1)
    from unlearnbench.core.job import Outcome

    plan = JobPlan(config, [config["method"]], str(folder))
    outcome = Outcome.begin(fabric, plan)
    return TextBench(fabric, plan, outcome), folder


def test_the_cache_holds_the_adapters_alone_and_the_base_stays_as_it_was(bench):
    bench, folder = bench
    original = bench.original()
    entry = next(p for p in (folder / "cache").glob("*/weights.safetensors"))
    stored = load_file(entry)
    assert stored and all("lora_" in name for name in stored)
    base = bench.model.new(bench.tokenizer, original.base_seed)
    restored = bench.model.restore(bench.tokenizer, original.state, original.base_seed)
    frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p for n, p in restored.named_parameters()
              if "lora_" not in n}
    assert all(torch.equal(frozen[name], weight) for name, weight in base.named_parameters())
    assert any(p.abs().sum() > 0 for n, p in restored.named_parameters() if "lora_B" in n)  # B left 0 at init


def test_adapters_are_drawn_from_the_stages_seed(bench):
    bench, _ = bench
    lm = bench.model
    draws = [lm.adapt(lm.new(bench.tokenizer, 0), seed) for seed in (1, 1, 2)]
    first = [dict((n, p) for n, p in d.named_parameters() if "lora_A" in n) for d in draws]
    assert all(torch.equal(first[0][n], first[1][n]) for n in first[0])
    assert not all(torch.equal(first[0][n], first[2][n]) for n in first[0])


def test_a_lora_job_runs_every_stage_and_a_cache_hit_gives_the_same_records(jobs):
    runs, _ = jobs
    assert all(run.error is None and not run.failures for run in runs)
    assert not runs[0].cache["original"]["hit"] and runs[1].cache["original"]["hit"]
    values = [{(r["role"], r["metric"], r["split"]): r["value"] for r in run.records
               if r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")} for run in runs]
    assert values[0] == values[1] and ("unlearned", "forget_quality", "forget") in values[0]


@pytest.mark.parametrize(("lora", "message"), [
    ({"r": 0}, "model.lora.r=0 is not valid; valid: an integer >= 1"),
    ({"dropout": 1.0}, r"model.lora.dropout=1.0 is not valid; valid: in \[0, 1\)"),
    ({"rank": 4}, "unknown option model.lora.rank; valid: enabled, r, alpha, dropout, target_modules"),
])
def test_bad_lora_options_are_one_line(lora, message):
    with pytest.raises(UserError, match=message):
        CausalLM(lora={"enabled": True, **lora})
