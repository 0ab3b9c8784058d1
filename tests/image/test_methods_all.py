"""Every registered method, in every scenario it serves: it runs (what it achieves: test_outcomes.py)."""

from __future__ import annotations

import pytest
from fabricate import write_cifar100
from helpers import TINY, image_methods, run_in_process

pytestmark = pytest.mark.slow  # every method's whole job, twice: make test runs them


def by_key(records: list[dict]) -> dict:
    return {(r["method"], r["role"], r["metric"], r["split"]): r["value"] for r in records}


def test_every_method_serves_the_targeted_scenarios():
    assert image_methods("full_class") == image_methods("sub_class")
    assert {"finetune", "retrain"} <= set(image_methods("full_class"))
    assert set(image_methods("random_sample")) <= set(image_methods("full_class"))


def test_every_method_runs_sub_class_on_cifar20(tmp_path):
    write_cifar100(tmp_path / "cifar")
    methods = image_methods("sub_class")
    overrides = [*TINY, "dataset=cifar20", f"dataset.root={tmp_path / 'cifar'}", "scenario=sub_class",
                 "scenario.targets=[rocket]", "train.epochs=1", "model.width=4"]
    # UNSIR's 250 noise steps of the sub-class setting took two thirds of this job: its full-class 25 run as well;
    # its impair epoch over 80 copies of each of its 32 noise images (2,560 images) was then half of the job: 2 copies
    # run the same code
    unsir = ["method.noise_steps=25", "method.noise_copies=2"]
    outcome = run_in_process(overrides, tmp_path, methods, method_options={"unsir": unsir})
    assert outcome.error is None, outcome.trace
    records = by_key(outcome.records)
    assert {r["method"] for r in outcome.records if r["role"] == "unlearned"} == set(methods)
    assert records["retrain", "unlearned", "delta_acc", "forget_test"] == 0.0
