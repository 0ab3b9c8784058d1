"""The trackers against their real components: a real `mlflow server` (SQLite, a free port on 127.0.0.1, started
and stopped here) and one tiny two-job sweep logged to MLflow, TensorBoard and W&B (offline: no key, no
`WANDB_MODE`) at once, read back with each tracker's own reader; a rerun into the same sweep folder that adds
nothing; a server stopped mid-sweep that costs no result; and a tracker whose client is not installed, refused in
one line before any job. Nothing here downloads anything.

One sweep serves every reading (module fixture), so the module costs the server's start, two sweeps and a rerun.
The fault test stops the server: it runs last."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import forkserver
import pytest
from helpers import TINY, results, run_cli
from omegaconf import OmegaConf

from unlearnbench.report.read.collect import result_files
from unlearnbench.runtime.errors import EndSweep
from unlearnbench.track.callback import TrackCallback

SWEEP = ["seeds.train=range(2)", "+method=ssd", *TINY]
TRACKERS = "logger=[mlflow,tensorboard,wandb]"
START_S = 180  # the server's start on a loaded 2-core machine (about 15 s)


@dataclass
class Server:
    url: str
    store: Path  # its SQLite file: what the rerun test counts rows of
    process: subprocess.Popen


@dataclass
class Sweep:
    folder: Path
    output: str  # stdout and stderr of the console script
    results: dict[str, dict]  # result.json by job folder name


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def stop(process: subprocess.Popen) -> None:
    """End the server and the workers it started (its own process group), by their group id."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` on a free port of 127.0.0.1, its store a SQLite file and its artifacts a folder of the test's
    own, alive until the module ends (or the fault test stops it)."""
    root = tmp_path_factory.mktemp("mlflow_server")
    url = f"http://127.0.0.1:{free_port()}"
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
               "--port", url.rsplit(":", 1)[1], "--workers", "1",
               "--backend-store-uri", f"sqlite:///{root / 'store.db'}", "--artifacts-destination", str(root / "art")]
    # without MLflow 3's job runner: its seven huey consumers import MLflow for about 25 s of CPU, and no request
    # of ours is a job
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | {
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(root / "server.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env,
                                   start_new_session=True)
    try:
        forkserver.server()  # the sweeps' fork server imports torch while the MLflow server starts
        deadline = time.monotonic() + START_S
        while not healthy(url):
            assert process.poll() is None, (root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the MLflow server did not answer /health"
            time.sleep(0.2)
        yield Server(url, root / "store.db", process)
    finally:
        stop(process)


def tracker_env(server: Server) -> dict:
    """The environment of a sweep: the server's URI, and W&B with neither a key nor a mode (offline by default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WANDB_"))}
    return env | {"MLFLOW_TRACKING_URI": server.url}


@pytest.fixture(scope="module")
def sweep(server, shared_cache, tmp_path_factory) -> Sweep:
    root = tmp_path_factory.mktemp("tracked")
    run = run_cli([*SWEEP, TRACKERS, f"paths.cache_dir={shared_cache}"], root, env=tracker_env(server))
    assert run.returncode == 0, run.stderr[-3000:]
    found = results(root / "sweep")
    assert len(found) == 2 and all(r["status"] == "complete" for r in found.values())
    return Sweep(root / "sweep", run.stdout + run.stderr, found)


def client(server: Server):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=server.url)


def runs_of(server: Server, experiment: str) -> tuple[object, list]:
    """(the sweep's run, its job runs) in the experiment of that name."""
    found = client(server).get_experiment_by_name(experiment)
    runs = client(server).search_runs([found.experiment_id])
    kinds = {kind: [r for r in runs if r.data.tags.get("unlearnbench.kind") == kind] for kind in ("sweep", "job")}
    assert len(kinds["sweep"]) == 1 and len(runs) == 1 + len(kinds["job"])
    return kinds["sweep"][0], kinds["job"]


def final_name(record: dict) -> str:
    """A final record's metric in MLflow (`<role>/<method or role>/<metric>/<split>`, one target)."""
    parts = [record["role"], record["method"] or record["role"], record["metric"], record["split"]]
    return "/".join(part for part in parts if part is not None)


@pytest.mark.processes
def test_trackers_mlflow_server_holds_each_job_as_a_run_under_the_sweeps(server, sweep):
    mlflow = client(server)
    sweep_run, jobs = runs_of(server, "sweep")
    assert {run.info.run_name for run in jobs} == set(sweep.results)
    for run in jobs:
        result, folder = sweep.results[run.info.run_name], sweep.folder / run.info.run_name
        assert run.data.tags["mlflow.parentRunId"] == sweep_run.info.run_id and run.info.status == "FINISHED"
        assert {k: run.data.tags[k] for k in ("seed_train", "seed_unlearn", "method", "dataset", "status")} == {
            "seed_train": str(result["job"]["seed_train"]), "seed_unlearn": str(result["job"]["seed_unlearn"]),
            "method": "ssd", "dataset": "digits", "status": "complete"}
        params = run.data.params
        assert (params["seeds.train"], params["train.epochs"], params["method.name"]) == (
            str(result["job"]["seed_train"]), "3", "ssd")
        assert not [name for name in params if name.startswith(("logger", "hydra"))]
        curve = next(c for c in result["curves"] if c["model"] == "original")
        history = sorted((m.step, m.value) for m in mlflow.get_metric_history(run.info.run_id, "curve/original/loss"))
        assert history == list(zip(curve["epoch"], curve["loss"], strict=True))
        finals = {final_name(r): r["value"] for r in result["records"]
                  if r.get("step") is None and r["value"] is not None}
        assert len(finals) > 30 and {name: run.data.metrics[name] for name in finals} == finals
        copy = mlflow.download_artifacts(run.info.run_id, "result.json", str(folder.parent.parent / run.info.run_id))
        assert json.loads(Path(copy).read_text()) == result
        assert json.loads((folder / "tracking.json").read_text())["job"]["mlflow"]["logged"] is True
    report = {f"report/{path.name}" for path in (sweep.folder / "report").iterdir()}
    assert {a.path for a in mlflow.list_artifacts(sweep_run.info.run_id, "report")} == report
    assert "report/report.md" in report and sweep_run.info.status == "FINISHED"
    assert "tracker " not in sweep.output  # no tracker failed


def counts(server: Server) -> dict[str, int]:
    """Rows of the server's store: runs, metric points, params, artifacts are files (counted by the readback)."""
    with sqlite3.connect(f"file:{server.store}?mode=ro", uri=True) as store:
        return {table: store.execute(f"select count(*) from {table}").fetchone()[0]
                for table in ("experiments", "runs", "metrics", "params", "tags")}


@pytest.mark.processes
def test_trackers_a_rerun_into_the_same_sweep_adds_no_run_and_no_point(server, sweep, shared_cache):
    before = counts(server)
    assert before["runs"] == 3 and before["metrics"] > 100
    run = run_cli([*SWEEP, TRACKERS, f"paths.cache_dir={shared_cache}"], sweep.folder.parent,
                  env=tracker_env(server))
    assert run.returncode == 0, run.stderr[-3000:]
    assert counts(server) == before
    assert "tracker " not in run.stdout + run.stderr


@pytest.mark.processes
def test_trackers_tensorboard_event_files_match_the_results(sweep):
    from readback import assert_tensorboard_matches

    assert_tensorboard_matches(sweep.folder, sweep.results)


@pytest.mark.processes
def test_trackers_wandb_offline_files_match_the_results(sweep):
    from readback import assert_wandb_matches

    assert_wandb_matches(sweep.folder, sweep.results)
    # W&B's runs hold copies of result.json (`<job>/wandb/offline-run-…/files/`): the report reads none as a job
    assert result_files([sweep.folder]) == sorted(sweep.folder / name / "result.json" for name in sweep.results)


@pytest.mark.parametrize("name, target", [("mlflow", "unlearnbench.track.mlflow.MlflowTracker"),
                                          ("wandb", "unlearnbench.track.wandb.WandbTracker")])
def test_trackers_a_missing_client_is_refused_in_one_line_before_any_job(monkeypatch, tmp_path, name, target):
    monkeypatch.setitem(sys.modules, name, None)  # `import <name>` fails as where it is not installed
    config = OmegaConf.create({"logger": {name: {"_target_": target}},
                               "hydra": {"mode": "MULTIRUN", "sweep": {"dir": str(tmp_path / "sweep")}}})
    with pytest.raises(EndSweep) as refused:
        TrackCallback().on_multirun_start(config)
    assert str(refused.value) == f"logger={name} needs its client: pip install 'unlearnbench[{name}]'"
    assert not (tmp_path / "sweep").exists()


def stop_when_a_job_is_logged(sweep: Path, server: Server) -> threading.Thread:
    """A watcher that kills the server as soon as a job of the sweep has its MLflow run logged (before the next)."""
    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for state in sweep.glob("*/tracking.json"):
                if '"logged": true' in state.read_text():
                    os.killpg(server.process.pid, signal.SIGKILL)
                    return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.processes
def test_trackers_a_server_stopped_mid_sweep_loses_no_result(server, sweep, shared_cache, tmp_path):
    """The server dies after the first job is logged: the second job still writes its complete result, the sweep
    exits 0 with its report, and one warning line names the tracker and the job's folder."""
    watcher = stop_when_a_job_is_logged(tmp_path / "fault", server)
    run = run_cli([*SWEEP, "logger=mlflow", f"paths.cache_dir={shared_cache}"], tmp_path, sweep="fault",
                  env=tracker_env(server))
    watcher.join(5)
    assert server.process.wait(10) is not None
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    found = results(tmp_path / "fault")
    assert len(found) == 2 and all(r["status"] == "complete" for r in found.values())
    states = {name: tmp_path / "fault" / name / "tracking.json" for name in found}
    logged = {name for name, state in states.items()
              if state.is_file() and json.loads(state.read_text())["job"]["mlflow"]["logged"]}
    (unlogged,) = set(found) - logged
    warned = [line for line in output.splitlines() if "tracker mlflow:" in line]
    assert len([line for line in warned if unlogged in line]) == 1, warned
    assert (tmp_path / "fault" / "report" / "report.md").is_file()
