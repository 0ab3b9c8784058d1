"""The real console scripts, end to end: the demo, a sweep with the shared cache, resumption, errors, ddp_spawn."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import REPO, TINY, results, run_cli, values
from omegaconf import OmegaConf

from unlearnbench.core.components import locate
from unlearnbench.report.build import build_report

pytestmark = pytest.mark.processes  # every test here starts processes: the console script, ranks or a cluster


def test_plain_unlearnbench_is_the_demo(tmp_path, shared_cache):
    """No overrides: digits, ResNet18, full-class, every method, one seed; prints a table, leaves result.json."""
    # the console script with no overrides but its folders (the suite's cache among them) and a quick report (it is
    # read below without figures), forked from the fork server: the installed script as the shell starts it is
    # test_docs_examples.py's `together`, and here its 5-8 s of imports would buy nothing the test reads
    run = run_cli([f"paths.cache_dir={shared_cache}"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "(original)" in run.stdout and "finetune" in run.stdout and "retrain" in run.stdout
    (name, result), = results(tmp_path / "sweep").items()
    assert name == "digits_resnet18_full_class_all_t0_u0_e0"
    assert result["status"] == "complete" and result["job"]["method"] == "all"
    registered = {p.stem for p in (REPO / "conf" / "method").glob("*.yaml")
                  if locate(OmegaConf.load(p)["_target_"]).task == "image"}
    assert {r["method"] for r in result["records"] if r["role"] == "unlearned"} == registered
    for method in registered:  # every method scored on every split
        for split in ("forget_test", "retain_test", "forget_train", "retain_train"):
            (accuracy,) = values(result, method=method, metric="acc", split=split)
            assert 0.0 <= accuracy <= 1.0, (method, split)
    # the demo recipe learns digits on any machine: 0.898-0.960 in 24 runs (8 training seeds × 1 thread, 2
    # threads, kernels capped at SSE4.2) behind tests/core/test_outcomes.py's margins
    assert values(result, role="original", metric="acc", split="retain_test")[0] > 0.8
    assert result["numerics"]["id"] and result["numerics"]["device"] == "cpu"
    assert (tmp_path / "sweep" / "report" / "results.csv").is_file()
    # its report.md, tables only, fits two screens: the leaderboard first, one line on what the grid cannot identify
    build_report([tmp_path / "sweep"], tmp_path / "tables", figures=False)
    lines = (tmp_path / "tables" / "report.md").read_text().splitlines()
    assert len(lines) <= 80, len(lines)
    assert lines.index("## Leaderboard") < lines.index("## Warnings")
    assert sum("not identifiable from this grid: I = 1, J = 1" in line for line in lines) == 1
    assert any(f"no pairwise test: a Wilcoxon–Holm test over {len(registered) - 1} methods needs "
               f"{len(registered)} blocks, not 1: {len(registered)} training seeds" in line
               for line in lines)  # every method but retrain (M_r itself)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two methods × two unlearning seeds sharing one cache, then the same sweep again into the same folder."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    args = ["+method=finetune,retrain", "seeds.unlearn=0,1", *TINY]
    first = run_cli(args, tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "sweep").glob("*/result.json")}
    again = run_cli(args, tmp_path)
    return tmp_path, first, again, stamps


def test_sweep_trains_the_original_once_and_one_retrained_model_per_unlearning_seed(sweep):
    tmp_path, first, _, _ = sweep
    assert first.returncode == 0, first.stderr
    jobs = results(tmp_path / "sweep")
    assert len(jobs) == 4 and all(r["status"] == "complete" for r in jobs.values())
    original_hits = sorted(r["cache"]["original"]["hit"] for r in jobs.values())
    assert original_hits == [False, True, True, True]
    assert len({r["cache"]["original"]["key"] for r in jobs.values()}) == 1
    retrained = {}
    for r in jobs.values():
        (entry,) = r["cache"]["retrained"]
        retrained.setdefault(r["job"]["seed_unlearn"], []).append(entry)
    assert len({e["key"] for entries in retrained.values() for e in entries}) == 2
    for entries in retrained.values():
        assert sorted(e["hit"] for e in entries) == [False, True]


def test_retrain_records_match_the_retrained_model(sweep):
    tmp_path, *_ = sweep
    for result in results(tmp_path / "sweep").values():
        if result["job"]["method"] != "retrain":
            continue
        mine = [r for r in result["records"] if r["method"] == "retrain"]
        assert all(r["value"] == 0.0 for r in mine if r["metric"].startswith("delta_"))
        assert values(result, method="retrain", metric="layer_distance") == [0.0]
        assert set(values(result, method="retrain", metric="completeness")) == {1.0}


def test_rerunning_a_finished_sweep_runs_no_job_again(sweep):
    _, _, again, stamps = sweep
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already complete, skipped") + again.stdout.count("already complete, skipped") == 4
    assert "unlearning with" not in again.stdout + again.stderr
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_report_command_collects_every_record(sweep):
    tmp_path, *_ = sweep
    run = run_cli([str(tmp_path / "sweep"), "--out", str(tmp_path / "rebuilt")], tmp_path,
                  program="unlearnbench-report")
    assert run.returncode == 0, run.stderr
    table = pd.read_parquet(tmp_path / "rebuilt" / "results.parquet")
    records = sum(len(r["records"]) for r in results(tmp_path / "sweep").values())
    assert len(table) == records
    assert set(table["seed_unlearn"]) == {0, 1} and set(table["method"].dropna()) == {"finetune", "retrain"}
    # the sweep's own report ran with report.figures=false (run_cli's default); the rebuilt one draws them
    assert not list((tmp_path / "sweep" / "report").glob("figures/*.png"))
    assert list((tmp_path / "rebuilt").glob("figures/curves_*.png"))


def test_report_command_refuses_a_leaderboard_metric_the_results_cannot_rank_by_in_one_line(sweep):
    """The results' catalogue says which metrics have a best value: `layer_distance` has (0), `utilisation_pct`
    (an image job's core cost) has none, `ndcg@10` is no image job's; nothing is written."""
    tmp_path, *_ = sweep
    for named, wrong in (("layer_distance,utilisation_pct", "utilisation_pct"), ("ndcg@10", "ndcg@10")):
        run = run_cli([str(tmp_path / "sweep"), "--out", str(tmp_path / "refused"), "--leaderboard-metrics", named],
                      tmp_path, program="unlearnbench-report")
        assert run.returncode == 2 and "Traceback" not in run.stderr
        line, = run.stderr.strip().splitlines()
        assert line.startswith("unlearnbench-report: the '--leaderboard-metrics' option must name metrics with a "
                               "best value (metric or metric:split of acc, ")
        assert line.endswith(f"); got {wrong} instead") and ", delta_acc, " in line and ", layer_distance" in line
    assert not (tmp_path / "refused").exists()
    run = run_cli([str(tmp_path / "sweep"), "--out", str(tmp_path / "ranked"), "--leaderboard-metrics",
                   "layer_distance", "--no-figures"], tmp_path, program="unlearnbench-report")
    assert run.returncode == 0, run.stderr
    assert pd.read_csv(tmp_path / "ranked" / "leaderboard.csv").empty  # finetune alone beside the gold standard


def test_report_command_refuses_a_comparison_of_methods_the_results_do_not_rank_in_one_line(sweep):
    """`--compare` names the methods whose pairs seed_power.csv plans for: finetune is the only ranked method here
    (retrain is the gold standard); nothing is written."""
    tmp_path, *_ = sweep
    run = run_cli([str(tmp_path / "sweep"), "--out", str(tmp_path / "compared"), "--compare", "finetune,retrain"],
                  tmp_path, program="unlearnbench-report")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("unlearnbench-report: the '--compare' option must name two or more of the ranked "
                                  "methods (finetune); got finetune, retrain instead")
    assert not (tmp_path / "compared").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["scenario.targets=[cat]"], "unknown class 'cat' for dataset digits; valid: 0, 1, 2"),
    (["scenario=random_sample", "scenario.targets=[1.5]"],
     "the 'targets' option of scenario random_sample must be fractions in (0, 1); got 1.5 instead"),
    (["dataset=cifar10"], "cifar-10-batches-py/data_batch_1"),
    (["+method=nope"], "Could not find 'method/nope'"),
    (["seeds.trian=1"], "Key 'trian' not in 'Seeds'"),
    (["precision=16-mixed"], "needs a CUDA GPU"),
    (["+method=[ssd,finetune]"], "would merge several method configs into one job; use +method=ssd,finetune"),
])
def test_bad_input_fails_with_one_clear_message_and_no_traceback(tmp_path, args, message):
    run = run_cli([*args, "model.width=4", "train.epochs=1"], tmp_path)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    for result in results(tmp_path / "sweep").values():
        assert result["status"] == "failed" and message in result["error"]
    if args == ["dataset=cifar10"]:  # the missing dataset's message says where files go and where to get them
        (line,) = [x for x in run.stderr.splitlines() if "FAILED" in x]
        assert str(tmp_path / "data" / "cifar10") in line and "cifar-10-python.tar.gz" in line


def test_ddp_spawn_evaluates_exactly_like_one_process(tmp_path, shared_cache):
    """Two ranks train other models (another cache key: per-rank batch-norm statistics, another reduction order),
    close to one rank's; given one rank's models, two ranks evaluate them to identical records. (The one- and
    two-rank runs share the suite's cache, the demo's models included; the two-rank keys that get one rank's models
    are in a cache of this test's own.)"""
    from unlearnbench.runtime.cache import ModelCache

    args = ["+method=retrain", "runtime.threads=1", "runtime.print_table=false"]  # the demo's recipe: it converges
    single = run_cli([*args, f"paths.cache_dir={shared_cache}"], tmp_path, sweep="single")
    spawn = run_cli([*args, "strategy=ddp_spawn", f"paths.cache_dir={shared_cache}"], tmp_path, sweep="spawn")
    assert single.returncode == 0 and spawn.returncode == 0, spawn.stderr
    (one,), (trained,) = results(tmp_path / "single").values(), results(tmp_path / "spawn").values()
    assert trained["job"]["devices"] == 2 and trained["numerics"]["world_size"] == 2
    assert not trained["cache"]["original"]["hit"]  # the same cache, but not one rank's model
    (log_file,) = (tmp_path / "spawn").glob("*/unlearnbench.log")  # the spawned rank 0 logs into the job's log
    logged = log_file.read_text()
    assert "original model (training seed 0): epoch 1/" in logged and "evaluation of retrain: done in" in logged
    assert [c["model"] for c in trained["curves"]] == ["original", "retrained"]  # `retrain` trains nothing itself
    for role in ("original", "retrained"):
        for split in ("retain_test", "retain_train"):
            a = values(one, role=role, metric="acc", split=split)[0]
            b = values(trained, role=role, metric="acc", split=split)[0]
            # per-rank batch-norm statistics and another reduction order make another trajectory, as another seed
            # does: across 8 training seeds × 3 trajectories this recipe's test accuracies spanned 0.06 (M_o) and
            # 0.11 (M_r); at TINY's 3 epochs they spanned 0.2, which no useful bound survives
            assert abs(a - b) < 0.15, (role, split, a, b)

    # one rank's models under the two-rank keys (in this test's own cache), then evaluate again
    shared, cache = ModelCache(shared_cache), ModelCache(tmp_path / "cache")
    pairs = [(one["cache"]["original"], trained["cache"]["original"]),
             *zip(one["cache"]["retrained"], trained["cache"]["retrained"], strict=True)]
    for source, target in pairs:
        entry = shared.read(source["key"])
        cache.publish(target["key"], entry.state, entry.meta)
    again = run_cli([*args, "strategy=ddp_spawn"], tmp_path, sweep="again")
    assert again.returncode == 0, again.stderr
    (two,) = results(tmp_path / "again").values()
    assert two["cache"]["original"]["hit"] and two["cache"]["retrained"][0]["hit"]
    science = [r for r in one["records"] if r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")]
    assert science == [r for r in two["records"] if r["metric"] not in ("time_s", "memory_gib", "utilisation_pct")]
    assert json.dumps(two["job"]).count("ddp_spawn") == 1
    # the per-example outputs come back from the spawned rank whole (larger than a pipe's buffer) and identical
    import pandas as pd

    (folder_one,), (folder_two,) = (sorted((tmp_path / s).glob("*/examples.parquet")) for s in ("single", "again"))
    pd.testing.assert_frame_equal(pd.read_parquet(folder_one), pd.read_parquet(folder_two))
