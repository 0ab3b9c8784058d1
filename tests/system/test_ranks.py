"""Ranks that stay in step: a method failing on one rank is that method's failure on every rank, with the failing
rank's own message, and the other methods score what they score without it; a rank that dies or hangs ends the job
or its unit within a bounded time; ranks end by destroying their process group (runtime/ranks.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY, results, run_cli
from lightning_fabric import Fabric

from unlearnbench.runtime.ranks import Failure, Lockstep, RoundAbandoned, launch

pytestmark = pytest.mark.processes  # every test here starts processes: the console script, ranks or a cluster

TESTS = Path(__file__).resolve().parent.parent
TWO_RANKS = [*TINY, "dataset.test_fraction=0.75", "strategy=ddp_spawn", "strategy.devices=2"]
COST = ("time_s", "memory_gib", "utilisation_pct")
METHODS = {"rankfail": "faulty.FailingOnRank", "rankstuck": "faulty.FailingOnRank\nstuck: true",
           "rankkill": "faulty.KillingRank", "rankhang": "faulty.HangingRank"}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A user config folder with the rank-faulty methods (the jobs' models are in the suite's cache: the two-rank
    TINY models of test_methods_ddp.py's job, whose setting this is)."""
    root = tmp_path_factory.mktemp("ranks")
    folder = root / "user_conf" / "method"
    folder.mkdir(parents=True)
    for name, target in METHODS.items():
        (folder / f"{name}.yaml").write_text(f"_target_: {target}\nname: {name}\n")
    return root


def two_ranks(root: Path, cache: Path, sweep: str, methods: str, *extra: str, timeout: int = 300):
    """One job of `methods` on two spawned ranks through the console script: (the run, its result, seconds)."""
    os.environ["PYTHONPATH"] = f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    start = time.monotonic()
    try:
        run = run_cli([f"--config-dir={root / 'user_conf'}", *TWO_RANKS, f"methods=[{methods}]",
                       f"paths.cache_dir={cache}", *extra], root, sweep=sweep, timeout=timeout)
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    (result,) = results(root / sweep).values()
    return run, result, time.monotonic() - start


def science(result: dict, method: str | None = None) -> list[dict]:
    """The records of M_o, M_r and `method`'s M_u, cost metrics aside (they are measurements, not outcomes)."""
    return [r for r in result["records"] if r["metric"] not in COST and r["method"] in (None, method)]


@pytest.fixture(scope="module")
def without(root, shared_cache):
    """The job of gradient_ascent and ssd alone (they run before and after the rank-faulty methods: the registry's
    order; gradient ascent trains with DDP's collectives, as fine-tuning does, at a tenth of its cost)."""
    run, result, _ = two_ranks(root, shared_cache, "alone", "gradient_ascent,ssd")
    assert run.returncode == 0, run.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def faulty(root, shared_cache):
    """One job of gradient_ascent, three rank-faulty methods and ssd (the registry's order: gradient_ascent first,
    ssd last). rankfail fails on rank 1 while rank 0 returns at once: the ranks agree before evaluating. rankstuck
    fails on rank 1 while rank 0 waits in an all-reduce that rank 1 never joins: the ranks leave the round, and start
    again without it. rankhang sleeps on rank 1: rank 0 waits for it at most strategy.timeout_s, and the ranks start
    again once more."""
    return two_ranks(root, shared_cache, "faulty", "gradient_ascent,rankfail,rankstuck,rankhang,ssd",
                     "strategy.timeout_s=8")


def test_the_job_with_failing_ranks_completes_and_fails_its_sweep(faulty):
    run, result, seconds = faulty
    assert run.returncode == 1, run.stderr[-3000:]  # a failed method fails the sweep's exit status, not the job
    assert result["status"] == "complete"
    assert sorted(f["method"] for f in result["failures"]) == ["rankfail", "rankhang", "rankstuck"]
    assert {r["method"] for r in result["records"]} == {None, "gradient_ascent", "ssd"}
    assert "Traceback" not in run.stdout + run.stderr and "Connection closed" not in run.stdout + run.stderr
    assert seconds < 300


@pytest.mark.parametrize("method", ["rankfail", "rankstuck"])
def test_a_method_failing_on_rank_1_fails_once_with_its_message_and_the_others_score_as_without_it(
        root, without, faulty, method):
    """rankfail: the ranks agree on the failure before evaluating; rankstuck: the ranks leave the round and start
    again without the method. Either way gradient_ascent (before it) and ssd (after it, with its own collectives)
    score what they score without it."""
    run, result, _ = faulty
    (failure,) = [f for f in result["failures"] if f["method"] == method]
    assert failure == {"target": "3", "method": method, "error": "on rank 1: RuntimeError: out of memory on rank 1"}
    for other in ("gradient_ascent", "ssd"):
        assert science(result, other) == science(without, other), other
    output = run.stdout + run.stderr
    assert output.count(f"method {method} failed: on rank 1: RuntimeError: out of memory on rank 1") == 1
    assert not list((root / "faulty").glob("*/.abandoned_round.json"))


def test_a_killed_rank_fails_the_job_at_once_with_one_line(root, shared_cache):
    run, result, seconds = two_ranks(root, shared_cache, "killed", "rankkill,gradient_ascent", "strategy.timeout_s=20")
    assert run.returncode == 1
    assert result["status"] == "failed"
    assert result["error"] == ("rank 1 was killed by SIGKILL (out of memory, or stopped from outside?); the job's "
                               "other ranks were stopped")
    assert seconds < 120 and "Traceback" not in run.stderr
    assert next(line for line in run.stderr.splitlines() if line.startswith("FAILED")).endswith(result["error"])


def test_a_hung_rank_fails_its_method_within_the_timeout_and_the_job_goes_on(faulty):
    """Rank 1 sleeps inside the method; rank 0 waits for it at most strategy.timeout_s, then the ranks start again
    without the method, which is recorded as failed with the hung rank named (the others' records: above)."""
    run, result, _ = faulty
    (failure,) = [f for f in result["failures"] if f["method"] == "rankhang"]
    assert failure == {"target": "3", "method": "rankhang",
                       "error": "rank 1 did not finish target 3, method rankhang within strategy.timeout_s = 8 s "
                                "(it died, hangs or waits in a collective)"}
    assert "Traceback" not in run.stderr


def agreements(fabric: Fabric) -> dict:
    """Run by each rank: the agreed outcome of units that fail alike, differently, on one rank, and of ranks at
    different units."""
    lockstep = Lockstep(fabric, timeout_s=30, folder=os.environ["UB_TEST_FOLDER"])
    rank = fabric.global_rank
    seen = {"ok": lockstep.agree("a", None),
            "alike": lockstep.agree("b", Failure("ValueError: same")),
            "differ": lockstep.agree("c", Failure(f"ValueError: rank {rank}")),
            "one": lockstep.agree("d", Failure("KeyError: x") if rank == 1 else None)}
    try:
        lockstep.agree("e" if rank == 0 else "f", None)
    except RoundAbandoned as left:
        seen["apart"] = left.message
    outcome = {key: (value.message if isinstance(value, Failure) else value) for key, value in seen.items()}
    both = [None, None]
    torch.distributed.all_gather_object(both, outcome)
    return both


def test_ranks_agree_on_every_units_outcome(tmp_path, monkeypatch):
    """Failing alike is the plain message; failing differently or on one rank names the first failing rank; ranks
    at different units cannot go on (both leave, with the same reason). The ranks are forks of this process
    (`ddp_fork`: the agreement does not depend on how they start; spawned, each imports torch and Lightning again)."""
    monkeypatch.setenv("UB_TEST_FOLDER", str(tmp_path))
    outcome, other = launch(Fabric(accelerator="cpu", strategy="ddp_fork", devices=2), agreements)
    assert outcome == other
    assert outcome["ok"] is None and outcome["alike"] == "ValueError: same"
    assert outcome["one"] == "on rank 1: KeyError: x"
    assert outcome["differ"] in ("on rank 0: ValueError: rank 0", "on rank 1: ValueError: rank 1")
    assert outcome["apart"] == "the ranks reached different units: rank 0 e, rank 1 f"
    assert (tmp_path / ".abandoned_round.json").exists()
