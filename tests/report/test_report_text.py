"""The report's derived metrics on the text task's declaration: forget quality against one fixed retain model (the
M_r of the smallest unlearning seed), rebuilt from per-example truth ratios by the report's generic code, on a
constructed sweep, with the numbers of the task's own forget quality; `experiment=tofu_seeds`'s design, and `make
text-study` (scripts/text_seed_study.py --docs) on a small one."""

from __future__ import annotations

import functools
import re
import shutil
import unittest.mock

import numpy as np
import pandas as pd
import pytest
from helpers import QUICK_REPORT, REPO, compose_config, drawing_only, results, run_main, script
from scipy import stats

from unlearnbench.core.catalogue import CORE
from unlearnbench.report import build
from unlearnbench.report.compute.derived import derived_records
from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT
from unlearnbench.tasks.text.evaluate.metrics import forget_quality

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


@pytest.mark.processes
def test_make_text_study_writes_its_table_and_figure_into_a_copy_of_the_docs(tmp_path, shared_cache):
    """The command on 3 training × 2 unlearning seeds of two methods on a small built-in set, its `main` in this
    process, its sweep forked from the test's fork server under the basic launcher, into a copy of docs/text.md. The
    jobs run without the GradNorm attack (not in the table) and with greedy answers of 4 tokens, not 32: what is
    tested is what the command writes, not the numbers. Its report draws the kind of figure the command copies one
    of (the designs, a figure per leaderboard metric), not the other ten kinds (5 of its 10 CPU-s): no assertion
    reads them."""
    module = script(REPO / "scripts" / "text_seed_study.py")
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(REPO / "docs" / "text.md", docs / "text.md")

    argv = ["text_seed_study.py", "--docs", "--docs-dir", str(docs), "--out", str(tmp_path / "study"),
            "--train-seeds", "3", "--unlearn-seeds", "2", "methods=[grad_ascent,npo]", "train.epochs=2",
            "dataset.entities=4", "dataset.holdout_entities=1", "dataset.general=2", "runtime.threads=1",
            "evaluation.gradnorm=false", "model.max_new_tokens=4",
            f"paths.cache_dir={shared_cache}", f"paths.data_dir={tmp_path / 'data'}", "hydra/launcher=basic",
            *(f"{key}={value}" for key, value in QUICK_REPORT.items())]  # the sweep's own report
    quick = functools.partial(build.build_report, forget_permutations=10)  # the report's F, not in the table
    with unittest.mock.patch.object(build, "build_report", quick), drawing_only("designs"):
        run = run_main(module, argv, tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    jobs = results(tmp_path / "study")
    assert sorted((r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in jobs.values()) == [
        (0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)]  # unlearning seeds nested in training seeds
    begin, end = module.BEGIN, module.END
    before, after = (REPO / "docs" / "text.md").read_text(), (docs / "text.md").read_text()
    block = after[after.index(begin):after.index(end) + len(end)]
    assert after.replace(block, "") == before.replace(before[before.index(begin):before.index(end) + len(end)], "")
    lead, table, ranks = block.removeprefix(f"{begin}\n").removesuffix(f"\n{end}").split("\n\n")
    assert "I = 3 training seeds × J = 2 unlearning seeds" in " ".join(lead.split())
    assert "regenerated by `make text-study`" in " ".join(lead.split())
    lines = table.splitlines()
    assert lines[0] == module.table([]).splitlines()[0] and table in run.stdout
    assert [line.split(" | ")[0].removeprefix("| ") for line in lines[2:]] == ["grad_ascent", "npo"]
    for line in lines[2:]:  # σ_T² / σ_U² per metric, then W2 (null 95%)
        cells = [c.strip() for c in line.split("|")[2:-1]]
        assert all(re.fullmatch(r"\S+ / \S+", c) for c in cells[:-1]) and re.fullmatch(r"\S+ \(\S+\)", cells[-1])
    assert ranks.startswith("The best method by forget quality over all 3 training seeds is ")
    figure = "designs_fictitious_causal_lm_forget_entities_forget_quality_forget.png"
    assert (docs / "text_seed_study.png").read_bytes() == (tmp_path / "study" / "report" / "figures" /
                                                           figure).read_bytes()
    assert f"updated in {docs}: text.md, text_seed_study.png" in run.stdout
    power = pd.read_csv(tmp_path / "study" / "report" / "seed_power.csv")  # the neighbours on each leaderboard metric
    pairs = set(zip(power["method_a"], power["method_b"], strict=True))
    assert len(pairs) == 1 and pairs <= {("grad_ascent", "npo"), ("npo", "grad_ascent")}
    assert {"forget_quality", "model_utility", "privleak"} <= set(power["metric"]) and set(power["I"]) == {3}
    assert (power["plan_I"].dropna() >= 2).all()
    assert "### How many seeds to tell two methods apart" in (tmp_path / "study" / "report" / "report.md").read_text()
