"""KLOM (Georgiev et al. 2024; reference code easydub/EasyDUB-code, `easydub/eval.py`): the per-example formula
against an independent loop, cases whose answer is known, its permutation null, and its columns in
forget_quality.csv (the report's other per-example scores: tests/report/test_forgetting.py,
tests/system/test_examples.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from unlearnbench.core.catalogue import CORE
from unlearnbench.report.build import build_report
from unlearnbench.report.compute.forget_quality import KLOM_COLUMNS, QUALITY_COLUMNS, forget_quality, load_examples
from unlearnbench.report.compute.forgetting import klom, klom_summary, null_kloms, null_orders
from unlearnbench.report.render.words import text
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
from unlearnbench.tasks.ranking.catalogue import CATALOGUE as RANKING
from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT

BINS, FLOOR, CLIP = 20, 1e-5, 100.0  # the reference's bin_count, eps, min_val/max_val
TOP = math.log(1 / FLOOR)  # KL of a point mass on a bin the retrained pool leaves empty


def loop_klom(unlearned: np.ndarray, retrained: np.ndarray) -> np.ndarray:
    """KLOM written as the reference defines it, one example at a time with np.histogram: margins clipped to
    [−100, 100], 20 bins over both pools' range (one unit wide where it is a point), KL(unlearned ‖ retrained) over
    the unlearned pool's bins, the retrained probabilities floored at 1e-5 (np.histogram closes the last bin)."""
    values = []
    for column in range(unlearned.shape[1]):
        p_margins = np.clip(unlearned[:, column], -CLIP, CLIP)
        q_margins = np.clip(retrained[:, column], -CLIP, CLIP)
        low = min(p_margins.min(), q_margins.min())
        high = max(p_margins.max(), q_margins.max())
        if low >= high:
            high = low + 1.0
        p = np.histogram(p_margins, bins=BINS, range=(low, high))[0] / len(p_margins)
        q = np.histogram(q_margins, bins=BINS, range=(low, high))[0] / len(q_margins)
        values.append(sum(pi * math.log(pi / max(qi, FLOOR)) for pi, qi in zip(p, q, strict=True) if pi > 0))
    return np.array(values)


def digitize_klom(unlearned: np.ndarray, retrained: np.ndarray) -> float:
    """One example as the reference bins it: np.digitize on the 21 edges, bins 1 … 20 counted, so a margin equal to
    the largest edge is dropped (and an empty pool scores 0)."""
    p_margins, q_margins = np.clip(unlearned, -CLIP, CLIP), np.clip(retrained, -CLIP, CLIP)
    edges = np.linspace(min(p_margins.min(), q_margins.min()), max(p_margins.max(), q_margins.max()), BINS + 1)
    p, q = (np.bincount(np.digitize(m, edges), minlength=BINS + 2)[1:BINS + 1] for m in (p_margins, q_margins))
    p, q = (p / p.sum() if p.sum() else p), (q / q.sum() if q.sum() else q)
    return float(sum(pi * math.log(pi / max(qi, FLOOR)) for pi, qi in zip(p, q, strict=True) if pi > 0))


def cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pools [N, E] that reach every branch: shifted Gaussians, two models, clipping and ±∞, margins on the bin
    edges (integers over a span of 20: the edges are the integers), point columns and point pools."""
    rng = np.random.default_rng(20240603)
    grid_u, grid_r = rng.integers(0, 21, (16, 120)).astype(float), rng.integers(0, 21, (16, 120)).astype(float)
    grid_u[0], grid_r[0] = 0.0, 20.0  # every column spans [0, 20]
    points_u, points_r = rng.normal(size=(6, 40)), rng.normal(size=(6, 40))
    points_u[:, :10] = points_r[:, :10] = 1.5  # one margin in both pools: the range is a point
    points_u[:, 10:20] = 3.0  # a point unlearned pool
    wide_u, wide_r = rng.normal(0, 80, (33, 100)), rng.normal(20, 80, (33, 100))
    wide_u[0, :5], wide_r[1, 5:10], wide_u[2, 10:15] = np.inf, -np.inf, 1e6
    return {"gaussian": (rng.normal(size=(8, 200)), rng.normal(0.5, 1, (8, 200))),
            "two_models": (rng.normal(size=(2, 100)), rng.normal(size=(2, 100))),
            "clipped": (wide_u, wide_r), "on_edges": (grid_u, grid_r), "points": (points_u, points_r)}


@pytest.mark.parametrize("name", list(cases()))
def test_klom_equals_the_loop_over_examples(name):
    unlearned, retrained = cases()[name]
    expected = loop_klom(unlearned, retrained)
    found = klom(unlearned, retrained)
    assert found.shape == expected.shape
    np.testing.assert_allclose(found, expected, rtol=1e-12, atol=1e-12)
    assert klom_summary(found) == pytest.approx(np.percentile(expected, 95), rel=1e-12, abs=1e-12)
    assert expected.std() > 0.1  # the cases are not all one value


def test_identical_pools_score_zero_and_separated_ones_the_floor():
    rng = np.random.default_rng(1)
    pool = rng.normal(size=(8, 50))
    assert np.all(klom(pool, pool) == 0.0) and klom_summary(klom(pool, pool)) == 0.0
    point = np.full((8, 50), 7.0)
    np.testing.assert_allclose(klom(point, pool), TOP, rtol=1e-12)  # no retrained margin reaches the top bin
    apart = pool + 50  # every unlearned margin in bins the retrained pool leaves empty: ln(1/ε) − H(p)
    p = np.stack([np.histogram(apart[:, e], BINS, (pool[:, e].min(), apart[:, e].max()))[0] / 8 for e in range(50)])
    entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0).sum(axis=1)
    np.testing.assert_allclose(klom(apart, pool), TOP - entropy, rtol=1e-12)
    assert np.all(klom(apart, pool) >= TOP - math.log(8))
    far = np.full((8, 3), 500.0), np.full((8, 3), -np.inf)  # both clipped: points at ±100
    np.testing.assert_allclose(klom(*far), TOP, rtol=1e-12)
    assert klom_summary(np.array([])) != klom_summary(np.array([]))  # NaN without examples


def test_the_largest_margin_counts_where_the_reference_drops_it():
    """The documented deviation: an unlearned pool above every retrained margin scores ln(1/ε) here; the reference's
    np.digitize drops the pool's margins (they equal the last edge) and scores it 0, the best KLOM."""
    unlearned, retrained = np.array([5.0, 5.0, 5.0]), np.array([0.0, 1.0, 2.0])
    assert klom(unlearned[:, None], retrained[:, None])[0] == pytest.approx(TOP, rel=1e-12)
    assert digitize_klom(unlearned, retrained) == 0.0


def test_inputs_are_checked():
    with pytest.raises(UserError, match="one shape"):
        klom(np.zeros((4, 3)), np.zeros((5, 3)))
    with pytest.raises(UserError, match="NaN"):
        klom(np.full((4, 3), np.nan), np.zeros((4, 3)))
    with pytest.raises(UserError, match="NaN"):
        null_kloms(np.zeros((4, 3)), np.full((4, 3), np.nan), permutations=5)


# ------------------------------------------------------------------------------------------------------ the null


def test_null_uses_f_s_splits_and_is_reproducible():
    rng = np.random.default_rng(9)
    u, r = rng.normal(size=(8, 30)), rng.normal(size=(8, 30))
    first = null_kloms(u, r, permutations=20, seed=3)
    np.testing.assert_array_equal(first, null_kloms(u, r, permutations=20, seed=3))
    assert not np.array_equal(first, null_kloms(u, r, permutations=20, seed=4))
    order = np.random.default_rng([3, 8, 30, 20]).random((20, 16)).argsort(axis=1)  # F's null's scheme
    np.testing.assert_array_equal(null_orders(8, 30, 20, 3), order)
    pooled = np.concatenate([u, r])
    expected = [np.percentile(loop_klom(pooled[o[:8]], pooled[o[8:]]), 95) for o in order]
    np.testing.assert_allclose(first, expected, rtol=1e-12, atol=1e-12)
    assert null_kloms(u, r, permutations=0).shape == (0,)


def test_null_bounds_memory_without_changing_a_number(monkeypatch):
    from unlearnbench.report.compute import forgetting

    rng = np.random.default_rng(4)
    u, r = rng.normal(size=(6, 25)), rng.normal(size=(6, 25))
    whole = null_kloms(u, r, permutations=30)
    monkeypatch.setattr(forgetting, "KLOM_NULL_CELLS", 7 * 25 * BINS)  # chunks of 7 permutations
    np.testing.assert_array_equal(null_kloms(u, r, permutations=30), whole)


@pytest.mark.parametrize("n", [16, 32])
def test_pools_from_one_distribution_lie_inside_their_null_and_pools_apart_above(n):
    """The 2N models are exchangeable, so KLOM's rank in its null is uniform: inside the null's range nearly always,
    ranks centred on one half. Pools two standard deviations apart lie above every split's. (Below N = 16 a shift of
    one standard deviation is within the null: at N = 8 the null's maximum equals the shifted pools' KLOM.)"""
    rng = np.random.default_rng(n)
    ranks, outside = [], 0
    for dataset in range(16):
        u, r = rng.normal(size=(n, 100)), rng.normal(size=(n, 100))
        null = null_kloms(u, r, permutations=40, seed=dataset)
        assert null.shape == (40,) and np.all((null >= 0) & (null <= TOP))
        value = klom_summary(klom(u, r))
        ranks.append(np.mean(null <= value))
        outside += not null.min() <= value <= null.max()
    assert outside <= 2 and 0.3 <= np.mean(ranks) <= 0.7
    assert klom_summary(klom(u + 2, r)) > null_kloms(u + 2, r, permutations=40).max()


# ------------------------------------------------------------------------------------------ forget_quality.csv

KEYS = ["dataset", "model", "scenario"]
SPLITS = {"forget_train": np.arange(10), "retain_train": np.arange(100, 130), "retain_test": np.arange(5, 25)}


def job_rows(rng: np.random.Generator, train: int, unlearn: int) -> pd.DataFrame:
    """One job's examples rows: M_r's margins; `retrain` is M_r itself; `shift` is M_r + 4 on D_f and M_r elsewhere.
    Job t0_u1 lacks D_r example 100 and holds a NaN for `shift` on D_r example 101; job t1_u4 lacks D'_r entirely."""
    rows = []
    for split, indices in SPLITS.items():
        if (train, unlearn, split) == (1, 4, "retain_test"):
            continue
        if (train, unlearn, split) == (0, 1, "retain_train"):
            indices = indices[1:]
        margins = rng.normal(0, 1, len(indices))
        models = {("retrained", None): margins, ("unlearned", "retrain"): margins,
                  ("unlearned", "shift"): margins + (4.0 if split == "forget_train" else 0.0)}
        for (role, method), conf in models.items():
            conf = conf.copy()
            if (train, unlearn, split, method) == (0, 1, "retain_train", "shift"):
                conf[0] = np.nan  # example 101
            rows += [{"target": "0.1", "role": role, "method": method, "split": split, "index": int(i),
                      "label": int(i) % 10, "conf": float(c), "loss": 0.1, "pred": int(i) % 10}
                     for i, c in zip(indices, conf, strict=True)]
    return pd.DataFrame(rows)


CELLS = [(0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5)]  # A(0), A(1) of three models; B of t0_u0, t1_u3


def fabricated(rng: np.random.Generator) -> tuple[list[dict], dict[str, pd.DataFrame]]:
    jobs, examples = [], {}
    for train, unlearn in CELLS:
        folder = f"/sweep/digits_t{train}_u{unlearn}"
        jobs.append({"folder": folder, "status": "complete", "dataset": "digits", "model": "resnet18",
                     "scenario": "random_sample", "seed_train": train, "seed_unlearn": unlearn, "seed_eval": unlearn})
        examples[folder] = job_rows(rng, train, unlearn)
    return jobs, examples


def by_pool(quality: pd.DataFrame) -> pd.DataFrame:
    return quality.set_index(["method", "design", quality["seed_train"].fillna(-1).astype(int)])


def test_each_pool_compares_the_examples_every_model_holds():
    jobs, examples = fabricated(np.random.default_rng(0))
    found = forget_quality(jobs, examples, pd.DataFrame(), KEYS, permutations=20)
    quality = by_pool(found.quality)
    assert set(KLOM_COLUMNS) <= set(found.quality.columns) and not found.left_out
    gold = quality.xs("retrain")
    assert (gold[["klom_forget", "klom_retain"]] == 0.0).all().all()  # M_u = M_r: identical histograms
    assert (gold["klom_forget_examples"] == 10).all()
    assert gold.loc[("A", 0), "klom_retain_examples"] == 29  # t0_u1 lacks example 100
    assert gold.loc[("A", 1), "klom_retain_examples"] == 30
    assert math.isnan(gold.loc[("A", 1), "klom_test"]) and gold.loc[("A", 1), "klom_test_examples"] == 0
    assert gold.loc[("A", 0), "klom_test_examples"] == 20 and gold.loc[("A", 0), "klom_test"] == 0.0
    shift = quality.xs("shift")
    assert shift.loc[("A", 0), "klom_retain_examples"] == 28  # and shift's NaN leaves example 101 out
    assert shift.loc[("B", -1), "klom_retain_examples"] == 30  # B holds neither t0_u1 nor t1_u4
    assert (shift["klom_forget"] >= TOP - math.log(3)).all()  # 4 standard deviations apart
    assert (shift["klom_retain"] == 0.0).all()
    for (design, seed), rows in shift.iterrows():
        u, r = pool_margins(examples, design, seed, "forget_train")
        assert rows["klom_forget"] == pytest.approx(np.percentile(loop_klom(u, r), 95), rel=1e-12)
        null = null_kloms(u, r, permutations=20)
        assert rows["klom_forget_null_median"] == pytest.approx(np.median(null), rel=1e-12)


def pool_margins(examples: dict[str, pd.DataFrame], design: str, seed: int,
                 split: str) -> tuple[np.ndarray, np.ndarray]:
    """The `shift` pool's margins on a split, rebuilt from the rows: A(i)'s jobs of training seed i, B's first
    ones."""
    cells = [c for c in CELLS if c[0] == seed] if design == "A" else [(0, 0), (1, 3)]

    def margins(rows: pd.DataFrame, role: str, method) -> np.ndarray:
        part = rows[(rows["split"] == split) & (rows["role"] == role)
                    & (rows["method"].isna() if method is None else rows["method"] == method)]
        return part.sort_values("index")["conf"].to_numpy()
    frames = [examples[f"/sweep/digits_t{t}_u{u}"] for t, u in cells]
    return (np.stack([margins(f, "unlearned", "shift") for f in frames]),
            np.stack([margins(f, "retrained", None) for f in frames]))


def test_a_split_that_cannot_be_compared_costs_klom_alone():
    jobs, examples = fabricated(np.random.default_rng(1))
    rows = examples["/sweep/digits_t1_u3"]
    examples["/sweep/digits_t1_u3"] = pd.concat([rows, rows[rows["split"] == "retain_train"].iloc[:1]])
    found = forget_quality(jobs, examples, pd.DataFrame(), KEYS, permutations=5)
    problems = [w for w in map(text, found.left_out) if "no KLOM" in w]
    assert len(problems) == 4 and all("twice" in w for w in problems)  # A(1) and B, both methods
    quality = by_pool(found.quality)
    assert pd.notna(quality.loc[("shift", "A", 1), "forget_quality"])  # F stands
    assert quality.loc[[("shift", "A", 1), ("shift", "B", -1)], KLOM_COLUMNS].isna().all().all()
    assert str(found.quality["klom_retain_examples"].dtype) == "Int64"  # counts, empty where KLOM failed
    assert quality.loc[("shift", "A", 0), "klom_forget"] > 0 and len(found.quality) == 6


def test_the_report_writes_klom_to_forget_quality_csv(tmp_path):
    """Through the report's build path: examples.parquet and result.json read from disk, forget_quality.csv
    written, in QUALITY_COLUMNS' order."""
    jobs, examples = fabricated(np.random.default_rng(2))
    for job in jobs:
        folder = tmp_path / "sweep" / Path(job["folder"]).name
        folder.mkdir(parents=True)
        rows = examples[job["folder"]].astype({"target": "string", "role": "string", "method": "string",
                                               "split": "string"})
        rows.to_parquet(folder / "examples.parquet", index=False)
        fields = {"task": "image_classification", "method": "all", "strategy": "single", "precision": "32-true",
                  "devices": 1, **{k: v for k, v in job.items() if k not in ("folder", "status")}}
        records = [{"target": "0.1", "role": "retrained", "method": None, "metric": "acc", "split": "retain_test",
                    "value": 0.9}]
        (folder / "result.json").write_text(json.dumps({"schema": 1, "status": "complete", "error": None,
                                                        "job": fields, "records": records}))
    report = build_report([tmp_path / "sweep"], tmp_path / "report", figures=False, permutations=20,
                          forget_permutations=10)
    assert not report.failed
    written = pd.read_csv(tmp_path / "report" / "forget_quality.csv")
    assert list(written.columns)[-len(QUALITY_COLUMNS):] == QUALITY_COLUMNS
    assert len(written) == 6 and written[KLOM_COLUMNS].notna().any().all()
    gold = written[written["method"] == "retrain"]
    assert (gold["klom_forget"] == 0.0).all() and (gold["klom_retain"] == 0.0).all()
    shift = written[written["method"] == "shift"]
    assert (shift["klom_forget"] >= TOP - math.log(3)).all()


def scaling_records(jobs: list[dict]) -> pd.DataFrame:
    """The image task's records that scale the competition's score (accuracy on D_r and D'_r) and the MIA beside
    it (on D_f), for every model of every job."""
    declared = IMAGE.per_example
    models = [("retrained", None, 0.9), ("unlearned", "retrain", 0.9), ("unlearned", "shift", 0.6)]
    return pd.DataFrame([{"folder": job["folder"], "status": "complete", "target": "0.1", "role": role,
                          "method": method, "metric": metric, "split": split, "value": value}
                         for job in jobs for role, method, value in models
                         for metric, split in ((declared.accuracy, declared.retain),
                                               (declared.accuracy, declared.unseen),
                                               (declared.privacy, declared.forget))])


def test_the_splits_and_records_scored_are_those_the_jobs_task_declares():
    """The same margins under the text task's split names score the same F and KLOM, without the image task's
    accuracies and MIA (the text task declares none); a ranking job (no declarations) is not scored."""
    jobs, examples = fabricated(np.random.default_rng(3))
    records = scaling_records(jobs)
    image = forget_quality([{**job, "catalogue": IMAGE + CORE} for job in jobs], examples, records, KEYS, 10).quality
    renamed = dict(zip(SPLITS, (TEXT.per_example.forget, TEXT.per_example.retain, TEXT.per_example.unseen),
                       strict=True))
    text_examples = {folder: rows.assign(split=rows["split"].map(renamed)) for folder, rows in examples.items()}
    text = forget_quality([{**job, "catalogue": TEXT + CORE} for job in jobs], text_examples, records, KEYS,
                          10).quality
    scaled = ["score", "mia_unlearned", "mia_retrained"]
    pd.testing.assert_frame_equal(text.drop(columns=scaled), image.drop(columns=scaled))
    assert text[scaled].isna().all().all() and image[scaled].notna().all().all()
    shift = image[image["method"] == "shift"]
    assert np.allclose(shift["score"], shift["forget_quality"] * (0.6 / 0.9) ** 2)
    assert (shift["mia_unlearned"] == 0.6).all() and (shift["mia_retrained"] == 0.9).all()
    ranking = [{**job, "catalogue": RANKING + CORE} for job in jobs]
    assert forget_quality(ranking, examples, records, KEYS, 10).empty


def test_examples_are_read_for_the_splits_the_task_declares(tmp_path):
    jobs, examples = fabricated(np.random.default_rng(4))
    folder = tmp_path / "job"
    folder.mkdir()
    examples[jobs[0]["folder"]].to_parquet(folder / "examples.parquet", index=False)
    declared = {task: {"folder": str(folder), "status": "complete", "catalogue": catalogue + CORE}
                for task, catalogue in (("image", IMAGE), ("text", TEXT), ("ranking", RANKING))}
    assert set(load_examples([declared["image"]], pd.DataFrame())) == {str(folder)}
    assert load_examples([declared["ranking"]], pd.DataFrame()) == {}  # no declarations: not read
    assert load_examples([declared["text"]], pd.DataFrame()) == {}  # another task's splits: a damaged file
    assert declared["text"]["status"] == "invalid" and "is not one of" in declared["text"]["error"]
