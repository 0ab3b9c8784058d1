"""TensorBoard and W&B (offline) against their own clients and readers, in this process: a fabricated job (training
curves, dynamics points, final records, params, tags, its result.json) logged by each tracker into a sweep folder of
the test's own, and read back with TensorBoard's `EventAccumulator` and from W&B's run file (tests/track/readback.py,
which the shared sweep of test_trackers.py uses too); a resumed log that adds nothing twice; the sweep's report as
TensorBoard text; W&B's mode as its users expect (option > `WANDB_MODE` > online with a key, offline without one),
and its key nowhere but in the environment. Nothing here reaches the network: a name lookup fails the test."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from helpers import compose_config
from omegaconf import OmegaConf
from readback import (
    assert_tensorboard_matches,
    assert_wandb_matches,
    tensorboard_text,
    wandb_runs,
)

from unlearnbench.runtime.errors import UserError
from unlearnbench.track import callback
from unlearnbench.track.content import job_log
from unlearnbench.track.tensorboard import TensorBoardTracker, table
from unlearnbench.track.wandb import WandbTracker

SECRET = "0123456789abcdef0123456789abcdef01234567"  # a W&B key's shape: 40 characters
OFFLINE_S = 60  # one offline run's whole log on a loaded 2-core machine (about 2 s): no network wait hides in it


def fabricated_result(seed: int) -> dict:
    """A result document in result.json's shape: curves of M_o and a training method, final records of three roles,
    dynamics records (with a step), one null value."""
    curves = [{"model": "original", "target": None, "method": None, "seed": seed, "cached": False,
               "epoch": [1, 2, 3], "loss": [2.0, 1.25, 0.5], "lr": [0.05, 0.05, 0.005]},
              {"model": "unlearned", "target": None, "method": "finetune", "seed": seed, "cached": False,
               "epoch": [1, 2], "loss": [0.75, 0.25]}]
    final = [("original", None, "acc", "test", 0.875), ("retrained", None, "acc", "forget", 0.0625),
             ("unlearned", "finetune", "acc", "forget", 0.125 + seed), ("unlearned", "finetune", "time_s", None, 1.5),
             ("unlearned", "finetune", "mia", "forget", None)]
    records = [{"target": None, "method": method, "role": role, "metric": metric, "split": split, "value": value}
               for role, method, metric, split, value in final]
    records += [{"target": None, "method": "finetune", "role": "unlearned", "metric": "acc", "split": "forget",
                 "step": step, "epoch": 0, "value": value} for step, value in ((0, 0.875), (5, 0.5), (10, 0.25))]
    return {"schema": 2, "status": "complete", "error": None, "started": "2026-12-07T09:32:15+00:00",
            "finished": "2026-12-07T09:32:17+00:00",
            "job": {"task": "image", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
                    "method": "finetune", "seed_train": seed, "seed_unlearn": 0, "seed_eval": 0},
            "curves": curves, "records": records}


def fabricated_job(sweep: Path, seed: int):
    """A job folder with its result.json, and what it logs (track/content.py's `job_log`)."""
    folder = sweep / f"seeds.train={seed}"
    folder.mkdir(parents=True)
    result = fabricated_result(seed)
    (folder / "result.json").write_text(json.dumps(result))
    config = OmegaConf.create({"seeds": {"train": seed, "unlearn": 0}, "train": {"epochs": 3, "lr": 0.05},
                               "method": {"name": "finetune"}, "logger": {"wandb": {"project": "p"}}})
    return job_log(config, result, folder, sweep), result


@pytest.fixture
def no_network(monkeypatch):
    """Fail any name lookup of this process (W&B's analytics thread included) instead of waiting for it."""
    looked_up = []

    def refuse(host, *args, **kwargs):
        looked_up.append(host)
        raise OSError(f"no network in this test: {host}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return looked_up


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    """W&B with neither key nor mode, its settings and caches in the test's folder, no .netrc."""
    for variable in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR"):
        monkeypatch.delenv(variable, raising=False)
    for variable, folder in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"),
                             ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(variable, str(tmp_path / "wandb_home" / folder))
    monkeypatch.setenv("NETRC", str(tmp_path / "no.netrc"))


def begun(tracker, sweep: Path):
    """The tracker with its sweep begun, as the callback leaves it before the first job."""
    tracker.sweep_state = tracker.begin_sweep(sweep.name)
    return tracker


def test_tensorboard_event_files_hold_every_point_and_the_params(tmp_path):
    sweep = tmp_path / "sweep"
    jobs = [fabricated_job(sweep, seed) for seed in (0, 1)]
    tracker = begun(TensorBoardTracker({}, sweep), sweep)
    states = {job.name: tracker.log_job(job, {}) for job, _ in jobs}
    assert_tensorboard_matches(sweep, {job.name: result for job, result in jobs})
    for job, _ in jobs:
        assert states[job.name] == {"run": job.name, "files": sorted(p.name for p in job.folder.glob("events.*")),
                                    "logged": True}
        assert len(states[job.name]["files"]) == 1
        assert "| dataset | digits |" in tensorboard_text(job.folder, "tags")
        assert "logger" not in tensorboard_text(job.folder, "params")  # the trackers' options are never a param


def test_tensorboard_a_resumed_log_replaces_an_earlier_attempt_and_a_logged_job_is_left_alone(tmp_path):
    sweep = tmp_path / "sweep"
    job, result = fabricated_job(sweep, 3)
    tracker = begun(TensorBoardTracker({}, sweep), sweep)
    first = tracker.log_job(job, {})
    (job.folder / first["files"][0]).rename(job.folder / "events.out.tfevents.1.cut-short.unlearnbench")
    second = tracker.log_job(job, {})  # an attempt whose state was never kept: its file is found by its suffix
    assert len(second["files"]) == 1 and second["files"] != ["events.out.tfevents.1.cut-short.unlearnbench"]
    assert_tensorboard_matches(sweep, {job.name: result})  # every point once
    assert tracker.log_job(job, second) == second
    assert sorted(p.name for p in job.folder.glob("events.*")) == second["files"]


def test_tensorboard_the_sweeps_report_is_the_text_of_a_run_of_its_own_once(tmp_path):
    sweep = tmp_path / "sweep"
    job, result = fabricated_job(sweep, 0)
    (sweep / "report").mkdir()
    (sweep / "report" / "report.md").write_text("# Report\n\n| method | acc |\n|---|---|\n| finetune | 0.125 |\n")
    tracker = begun(TensorBoardTracker({}, sweep), sweep)
    tracker.log_job(job, {})
    for _ in range(2):  # a rerun's end rewrites it
        tracker.end_sweep(sweep.name, sweep / "report")
    assert_tensorboard_matches(sweep, {job.name: result})
    assert len(list((sweep / "_report").glob("events.*"))) == 1
    assert tensorboard_text(sweep / "_report", "report").startswith("# Report")
    assert list((sweep / "report").iterdir()) == [sweep / "report" / "report.md"]  # the report folder untouched
    tracker.end_sweep(sweep.name, None)  # no report (every job failed): nothing to add


def test_tensorboard_text_tables_keep_a_bar_inside_its_cell():
    assert table({"method.name": "ga|gd", "seeds.train": "0"}) == (
        "| name | value |\n|---|---|\n| method.name | ga\\|gd |\n| seeds.train | 0 |")


def test_tensorboard_takes_no_option_and_a_missing_client_names_its_extra(monkeypatch, tmp_path):
    with pytest.raises(UserError) as refused:
        TensorBoardTracker({"logdir": "x"}, tmp_path)
    assert str(refused.value) == "logger.tensorboard: unknown option logdir; valid options: "
    monkeypatch.setitem(__import__("sys").modules, "tensorboard", None)
    assert TensorBoardTracker.missing_client() == (
        "logger=tensorboard needs its client: pip install 'unlearnbench[tensorboard]'")


@pytest.mark.processes  # W&B's service (wandb-core) runs beside this process
def test_wandb_offline_run_holds_config_tags_history_summary_and_result(tmp_path, wandb_env, no_network, capsys):
    sweep = tmp_path / "sweep"
    jobs = [fabricated_job(sweep, seed) for seed in (0, 1)]
    tracker = begun(WandbTracker({}, sweep), sweep)
    assert tracker.sweep_state == {"project": "unlearnbench", "group": "sweep", "mode": "offline"}
    start = time.monotonic()
    states = {job.name: tracker.log_job(job, {}) for job, _ in jobs}
    assert time.monotonic() - start < 2 * OFFLINE_S
    assert_wandb_matches(sweep, {job.name: result for job, result in jobs})
    for job, _ in jobs:
        (run,) = wandb_runs(job.folder)
        (folder,) = (job.folder / "wandb").glob(f"offline-run-*-{run.id}")
        assert states[job.name] == {"run_id": run.id, "mode": "offline", "folder": f"wandb/{folder.name}",
                                    "logged": True}
        assert run.project == "unlearnbench" and run.config["train.epochs"] == "3"
        assert not [name for name in run.config if name.startswith("logger")]
        assert run.summary["curve/original/loss"] == 0.5  # a series' summary is its last point
    said = capsys.readouterr()
    assert said.out == (f"wandb: offline (no API key): sync the runs with `wandb sync {sweep}/*/wandb/offline-run-*`"
                        "\n") and said.err == ""
    assert no_network == []


@pytest.mark.processes  # W&B's service (wandb-core) runs beside this process
def test_wandb_a_kept_run_is_resumed_and_a_new_attempt_replaces_the_offline_run(tmp_path, wandb_env, no_network):
    sweep = tmp_path / "sweep"
    job, result = fabricated_job(sweep, 2)
    tracker = begun(WandbTracker({}, sweep), sweep)
    first = tracker.log_job(job, {})
    assert tracker.log_job(job, first) == first  # logged: left alone
    resumed = tracker.log_job(job, {"run_id": first["run_id"]})  # kept, not logged: the same run
    assert resumed["run_id"] == first["run_id"]
    assert_wandb_matches(sweep, {job.name: result})  # one run, every point once
    again = tracker.log_job(job, {})  # nothing kept (a log cut short, or a result the job replaced): a new run
    assert again["run_id"] != first["run_id"]
    assert [run.id for run in wandb_runs(job.folder)] == [again["run_id"]]  # the earlier offline run removed
    assert_wandb_matches(sweep, {job.name: result})
    assert no_network == []


@pytest.mark.processes  # W&B's service (wandb-core) runs beside this process
def test_wandb_the_key_stays_in_the_environment(tmp_path, wandb_env, no_network, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep = tmp_path / "sweep"
    job, _ = fabricated_job(sweep, 0)
    tracker = begun(WandbTracker({}, sweep), sweep)
    callback.keep_state(sweep, "sweep", "wandb", tracker.sweep_state)
    callback.keep_state(job.folder, "job", "wandb", tracker.log_job(job, {}))
    said = capsys.readouterr()
    assert SECRET not in said.out + said.err and "offline" in said.out
    written = [path for path in sweep.rglob("*") if path.is_file()]
    assert {p.name for p in written} >= {"tracking.json", "result.json"} and any(p.suffix == ".wandb" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []  # W&B's own files included
    assert no_network == []


@pytest.mark.parametrize("option, environment, key, mode", [
    ("disabled", {"WANDB_MODE": "offline"}, True, "disabled"),  # the option wins
    (None, {"WANDB_MODE": "online"}, False, "online"),  # then W&B's variable
    (None, {"WANDB_MODE": "dryrun"}, True, "offline"),  # W&B's older name
    (None, {}, True, "online"),  # then the key
    (None, {}, False, "offline")])
def test_wandb_mode_is_the_option_else_wandb_mode_else_whether_a_key_is_known(
        tmp_path, wandb_env, monkeypatch, option, environment, key, mode):
    for variable, value in {**environment, **({"WANDB_API_KEY": SECRET} if key else {})}.items():
        monkeypatch.setenv(variable, value)
    assert WandbTracker({"mode": option}, tmp_path).mode() == mode


def test_wandb_disabled_logs_nothing_and_leaves_the_job_to_a_later_run(tmp_path, wandb_env, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sweep = tmp_path / "sweep"
    job, _ = fabricated_job(sweep, 0)
    tracker = begun(WandbTracker({}, sweep), sweep)
    assert tracker.log_job(job, {}) == {"mode": "disabled", "logged": False}
    assert not (job.folder / "wandb").exists()


def test_wandb_project_is_the_option_else_wandb_project_and_a_bad_mode_is_refused(tmp_path, wandb_env, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert WandbTracker({}, tmp_path).begin_sweep("s")["project"] == "theirs"
    assert WandbTracker({"project": "mine", "group": "g"}, tmp_path).begin_sweep("s") == {
        "project": "mine", "group": "g", "mode": "offline"}
    with pytest.raises(UserError) as refused:
        WandbTracker({"mode": "sometimes"}, tmp_path)
    assert str(refused.value) == ("the 'mode' option of logger.wandb must be one of online, offline, disabled (or "
                                  "null: $WANDB_MODE); got 'sometimes' instead")


def test_the_logger_group_composes_tensorboard_and_wandb_with_their_options(tmp_path):
    cfg = compose_config(["logger=[tensorboard,wandb]", "logger.wandb.project=p"])
    assert OmegaConf.to_container(cfg.logger) == {
        "tensorboard": {"_target_": "unlearnbench.track.tensorboard.TensorBoardTracker"},
        "wandb": {"_target_": "unlearnbench.track.wandb.WandbTracker", "project": "p", "entity": None,
                  "group": None, "mode": None, "timeout_s": 60}}
    built = callback.build(cfg, tmp_path)
    assert [type(t) for t in built] == [TensorBoardTracker, WandbTracker] and built[1].options["project"] == "p"


@pytest.mark.processes  # W&B's service (wandb-core) runs beside this process
def test_wandb_an_unreachable_server_fails_fast(tmp_path, wandb_env, monkeypatch):
    """Online (a key) against a W&B host that does not answer (a closed port of this machine): `wandb.init` gives up
    after `timeout_s` and the error, without the key, reaches the callback (one warning line there)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed}")
    sweep = tmp_path / "sweep"
    job, _ = fabricated_job(sweep, 0)
    tracker = begun(WandbTracker({"timeout_s": 2}, sweep), sweep)
    assert tracker.sweep_state["mode"] == "online"
    start = time.monotonic()
    with pytest.raises(Exception, match=r"deadline exceeded|timed out|Connection refused") as failed:
        tracker.log_job(job, {})
    assert time.monotonic() - start < OFFLINE_S and SECRET not in str(failed.value)
