"""Every registered method, in every scenario it serves: it runs, and in the full-class scenario it forgets."""

from __future__ import annotations

from pathlib import Path

import pytest
from fabricate import write_cifar100
from helpers import TINY, compose_config, run_in_process
from omegaconf import OmegaConf

from unlearnbench.components import build, target_of

METHOD_CONFIGS = Path(__file__).resolve().parent.parent / "conf" / "method"


def image_methods(scenario: str) -> list[str]:
    """Names of the image-classification methods that serve `scenario`, from conf/method/."""
    cfg = compose_config([f"scenario={scenario}"])
    scenario_object = build(OmegaConf.to_container(cfg.scenario), "scenario")
    names = []
    for path in sorted(METHOD_CONFIGS.glob("*.yaml")):
        method = OmegaConf.to_container(compose_config([f"scenario={scenario}", f"+method={path.stem}"]).method,
                                        resolve=True)
        if target_of(method, "method").task == "image_classification" and \
                build(method, "method").serves(scenario_object):
            names.append(path.stem)
    return names


def by_key(records: list[dict]) -> dict:
    return {(r["method"], r["role"], r["metric"], r["split"]): r["value"] for r in records}


@pytest.fixture(scope="module")
def full_class(tmp_path_factory):
    outcome = run_in_process(list(TINY), tmp_path_factory.mktemp("full"), image_methods("full_class"))
    assert outcome.error is None, outcome.trace
    return by_key(outcome.records)


def test_every_method_serves_the_targeted_scenarios():
    assert image_methods("full_class") == image_methods("sub_class")
    assert {"finetune", "retrain"} <= set(image_methods("full_class"))
    assert set(image_methods("random_sample")) <= set(image_methods("full_class"))


def test_every_method_but_finetune_forgets_a_class_the_original_model_learned(full_class):
    original = full_class[None, "original", "acc", "forget_test"]
    assert original > 0.5  # the original model clearly learned the class
    for method in image_methods("full_class"):
        unlearned = full_class[method, "unlearned", "acc", "forget_test"]
        if method != "finetune":
            assert unlearned < original, (method, unlearned, original)
        assert full_class[method, "unlearned", "acc", "retain_test"] is not None


def test_every_method_runs_in_the_random_sample_scenario(tmp_path):
    methods = image_methods("random_sample")
    outcome = run_in_process([*TINY, "scenario=random_sample", "scenario.targets=[0.05]"], tmp_path, methods)
    assert outcome.error is None, outcome.trace
    assert {r["method"] for r in outcome.records if r["role"] == "unlearned"} == set(methods)


def test_every_method_runs_sub_class_on_cifar20(tmp_path):
    write_cifar100(tmp_path / "cifar")
    methods = image_methods("sub_class")
    overrides = [*TINY, "dataset=cifar20", f"dataset.root={tmp_path / 'cifar'}", "scenario=sub_class",
                 "scenario.targets=[rocket]", "train.epochs=1", "model.width=4"]
    outcome = run_in_process(overrides, tmp_path, methods)
    assert outcome.error is None, outcome.trace
    records = by_key(outcome.records)
    assert {r["method"] for r in outcome.records if r["role"] == "unlearned"} == set(methods)
    assert records["retrain", "unlearned", "delta_acc", "forget_test"] == 0.0
