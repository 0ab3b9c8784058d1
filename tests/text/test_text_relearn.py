"""Relearn time on the text task (`evaluation.relearn`, text/relearn.py): a tiny-Llama job's records for M_o, M_r
and each method on the forget split, M_o relearning at once, `text_retrain` exactly as M_r, identical numbers for
identical seeds, and the forget records' draw. No assertion compares how fast two trained models relearn."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import RELEARN_METRICS as METRICS
from helpers import assert_relearn_records, plain_config, relearnt
from lightning_fabric import Fabric

from unlearnbench.core.job import JobPlan, execute
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.relearn import relearn_records

METHODS = ["grad_ascent", "text_retrain"]
# The job's other evaluation is not what is tested here: it runs without the GradNorm attack (a backward pass per
# forget and holdout example of each model) and with greedy answers of 4 tokens (relearning generates none). On
# test_text_during's small set (6 entities, 4 records in each general set) and models, from the suite's cache: a
# third of the examples to score and 10 forget records to relearn, not 20.
RELEARN = ["experiment=tofu", "dataset.entities=6", "dataset.general=4", "evaluation.relearn.enabled=true",
           "evaluation.relearn.max_steps=8", "evaluation.relearn.k=2", "evaluation.gradnorm=false",
           "model.max_new_tokens=4", "runtime.threads=1", "runtime.print_table=false"]


def run_text(overrides: list[str], folder: Path, cache: Path):
    """A text job's body on one CPU process (no Hydra job folder)."""
    config = plain_config(overrides, folder, cache)
    methods = [plain_config([*overrides, f"+method={m}"], folder, cache)["method"] for m in METHODS]
    fabric = Fabric(accelerator="cpu", devices=1, precision=config["precision"]["fabric"])
    return execute(fabric, JobPlan(config, methods, str(folder)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_cache):
    """The same text job twice (M_o and M_r from the suite's cache, the methods run afresh each time)."""
    return [run_text(RELEARN, tmp_path_factory.mktemp(name), shared_cache) for name in ("a", "b")]


def test_a_text_job_records_relearn_time_for_every_model(runs):
    assert_relearn_records(runs[0], METHODS, "forget", max_steps=8)


def test_the_original_relearns_at_once_and_text_retrain_as_the_retrained_model(runs):
    records = relearnt(runs[0])
    for target in {key[0] for key in records}:
        assert records[target, "original", None, "relearn_steps", "forget"] == 0
        for metric in METRICS:
            assert (records[target, "unlearned", "text_retrain", metric, "forget"]
                    == records[target, "retrained", None, metric, "forget"])


def test_the_same_seeds_give_identical_numbers(runs):
    assert relearnt(runs[0]) == relearnt(runs[1])


def test_the_relearn_records_are_all_forget_records_or_a_seeded_draw():
    records = [{"question": str(i)} for i in range(12)]
    assert relearn_records(records, None, torch.Generator()) == records
    assert relearn_records(records, 50, torch.Generator()) == records
    draws = [relearn_records(records, 5, torch.Generator().manual_seed(seed)) for seed in (0, 0, 1)]
    assert len(draws[0]) == 5 and draws[0] == draws[1] and draws[0] != draws[2]
    assert [int(r["question"]) for r in draws[0]] == sorted(int(r["question"]) for r in draws[0])
    with pytest.raises(UserError, match="at least 2 forget records"):
        relearn_records(records[:1], None, torch.Generator())
