"""`hydra/launcher=slurm` on a real single-node SLURM cluster (scripts/slurm/cluster.sh): job arrays, the cache's
lock across array tasks, preemption (requeue), a cancelled job, and ranks taken from SLURM under `strategy=ddp`.

Needs root and the ports 6817/6818 (the cluster script installs Debian's slurm and munge packages where missing);
elsewhere the tier is skipped with the reason. Every launch has an outer timeout: a hang fails the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from helpers import QUICK_REPORT, REPO, TINY, results, with_defaults

pytestmark = pytest.mark.processes  # every test here starts processes: the console script, ranks or a cluster

TESTS = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "slurm" / "cluster.sh"
STATE = Path(os.environ.get("UB_SLURM_DIR", "/tmp/unlearnbench-slurm"))
COST = ("time_s", "memory_gib", "utilisation_pct")
SLURM = ["hydra/launcher=slurm", "runtime.accelerator=cpu", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=15"]


def unavailable() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the SLURM tier needs root on Linux (it installs and starts slurmctld, slurmd and munge)"
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return "the SLURM tier needs slurmctld/slurmd/munge installed or apt-get to install them"
    if subprocess.run([CLUSTER, "status"], capture_output=True).returncode == 0:
        return None  # ours, already up
    for port in (6817, 6818):
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return f"port {port} is taken (another SLURM?): the SLURM tier needs 6817 and 6818"
    return None


@pytest.fixture(scope="module")
def cluster():
    """The cluster's environment (SLURM_CONF, the sacct stand-in on PATH, the test methods on PYTHONPATH)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    up = subprocess.run([CLUSTER, "up"], capture_output=True, text=True, timeout=300)
    if up.returncode != 0:
        pytest.skip(f"the SLURM tier could not start a cluster: {up.stderr.strip().splitlines()[-1:]}")
    env = {**os.environ, "SLURM_CONF": str(STATE / "slurm.conf"), "PYTHONWARNINGS": "ignore",
           "PATH": f"{CLUSTER.parent / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    yield env
    subprocess.run([CLUSTER, "down"], capture_output=True, timeout=120)


@pytest.fixture(autouse=True)
def cancel_leftovers(request, tmp_path):
    """After each test on the cluster, cancels what its sweeps left there (a held job of a failed test would
    otherwise hold a core, and every later test would queue behind it: one failure stays one failure)."""
    env = request.getfixturevalue("cluster") if "cluster" in request.fixturenames else None
    yield
    arrays = {p.name.split("_")[0] for p in tmp_path.glob("**/.submitit/[0-9]*")}
    if env is not None and arrays:
        subprocess.run(["scancel", *sorted(arrays)], capture_output=True, env=env, timeout=60)


def command(args: list[str], root: Path, sweep: str, cache: str | Path = "cache") -> list[str]:
    """The console script's command line, its folders under `root` (`cache` may be elsewhere: conftest's
    `shared_cache`)."""
    return [str(Path(sys.executable).parent / "unlearnbench"), *with_defaults(args, QUICK_REPORT),
            f"hydra.sweep.dir={root / sweep}", f"paths.cache_dir={root / cache}", f"paths.data_dir={root / 'data'}"]


def sweep(args: list[str], root: Path, env: dict, sweep: str, cache: str | Path = "cache",
          timeout: int = 300, **options) -> subprocess.CompletedProcess:
    """The sweep's submitting process, forked from the test's fork server (forkserver.py). Its array's tasks are
    the processes SLURM starts, each a relay whose module runs in a fork of that server (forkserver.py's
    `relay_slurm_tasks`), or, with `real_slurm_tasks=True`, a fresh interpreter."""
    return forkserver.run("unlearnbench", command(args, root, sweep, cache)[1:], root, env, timeout=timeout,
                          **options)


def submitting(command: list[str], root: Path, env: dict) -> forkserver.Forked:
    """A sweep's submitting process left running (`Popen`-like), forked as `sweep` forks it."""
    return forkserver.Forked(forkserver.server(), "unlearnbench", command[1:], root, env)


def science(result: dict) -> list[dict]:
    return [r for r in result["records"] if r["metric"] not in COST]


def by_seeds(folder: Path) -> dict[tuple[int, int], dict]:
    return {(r["job"]["seed_train"], r["job"]["seed_unlearn"]): r for r in results(folder).values()}


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def gated(root: Path, hold: int) -> list[str]:
    """A user config dir with the test method `gated` (tests/faulty.py), holding the job of training seed `hold`
    (arguments that go first: Hydra's flags precede the overrides)."""
    folder = root / "user_conf" / "method"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gated.yaml").write_text(f"_target_: faulty.Gated\nname: gated\nfolder: {root}\nseed: ${{seeds.train}}"
                                       f"\nhold: {hold}\n")
    return [f"--config-dir={root / 'user_conf'}", "+method=gated"]


def held_job(root: Path, seed: int, sweep: forkserver.Forked) -> str:
    """The SLURM job id of the held job, once it has reached the gate."""
    marker = root / f"started-{seed}"
    wait_until(lambda: marker.exists() or sweep.poll() is not None, 240, "the held job to start its method")
    assert sweep.poll() is None, sweep.communicate()[1][-3000:]
    return marker.read_text().split()[1]


def test_a_seed_sweep_runs_as_one_array_with_the_local_launchers_records(cluster, tmp_path, shared_cache):
    """Two jobs that need the same M_o, as one array of two tasks running at once on the node's two cores (in a
    cache of their own), and the same jobs on this machine (the suite's cache: test_launcher.py's models). Their
    method is fine-tuning, long enough (110 steps) that the two tasks surely overlap. The tasks are fresh
    interpreters, as outside the tests (the other tests' tasks are forks: `sweep`)."""
    args = [*TINY, "+method=finetune", "seeds.train=0", "seeds.unlearn=0,1"]
    on_slurm = sweep([*args, *SLURM], tmp_path, cluster, "slurm", cache="cache_slurm", real_slurm_tasks=True)
    assert on_slurm.returncode == 0, on_slurm.stderr[-3000:]
    local = sweep(args, tmp_path, cluster, "local", cache=shared_cache)
    assert local.returncode == 0, local.stderr[-3000:]
    slurm_results, local_results = by_seeds(tmp_path / "slurm"), by_seeds(tmp_path / "local")
    assert len(slurm_results) == 2 and slurm_results.keys() == local_results.keys()
    for seeds, result in slurm_results.items():
        assert result["status"] == "complete"
        assert science(result) == science(local_results[seeds]), seeds  # bit for bit
    # one array of two tasks: every job's submitit folder is <array id>_<task>
    tasks = [p.name for p in (tmp_path / "slurm" / ".submitit").glob("[0-9]*_[0-9]*")]
    assert len(tasks) == 2 and len({task.split("_")[0] for task in tasks}) == 1, tasks
    # the submitting side counts the jobs as SLURM finishes them
    counts = [line for line in on_slurm.stdout.splitlines() if re.match(r"\[\d+/\d+ done", line)]
    assert [line.split("/")[0] for line in counts] == ["[1", "[2"] and counts[-1] == "[2/2 done]"
    # the report is built once, on the submitting side, after the last job
    report = tmp_path / "slurm" / "report" / "report.md"
    assert report.exists() and not list((tmp_path / "slurm").glob("*/report"))
    assert report.stat().st_mtime >= max(p.stat().st_mtime for p in (tmp_path / "slurm").glob("*/result.json"))
    # the two jobs ran at the same time and trained M_o once: the cache's lock holds across tasks
    pair = [slurm_results[0, 0], slurm_results[0, 1]]
    assert pair[0]["started"] <= pair[1]["finished"] and pair[1]["started"] <= pair[0]["finished"]
    assert sorted(r["cache"]["original"]["hit"] for r in pair) == [False, True]


def test_a_requeued_job_completes_on_its_second_start(cluster, tmp_path):
    """Preemption as SLURM does it: the running job is killed and requeued; its second start reuses the models it
    had published, the other job is not rerun, and no cache entry is left half-written."""
    running = submitting(command([*gated(tmp_path, hold=1), *TINY, *SLURM, "seeds.train=0,1"], tmp_path, "sweep"),
                         tmp_path, cluster)
    try:
        job = held_job(tmp_path, seed=1, sweep=running)
        subprocess.run(["scontrol", "requeue", job], check=True, env=cluster, timeout=30)
        starts = tmp_path / "started-1"

        def restarted() -> bool:  # SLURM holds a requeued job for a while (BeginTime): release it, as a scheduler
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, env=cluster)
            return len(starts.read_text().splitlines()) == 2

        wait_until(restarted, 180, "the requeued job to start again")
        _, err = running.communicate(timeout=300)
    finally:
        running.kill()
    assert running.returncode == 0, err[-3000:]
    assert len(starts.read_text().splitlines()) == 2  # killed at the gate, then started again
    done = results(tmp_path / "sweep")
    assert [r["status"] for r in done.values()] == ["complete", "complete"]
    second = next(r for r in done.values() if r["job"]["seed_train"] == 1)
    assert second["cache"]["original"]["hit"] and second["cache"]["retrained"][0]["hit"]
    for folder in (tmp_path / "sweep").glob("digits_*"):  # each job wrote its result once
        assert (folder / "unlearnbench.log").read_text().count("result.json written") == 1, folder.name
    cache = tmp_path / "cache"
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".")]  # no scratch left behind
    assert all((entry / "COMPLETE").exists() for entry in cache.iterdir() if entry.is_dir())
    assert "Jobs: 2 (2 complete, 0 failed)" in (tmp_path / "sweep" / "report" / "report.md").read_text()


def test_a_cancelled_job_fails_the_sweep_promptly_and_a_rerun_resumes(cluster, tmp_path, shared_cache):
    args = command([*gated(tmp_path, hold=1), *TINY, *SLURM, "seeds.train=0,1"], tmp_path, "sweep", shared_cache)
    running = submitting(args, tmp_path, cluster)
    try:
        job = held_job(tmp_path, seed=1, sweep=running)
        subprocess.run(["scancel", job], check=True, env=cluster, timeout=30)
        cancelled = time.monotonic()
        _, err = running.communicate(timeout=180)
        waited = time.monotonic() - cancelled
    finally:
        running.kill()
    assert running.returncode == 1
    assert waited < 120  # submitit learns the state from bin/sacct; without it the sweep would wait forever
    (line,) = [x for x in err.splitlines() if x.startswith("FAILED")]
    assert "_gated_t1_u1_e1" in line and f"SLURM job {job}" in line and "CANCELLED" in line
    assert "Traceback" not in err
    done = results(tmp_path / "sweep")
    assert sorted(r["status"] for r in done.values()) == ["complete", "failed"]
    report = (tmp_path / "sweep" / "report" / "report.md").read_text()
    assert "_gated_t1_u1_e1" in report and "CANCELLED" in report

    again = forkserver.run("unlearnbench", args[1:], tmp_path, cluster, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    done = results(tmp_path / "sweep")
    assert [r["status"] for r in done.values()] == ["complete", "complete"]
    finished = next(p for p in (tmp_path / "sweep").glob("*_t0_u0_e0*"))
    assert f"{finished.name}: already complete, skipped" in again.stdout + again.stderr  # seen before submitting
    assert "SLURM: 1 job(s) as one array" in again.stdout + again.stderr  # only the cancelled one runs again


def test_ddp_takes_its_two_ranks_from_slurm_and_rank_0_alone_writes(cluster, tmp_path, shared_cache):
    """Two SLURM tasks per job are the two ranks (gloo on the CPU): the same training and evaluation as two ranks
    that Fabric spawns on one machine, bit for bit: M_o, M_r and an unlearning method's steps (gradient ascent: a
    few all-reduced steps on D_f; fine-tuning's hundred on D_r would add nothing here but time). (Its models, in the
    suite's cache, serve the next tests.)"""
    args = [*TINY, "+method=gradient_ascent", "runtime.threads=1"]
    on_slurm = sweep([*args, *SLURM, "strategy=ddp", "strategy.devices=2"], tmp_path, cluster, "slurm",
                     cache=shared_cache)
    assert on_slurm.returncode == 0, on_slurm.stderr[-3000:]
    spawned = sweep([*args, "strategy=ddp_spawn", "strategy.devices=2"], tmp_path, cluster, "spawn")
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    (two_tasks,), (two_spawned,) = results(tmp_path / "slurm").values(), results(tmp_path / "spawn").values()
    assert two_tasks["numerics"]["world_size"] == 2 and two_tasks["numerics"]["strategy"] == "ddp"
    assert not two_tasks["cache"]["original"]["hit"] and not two_tasks["cache"]["retrained"][0]["hit"]  # trained
    assert science(two_tasks) == science(two_spawned)
    (folder,) = (tmp_path / "slurm").glob("digits_*")
    log = (folder / "unlearnbench.log").read_text()
    assert log.count("result.json written") == 1 and "written by rank 0 of 2" in log
    task_logs = sorted((tmp_path / "slurm" / ".submitit").glob("*/*_log.out"))
    assert len(task_logs) == 2  # one per rank


def rank_faulty(root: Path, name: str, options: str) -> str:
    """A user config dir with one rank-faulty test method (tests/faulty.py), as the first argument."""
    folder = root / "user_conf" / "method"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(f"name: {name}\n{options}\n")
    return f"--config-dir={root / 'user_conf'}"


def test_a_killed_ddp_task_ends_its_job_promptly_naming_the_task(cluster, tmp_path, shared_cache):
    """Rank 1 of a two-task job is killed inside a method (`KillingRank`): SLURM ends the other task
    (--kill-on-bad-exit), the sweep exits 1 well within the process group's timeout, and the job's result names the
    task that died."""
    args = [rank_faulty(tmp_path, "rankkill", "_target_: faulty.KillingRank"), *TINY, *SLURM, "strategy=ddp",
            "strategy.devices=2", "methods=[rankkill,gradient_ascent]", "strategy.timeout_s=600"]
    start = time.monotonic()
    run = sweep(args, tmp_path, cluster, "sweep", cache=shared_cache)
    assert run.returncode == 1 and time.monotonic() - start < 240, run.stderr[-3000:]
    (result,) = results(tmp_path / "sweep").values()
    assert result["status"] == "failed" and ": task 1: Killed; " in result["error"], result["error"]
    assert "task 0" not in result["error"]  # killed by SLURM for task 1's death: not named as a cause
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("FAILED")]
    assert "task 1: Killed" in line and "Traceback" not in run.stderr


def test_a_ddp_method_failing_on_one_task_stops_its_job_with_that_tasks_message(cluster, tmp_path, shared_cache):
    """Rank 1 fails inside the method while rank 0 waits in an all-reduce that rank 1 never joins (`FailingOnRank`,
    stuck). Ranks that SLURM started cannot be started again from inside the job: it stops there, failed with rank
    1's own message, the records of gradient_ascent (before it: the methods run in the registry's order) kept, ssd
    (after it) not run."""
    args = [rank_faulty(tmp_path, "rankstuck", "_target_: faulty.FailingOnRank\nstuck: true"), *TINY, *SLURM,
            "strategy=ddp", "strategy.devices=2", "methods=[gradient_ascent,rankstuck,ssd]", "strategy.timeout_s=600"]
    start = time.monotonic()
    run = sweep(args, tmp_path, cluster, "sweep", cache=shared_cache)
    assert run.returncode == 1 and time.monotonic() - start < 240, run.stderr[-3000:]
    (result,) = results(tmp_path / "sweep").values()
    assert result["status"] == "failed"
    assert result["error"] == ("target 3, method rankstuck: on rank 1: RuntimeError: out of memory on rank 1; the "
                               "ranks could not go on in step, so the job stopped there (rerun it to run the rest)")
    assert {r["method"] for r in result["records"]} == {None, "gradient_ascent"}
    assert "Traceback" not in run.stderr
