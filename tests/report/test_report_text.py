"""The report's derived metrics on the text task's declaration: forget quality against one fixed retain model (the
M_r of the smallest unlearning seed), rebuilt from per-example truth ratios by the report's generic code, on a
constructed sweep, with the numbers of the task's own forget quality; `experiment=tofu_seeds`'s design."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import compose_config
from scipy import stats

from unlearnbench.core.catalogue import CORE
from unlearnbench.report.compute.derived import derived_records
from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT
from unlearnbench.tasks.text.metrics import forget_quality

N = 12
KEYS = ["dataset", "model", "scenario"]
FIRST = "forget_quality_first"


def job(folder, seed_train: int, seed_unlearn: int, ratios: dict, indices=range(N)) -> list[dict]:
    """A text job's examples file (its forget truth ratios per model) and its forget-quality records."""
    folder.mkdir()
    rows = [{"target": "forget10", "role": role, "method": method, "split": "forget", "index": i, "truth_ratio": tr}
            for (role, method), values in ratios.items() for i, tr in zip(indices, values, strict=True)]
    pd.DataFrame(rows).to_parquet(folder / "examples.parquet")
    return [{"dataset": "fictitious", "model": "causal_lm", "scenario": "forget_entities", "target": "forget10",
             "role": role, "method": method, "metric": "forget_quality", "split": "forget", "value": 0.5,
             "status": "complete", "folder": str(folder), "seed_train": seed_train, "seed_unlearn": seed_unlearn}
            for role, method in ratios]


def test_forget_quality_against_the_first_retain_model(tmp_path):
    rng = np.random.default_rng(0)
    draw = {key: {("retrained", None): rng.random(N), ("unlearned", "npo"): rng.random(N) * 2}
            for key in ("a", "b", "c")}
    rows = (job(tmp_path / "t1_u3", 1, 3, draw["a"]) + job(tmp_path / "t0_u1", 0, 1, draw["b"])
            + job(tmp_path / "t0_u2", 0, 2, draw["c"])
            + job(tmp_path / "other_set", 0, 0, draw["c"], indices=range(100, 100 + N)))  # another forget set
    added = derived_records(pd.DataFrame(rows), KEYS, TEXT + CORE)
    assert set(added["metric"]) == {FIRST} and len(added) == 8
    value = {(r.folder.rsplit("/", 1)[1], r.role): r.value for r in added.itertuples()}
    reference = draw["b"][("retrained", None)]  # smallest unlearning seed of the set (u1), not t1_u3
    assert value[("t0_u1", "retrained")] == 1.0
    for name, key in (("t1_u3", "a"), ("t0_u2", "c")):
        assert value[(name, "retrained")] == pytest.approx(
            stats.ks_2samp(draw[key][("retrained", None)], reference).pvalue)
        assert value[(name, "unlearned")] == pytest.approx(
            stats.ks_2samp(draw[key][("unlearned", "npo")], reference).pvalue)
        # the same number as the text task's own forget quality computes, to the last bit
        assert value[(name, "unlearned")] == forget_quality(draw[key][("unlearned", "npo")], reference)
    assert value[("other_set", "retrained")] == 1.0  # its own set's first model: itself


def test_an_image_sweep_gets_no_such_records(tmp_path):
    rows = [{"dataset": "digits", "model": "resnet18", "scenario": "full_class", "target": "3", "role": "original",
             "method": None, "metric": "acc", "split": "forget_test", "value": 0.9, "status": "complete",
             "folder": str(tmp_path), "seed_train": 0, "seed_unlearn": 0}]
    assert derived_records(pd.DataFrame(rows), KEYS, IMAGE + CORE).empty  # the image task derives nothing
    assert derived_records(pd.DataFrame(rows), KEYS, TEXT + CORE).empty  # and its records are no text source


def test_the_text_seed_study_nests_unlearning_seeds_and_holds_one_forget_set():
    config = compose_config(["experiment=tofu_seeds", "seeds.train=2", "study.repeat=1"], return_hydra_config=True)
    assert (config.study.I, config.study.J) == (5, 3)
    assert (config.seeds.unlearn, config.seeds.forget) == (2 * 3 + 1, 0)
    assert config.task.name == "text" and config.model.name == "causal_lm"
    assert dict(config.hydra.sweeper.params) == {"seeds.train": "range(5)", "study.repeat": "range(3)"}
