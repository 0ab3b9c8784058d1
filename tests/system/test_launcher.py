"""`hydra/launcher=local`: several jobs at once, with the basic launcher's records, one report, one training per
cached model, one FAILED line per failed job, and Ctrl-C that ends every worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from helpers import QUICK_REPORT, TINY, results, run_cli, with_defaults

from hydra_plugins.unlearnbench_launcher import local
from unlearnbench.runtime.progress import SweepProgress

TESTS = Path(__file__).resolve().parent.parent
COST = ("time_s", "memory_gib", "utilisation_pct")
UNSET_THREADS = [o for o in TINY if not o.startswith("runtime.threads=")]
# Two jobs that need the same M_o, with a method of a few steps (gradient ascent on D_f: 5 steps against
# fine-tuning's 110 on D_r): the tests read the models, the records and the launchers, which any method gives.
SWEEP = ["+method=gradient_ascent", "seeds.train=0", "seeds.unlearn=range(2)"]


def science(result: dict) -> list[dict]:
    return [r for r in result["records"] if r["metric"] not in COST]


def strip(rows: list[dict], key: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k != key} for row in rows]


def by_seeds(folder: Path) -> dict[tuple, dict]:
    return {(r["job"]["seed_train"], r["job"]["seed_unlearn"]): r for r in results(folder).values()}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory, shared_cache):
    """The same two jobs under the basic launcher at one thread (its models in the suite's cache, where SLURM's test
    finds them) and under `local` with threads unset in a cache of its own; then again on that cache (every model
    from it). The two jobs share M_o: under `local` they run at once and need it at once."""
    root = tmp_path_factory.mktemp("launchers")
    basic = run_cli([*SWEEP, *TINY, f"paths.cache_dir={shared_cache}"], root, sweep="basic")
    parallel = run_cli([*SWEEP, *UNSET_THREADS, "hydra/launcher=local", "hydra.launcher.workers=2"], root,
                       sweep="local")
    again = run_cli([*SWEEP, *TINY], root, sweep="again")
    return root, basic, parallel, again


@pytest.mark.processes
def test_local_records_equal_the_basic_launchers_at_the_same_threads(sweeps):
    root, basic, parallel, _ = sweeps
    assert basic.returncode == 0 and parallel.returncode == 0, parallel.stderr
    one, two = by_seeds(root / "basic"), by_seeds(root / "local")
    assert sorted(one) == sorted(two) == [(0, 0), (0, 1)]
    for seeds in one:
        assert two[seeds]["numerics"] == one[seeds]["numerics"] and two[seeds]["numerics"]["threads"] == 1
        assert science(two[seeds]) == science(one[seeds])  # bit for bit: the same float trajectory
        # the same curves; which of the two jobs trained the shared M_o (`cached`) is the launcher's order
        assert strip(two[seeds]["curves"], "cached") == strip(one[seeds]["curves"], "cached")


@pytest.mark.processes
def test_the_basic_launcher_counts_its_jobs_too(sweeps):
    _, basic, _, _ = sweeps
    counts = [line for line in basic.stdout.splitlines() if re.match(r"\[\d+/\d+ done", line)]
    assert len(counts) == 2 and counts[0].startswith("[1/2 done, ETA ") and counts[1] == "[2/2 done]"


@pytest.mark.processes
def test_local_runs_its_workers_side_by_side_and_reports_once(sweeps):
    root, _, parallel, _ = sweeps
    output = parallel.stdout + parallel.stderr
    assert "local: 2 job(s), 2 at once on the CPU, 1 thread(s) each" in output
    assert sorted(p.name for p in (root / "local" / local.SLOTS).iterdir()) == ["slot-0.lock", "slot-1.lock"]
    first, second = by_seeds(root / "local").values()  # the two jobs ran at the same time
    assert first["started"] <= second["finished"] and second["started"] <= first["finished"]
    lines = {line.split(": ", 1)[0].rsplit("] ", 1)[-1] for line in output.splitlines() if "] job " in line}
    assert lines == {"job 0", "job 1"}  # each worker's lines carry its job's number
    assert parallel.stdout.count("report: started") == 1 and parallel.stdout.count("report: done in") == 1
    assert "[1/2 done" in parallel.stdout and "[2/2 done]" in parallel.stdout
    assert (root / "local" / "report" / "results.csv").exists()


@pytest.mark.processes
def test_a_cache_hit_keeps_the_models_curves(sweeps):
    root, _, _, again = sweeps
    assert again.returncode == 0, again.stderr
    first, second = by_seeds(root / "local"), by_seeds(root / "again")
    for seeds, result in second.items():
        assert result["cache"]["original"]["hit"] and all(r["hit"] for r in result["cache"]["retrained"])
        trained = {c["model"]: c for c in first[seeds]["curves"] if c["model"] != "unlearned"}
        cached = {c["model"]: c for c in result["curves"] if c["model"] != "unlearned"}
        assert set(cached) == {"original", "retrained"}
        assert not trained["retrained"]["cached"]  # each job's own M_r; M_o was trained by one of them
        for model, curve in cached.items():
            assert curve["cached"]
            assert {k: curve[k] for k in ("epoch", "loss", "train_acc", "lr")} == \
                   {k: trained[model][k] for k in ("epoch", "loss", "train_acc", "lr")}
            assert curve["epoch"] == [1, 2, 3]  # TINY's train.epochs


@pytest.mark.processes
def test_a_model_that_two_parallel_jobs_need_is_trained_once(sweeps):
    root, _, parallel, _ = sweeps
    assert parallel.returncode == 0, parallel.stderr
    hits = sorted(r["cache"]["original"]["hit"] for r in results(root / "local").values())
    assert hits == [False, True]  # one worker trained M_o under the cache's lock, the other waited and read it
    trained = [r for r in results(root / "local").values() if not r["cache"]["original"]["hit"]]
    assert [c["cached"] for c in trained[0]["curves"] if c["model"] == "original"] == [False]
    keys = {r["cache"]["original"]["key"] for r in results(root / "local").values()}
    assert len(keys) == 1 and len(list((root / "cache").glob(f"{keys.pop()}/weights.safetensors"))) == 1


def faulty_user_config(root: Path) -> Path:
    folder = root / "user_conf" / "method"
    folder.mkdir(parents=True)
    (folder / "crashing.yaml").write_text("_target_: faulty.Crashing\nname: crashing\n")
    return root / "user_conf"


@pytest.mark.processes
def test_a_failed_job_is_one_failed_line_and_the_sweep_exits_1(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    run = run_cli([f"--config-dir={faulty_user_config(tmp_path)}", "+method=crashing,gradient_ascent", *UNSET_THREADS,
                   "hydra/launcher=local", "hydra.launcher.workers=2", f"paths.cache_dir={shared_cache}"], tmp_path)
    assert run.returncode == 1, run.stderr
    failed = [line for line in run.stderr.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "crashing" in failed[0]
    assert "[2/2 done, 1 failed]" in run.stdout
    assert "Traceback" not in run.stderr
    statuses = sorted(r["status"] for r in results(tmp_path / "sweep").values())
    assert statuses == ["complete", "failed"]


INTERRUPTED = ["+method=finetune", "seeds.train=range(3)", *UNSET_THREADS, "hydra/launcher=local",
               "hydra.launcher.workers=2"]


def interrupted_run(root: Path, how: str, cache: Path) -> dict:
    """The sweep INTERRUPTED started as a user starts it (its own process group, Python's default SIGINT), forked
    from the test's fork server (forkserver.py: a real process without the console script's imports). Ctrl-C, to
    the whole group (the workers too), once its first job has finished; SIGTERM, to the sweep alone, once a worker
    has started a job's stage (its lines so far are kept)."""
    args = [*with_defaults(INTERRUPTED, QUICK_REPORT), f"hydra.sweep.dir={root / 'sweep'}", f"paths.cache_dir={cache}",
            f"paths.data_dir={root / 'data'}"]
    before = len(results(root / "sweep"))
    process = forkserver.Forked(forkserver.server(), "unlearnbench", args, root,
                                {**os.environ, "PYTHONWARNINGS": "ignore"}, new_session=True, sigint_default=True)
    seen = ""
    if how == "ctrl-c":  # a terminal's Ctrl-C reaches the whole process group: the workers too
        deadline = time.time() + 300
        while not results(root / "sweep") and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
    else:
        for line in process.stdout:
            seen += line
            if re.search(r"\] job \d+: .*: started", line):
                break
        process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    stdout = seen + stdout
    deadline = time.time() + 30
    while alive(process.pid) and time.time() < deadline:  # the workers are ended with the sweep
        time.sleep(0.05)
    return {"returncode": process.returncode, "stdout": stdout, "stderr": stderr, "alive": alive(process.pid),
            "before": before, "finished": results(root / "sweep")}


@pytest.fixture(scope="module")
def interruptions(tmp_path_factory, shared_cache):
    """A three-job sweep on two workers stopped by Ctrl-C once its first job has finished; the same command again,
    stopped by SIGTERM once its workers are at work; then once more, to its end. Its models come from the suite's
    cache (the workers' one thread each gives TINY's keys): the third job cannot finish within the moment between
    the first result and Ctrl-C, nor a job within the moment between its first stage's line and SIGTERM."""
    root = tmp_path_factory.mktemp("interrupted")
    runs = {how: interrupted_run(root, how, shared_cache) for how in ("ctrl-c", "sigterm")}
    return runs, run_cli([*INTERRUPTED, f"paths.cache_dir={shared_cache}"], root), root


@pytest.mark.processes
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupting_a_local_sweep_stops_every_worker_and_a_rerun_resumes(interruptions, how):
    """The launching process only waits for its workers: the interrupt stops it at once (runtime/interrupt.py), and
    it ends the workers, which a terminal's Ctrl-C reaches too and which leave the stopping to it. The rerun after
    it starts workers for the jobs left only."""
    runs, resumed, _ = interruptions
    run = runs[how]
    assert run["returncode"] == 130, run["stderr"]
    assert "Traceback" not in run["stderr"] + run["stdout"]
    assert run["stderr"].strip().splitlines()[-1].startswith("unlearnbench: interrupted; finished jobs are kept")
    assert not run["alive"]
    finished = run["finished"]
    assert 1 <= len(finished) < 3 and all(r["status"] == "complete" for r in finished.values())
    after = runs["sigterm"] if how == "ctrl-c" else {"stdout": resumed.stdout, "stderr": resumed.stderr}
    output = after["stdout"] + after["stderr"]
    assert output.count("already complete, skipped") == len(finished)
    assert f"local: {3 - len(finished)} job(s)" in output  # workers for the jobs left only (resume.py)


@pytest.mark.processes
def test_an_interrupted_local_sweep_resumes_to_its_end(interruptions):
    _, resumed, root = interruptions
    assert resumed.returncode == 0, resumed.stderr
    assert len(results(root / "sweep")) == 3 and all(r["status"] == "complete"
                                                     for r in results(root / "sweep").values())


def alive(group: int) -> bool:
    """Whether any process of the process group `group` is still running (zombies excluded)."""
    listing = subprocess.run(["ps", "-o", "stat=", "-g", str(group)], capture_output=True, text=True).stdout
    return any(not state.startswith("Z") for state in listing.split())


@pytest.mark.processes
@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_a_bad_worker_count_is_one_line(tmp_path, value):
    run = run_cli(["+method=finetune", *TINY, "hydra/launcher=local", f"hydra.launcher.workers={value}"], tmp_path)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    assert "the 'workers' option of hydra.launcher must be a whole number of at least 1" in \
        run.stderr.strip().splitlines()[-1]
    assert not list((tmp_path / "sweep").glob("*/result.json"))


def fake_machine(monkeypatch, cores: int, gpus: list[str]) -> None:
    monkeypatch.setattr(local, "cores", lambda: cores)
    monkeypatch.setattr(local, "visible_gpus", lambda accelerator: [] if accelerator == "cpu" else gpus)


def sweep_config(threads=None, accelerator="auto", devices=1):
    from omegaconf import OmegaConf

    return OmegaConf.create({"runtime": {"threads": threads, "accelerator": accelerator},
                             "strategy": {"devices": devices}})


def test_without_gpus_the_workers_are_cores_over_threads(monkeypatch, tmp_path):
    fake_machine(monkeypatch, cores=16, gpus=[])
    placement = local.place(None, 1, sweep_config(), tmp_path)
    assert (placement.workers, placement.threads, placement.devices(3)) == (16, 1, None)
    placement = local.place(None, 1, sweep_config(threads=4), tmp_path)
    assert (placement.workers, placement.threads) == (4, 4)
    placement = local.place(3, 1, sweep_config(), tmp_path)  # fewer workers: the threads share the cores
    assert (placement.workers, placement.threads) == (3, 5)


def test_with_gpus_each_worker_sees_its_own(monkeypatch, tmp_path):
    fake_machine(monkeypatch, cores=16, gpus=["4", "5", "6", "7"])
    placement = local.place(None, 1, sweep_config(), tmp_path)
    assert placement.workers == 4 and [placement.devices(s) for s in range(4)] == ["4", "5", "6", "7"]
    assert placement.threads == 4
    shared = local.place(None, 2, sweep_config(), tmp_path)  # jobs_per_gpu=2: two workers per GPU
    assert shared.workers == 8 and [shared.devices(s) for s in range(8)] == ["4", "4", "5", "5", "6", "6", "7", "7"]
    pairs = local.place(None, 2, sweep_config(devices=2), tmp_path)  # a two-device job gets two GPUs
    assert pairs.workers == 2 and [pairs.devices(s) for s in range(2)] == ["4,5", "6,7"]
    on_cpu = local.place(None, 1, sweep_config(accelerator="cpu"), tmp_path)
    assert on_cpu.workers == 16 and on_cpu.devices(0) is None


@pytest.mark.processes
def test_each_worker_process_holds_its_own_slot_and_gpu(tmp_path):
    placement = local.Placement(workers=2, gpu_groups=("3", "5"), jobs_per_gpu=1, threads=1,
                                folder=str(tmp_path / local.SLOTS))
    script = ("import os, sys, time; from hydra_plugins.unlearnbench_launcher import local; "
              f"p = local.Placement(2, ('3', '5'), 1, 1, {placement.folder!r}); s = local.take_slot(p); "
              "assert local.take_slot(p) == s; print(s, os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
              "time.sleep(3)")
    workers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    seen = sorted(tuple(w.communicate(timeout=60)[0].split()) for w in workers)
    assert seen == [("0", "3"), ("1", "5")]


def test_the_sweep_line_counts_failures_and_estimates_from_the_jobs_run(monkeypatch):
    clock = [2.0e9]  # 2033: the first result is from 2000 (an earlier run), the second from 2100
    monkeypatch.setattr(time, "time", lambda: clock[0])
    sweep = SweepProgress(total=125, live=False)
    assert sweep.finished({"status": "complete", "finished": "2000-01-01T00:00:00+00:00"}) == "[1/125 done]"
    clock[0] += 60
    assert sweep.finished({"status": "failed", "finished": "2100-01-01T00:00:00+00:00"}) == \
        "[2/125 done, 1 failed, ETA 2 h 03 min]"  # 1 job run in 60 s, 123 left (the skipped took no time)
    clock[0] += 60
    assert sweep.finished(None) == "[3/125 done, 2 failed, ETA 2 h 02 min]"
    assert SweepProgress(total=None, live=False).finished({"status": "complete"}) == "[1 done]"


@pytest.mark.processes
def test_runtime_progress_false_keeps_the_console_quiet_and_the_log_whole(tmp_path):
    run = run_cli(["+method=gradient_ascent", *TINY, "runtime.progress=false"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "epoch 1/3" not in run.stdout + run.stderr and "done]" not in run.stdout
    (job,) = (tmp_path / "sweep").glob("*/unlearnbench.log")
    text = job.read_text()
    for title in ("original model (training seed 0)", "target 3: retrained model (unlearning seed 0)",
                  "target 3: gradient_ascent"):
        assert text.count(f"{title}: epoch ") == (3 if "gradient_ascent" not in title else 5), title
        assert f"{title}: started" in text and f"{title}: done in" in text
    assert "original model (training seed 0): done in" in run.stdout + run.stderr  # stage lines stay
    result = json.loads(next((tmp_path / "sweep").glob("*/result.json")).read_text())
    assert [c["model"] for c in result["curves"]] == ["original", "retrained", "unlearned"]


@pytest.mark.processes
def test_hydras_plugin_scan_loads_the_launcher_modules():
    """Hydra executes every module under `hydra_plugins` it can list (a regular install, or the repository as the
    working folder) outside `sys.modules`: a module that cannot load so breaks every Hydra process, a submitit job's
    included."""
    script = ("import warnings; warnings.simplefilter('error'); from hydra.core.plugins import Plugins; "
              "from hydra.plugins.launcher import Launcher; "
              "names = {p.__name__ for p in Plugins.instance().discover(Launcher)}; "
              "assert {'LocalLauncher', 'SlurmLauncher'} <= names, names; print('scanned')")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=TESTS.parent,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "scanned", run.stderr
