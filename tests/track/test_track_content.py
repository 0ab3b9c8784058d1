"""What a job logs to every tracker (unlearnbench/track/content.py), from a fabricated result document and config:
the names, steps and values of its points, its params without the trackers' options, its tags; and the small
pieces of the callback and the tracker contract that need no process (state files, warning lines, options)."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import TINY, compose_config
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from unlearnbench.track import callback
from unlearnbench.track.content import job_log, key, segment
from unlearnbench.track.tracker import JobLog, Point, Tracker

SECRET = "s3cr3t-pa55"


def fabricated_result(targets: tuple[str, ...] = ("3",)) -> dict:
    """A result document in result.json's shape: curves of M_o, M_r and a training method, final records (one null,
    one of no split, a ranking round), and dynamics records (with a step)."""
    curves = [{"model": "original", "target": None, "method": None, "seed": 0, "cached": False, "epoch": [1, 2],
               "loss": [2.0, 1.5], "lr": [0.05, 0.01], "train_acc": [0.3, None]}]
    records = []
    for target in targets:
        curves += [{"model": "retrained", "target": target, "method": None, "seed": 0, "cached": True,
                    "epoch": [1, 2], "loss": [2.1, 1.6]},
                   {"model": "unlearned", "target": target, "method": "finetune", "seed": 0, "cached": False,
                    "epoch": [1], "loss": [0.25]}]
        records += [
            {"target": target, "method": None, "role": "original", "metric": "acc", "split": "forget_test",
             "value": 0.97},
            {"target": target, "method": None, "role": "retrained", "metric": "acc", "split": "forget_test",
             "value": 0.0},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "acc", "split": "forget_test",
             "value": 0.125},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "mia", "split": "forget_train",
             "value": None},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "time_s", "split": None,
             "value": 1.5},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "ndcg@10", "split": None,
             "round": 4, "value": 0.5},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "acc", "split": "forget_test",
             "step": 0, "epoch": 0, "value": 0.97},
            {"target": target, "method": "finetune", "role": "unlearned", "metric": "acc", "split": "forget_test",
             "step": 10, "epoch": 1, "value": 0.5}]
    return {"schema": 2, "status": "complete", "error": None, "started": "2026-12-07T09:32:15+00:00",
            "finished": "2026-12-07T09:32:17+00:00",
            "job": {"task": "image", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
                    "method": "finetune", "seed_train": 4, "seed_unlearn": 5, "seed_eval": 6, "seed_forget": 5,
                    "strategy": "single", "precision": "32-true", "devices": 1},
            "curves": curves, "records": records}


def fabricated_config():
    """A job's config with a tracker's options (a URI holding a password), Hydra's node, a list, and a leaf whose
    interpolation resolves only inside Hydra (as `.hydra/config.yaml` holds it)."""
    return OmegaConf.create({
        "seeds": {"train": 4, "unlearn": "${seeds.train}"}, "train": {"epochs": 3, "milestones": [2, 5]},
        "paths": {"output": "${hydra:runtime.output_dir}"}, "runtime": {"accelerator": "auto", "threads": None},
        "logger": {"mlflow": {"_target_": "unlearnbench.track.mlflow.MlflowTracker",
                              "tracking_uri": f"http://me:{SECRET}@mlflow.example:5000"}},
        "hydra": {"run": {"dir": "outputs"}, "job": {"name": "unlearnbench"}}})


def logged(tmp_path, result: dict | None = None) -> JobLog:
    folder = tmp_path / "sweep_7" / "digits_resnet18_full_class_finetune_t4_u5_e6"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text("{}")
    return job_log(fabricated_config(), result or fabricated_result(), folder, folder.parent)


def series(job: JobLog) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for point in job.points:
        found.setdefault(point.key, []).append((point.step, point.value))
    return found


def test_track_content_names_steps_and_values_of_every_point(tmp_path):
    """Curves at their epochs, final records at step 0 (a ranking record at its round), dynamics at their steps,
    with the issue's names; a job of one target does not name it."""
    assert series(logged(tmp_path)) == {
        "curve/original/loss": [(1, 2.0), (2, 1.5)], "curve/original/lr": [(1, 0.05), (2, 0.01)],
        "curve/original/train_acc": [(1, 0.3)],  # the null point left out
        "curve/retrained/loss": [(1, 2.1), (2, 1.6)], "curve/unlearned/finetune/loss": [(1, 0.25)],
        "original/original/acc/forget_test": [(0, 0.97)], "retrained/retrained/acc/forget_test": [(0, 0.0)],
        "unlearned/finetune/acc/forget_test": [(0, 0.125)], "unlearned/finetune/time_s": [(0, 1.5)],
        "unlearned/finetune/ndcg_10": [(4, 0.5)],
        "during/finetune/acc/forget_test": [(0, 0.97), (10, 0.5)]}


def test_track_content_names_the_target_where_a_job_has_several(tmp_path):
    found = series(logged(tmp_path, fabricated_result(("3", "7"))))
    assert found["curve/retrained/7/loss"] == [(1, 2.1), (2, 1.6)]
    assert found["curve/original/loss"] == [(1, 2.0), (2, 1.5)]  # M_o serves every target
    assert found["unlearned/finetune/3/acc/forget_test"] == [(0, 0.125)]
    assert found["during/finetune/7/acc/forget_test"] == [(0, 0.97), (10, 0.5)]
    assert not [name for name in found if name.startswith("unlearned/finetune/acc")]


def test_track_content_leaves_null_values_out(tmp_path):
    job = logged(tmp_path)
    assert not [p for p in job.points if "mia" in p.key]
    assert all(isinstance(p.value, float) and isinstance(p.step, int) for p in job.points)


def test_track_content_params_hold_the_config_but_the_trackers_options_and_hydra(tmp_path):
    """The resolved config flattened to dotted keys, values as text; no `logger` node (its URI holds a password)
    and no `hydra` node; a leaf that resolves only inside Hydra kept as it is written."""
    params = logged(tmp_path).params
    assert params == {"seeds.train": "4", "seeds.unlearn": "4", "train.epochs": "3", "train.milestones": "[2, 5]",
                      "paths.output": "${hydra:runtime.output_dir}", "runtime.accelerator": "auto",
                      "runtime.threads": "null"}
    assert SECRET not in json.dumps(params)


def test_track_content_tags_name_the_job_its_seeds_and_status(tmp_path):
    job = logged(tmp_path)
    assert job.tags == {"task": "image", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
                        "method": "finetune", "seed_train": "4", "seed_unlearn": "5", "seed_eval": "6",
                        "seed_forget": "5", "strategy": "single", "precision": "32-true", "devices": "1",
                        "status": "complete", "methods": "finetune"}
    assert (job.name, job.group) == ("digits_resnet18_full_class_finetune_t4_u5_e6", "sweep_7")
    assert job.artifacts == [job.folder / "result.json"]
    assert (job.started, job.finished) == ("2026-12-07T09:32:15+00:00", "2026-12-07T09:32:17+00:00")


def test_track_content_keys_are_what_mlflow_accepts():
    from mlflow.utils.validation import path_not_unique, validate_param_and_metric_name

    assert segment("ndcg@10") == "ndcg_10"
    assert [segment(part) for part in ("", ".", "..", "a b", "x:y", "é")] == ["_", "_", "_", "a b", "x_y", "é"]
    assert key("unlearned", None, "forget/train") == "unlearned/forget_train"
    for name in (key("curve", "..", "loss"), key("unlearned", "a:b", "ndcg@10", "c/d"), key("", "x")):
        assert validate_param_and_metric_name(name) and not path_not_unique(name), name


class Made(Tracker):
    name, extra, client = "made", "made", "no_such_client_module"
    defaults = {"project": None}  # noqa: RUF012 (a test's tracker)

    def log_job(self, job: JobLog, kept: dict) -> dict:
        return {"logged": True}


def test_track_tracker_refuses_an_unknown_option_and_names_the_missing_extra(tmp_path):
    with pytest.raises(Exception, match=r"^logger.made: unknown option projet; valid options: project$"):
        Made({"projet": "x"}, tmp_path)
    assert Made({}, tmp_path).options == {"project": None}
    assert Made.missing_client() == "logger=made needs its client: pip install 'unlearnbench[made]'"
    assert Point("a", 1, 2.0) == Point("a", 1, 2.0)


def test_track_state_files_keep_each_trackers_state_apart(tmp_path):
    assert callback.read_state(tmp_path, "job") == {}
    callback.keep_state(tmp_path, "job", "mlflow", {"run_id": "r", "logged": True})
    callback.keep_state(tmp_path, "job", "wandb", {"run_id": "w"})
    callback.keep_state(tmp_path, "sweep", "mlflow", {"sweep_run_id": "s"})
    assert json.loads((tmp_path / "tracking.json").read_text()) == {
        "job": {"mlflow": {"run_id": "r", "logged": True}, "wandb": {"run_id": "w"}},
        "sweep": {"mlflow": {"sweep_run_id": "s"}}}
    (tmp_path / "tracking.json").write_text("{cut sh")
    assert callback.read_state(tmp_path, "job") == {}  # a damaged file: the runs are looked for again


def test_track_warning_is_one_line_without_a_password(tmp_path, caplog):
    error = ConnectionError(f"API request to http://me:{SECRET}@host:5000/api failed\nwith a second line")
    with caplog.at_level(logging.WARNING, logger=callback.log.name):
        callback.warn("mlflow", error, tmp_path)
    assert [r.getMessage() for r in caplog.records] == [
        f"tracker mlflow: ConnectionError: API request to http://me:***@host:5000/api failed; the job's results are "
        f"in {tmp_path}"]


def test_track_no_logger_chosen_means_no_tracker():
    assert callback.chosen(OmegaConf.create({"logger": None})) == {}
    assert callback.chosen(OmegaConf.create({"logger": {}})) == {}
    assert list(callback.chosen(fabricated_config())) == ["mlflow"]


class Recorder(Made):
    """A tracker that records what it is asked to log, or fails where told to."""

    def __init__(self, options: dict, sweep, fails: bool = False) -> None:
        super().__init__(options, sweep)
        self.calls: list[tuple[str, dict]] = []
        self.fails = fails

    def log_job(self, job: JobLog, kept: dict) -> dict:
        self.calls.append((job.name, kept))
        if self.fails:
            raise ConnectionError("refused")
        return {"run_id": f"run{len(self.calls)}", "logged": True}


def test_track_a_job_is_logged_once_per_attempt_and_a_failing_tracker_is_one_line(tmp_path, caplog):
    """A rerun of the same result logs nothing; a job that ran again (a new `finished`) is a new run, not points
    added to the old one's; a tracker that fails writes no state (a rerun tries again) and stops no other tracker."""
    sweep, result = tmp_path / "sweep", fabricated_result()
    folder = sweep / "job_a"
    folder.mkdir(parents=True)
    recorder, failing = Recorder({}, sweep), Recorder({}, sweep, fails=True)
    failing.name = "failing"
    for name in ("made", "failing"):
        callback.keep_state(sweep, "sweep", name, {"sweep_run_id": "s"})
    with caplog.at_level(logging.WARNING, logger=callback.log.name):
        callback.log_job(fabricated_config(), result, folder, sweep, [failing, recorder])
        callback.log_job(fabricated_config(), result, folder, sweep, [recorder])
        callback.log_job(fabricated_config(), result | {"finished": "2026-12-08T10:00:00+00:00"}, folder, sweep,
                         [recorder])
    assert recorder.calls == [("job_a", {}), ("job_a", {})]
    assert recorder.sweep_state == {"sweep_run_id": "s"}
    assert callback.read_state(folder, "job") == {"made": {"run_id": "run2", "logged": True,
                                                           "finished": "2026-12-08T10:00:00+00:00"}}
    assert [r.getMessage() for r in caplog.records] == [
        f"tracker failing: ConnectionError: refused; the job's results are in {folder}"]


def test_track_a_rerun_logs_the_complete_jobs_no_tracker_logged_from_their_saved_config(tmp_path):
    """The launchers skip complete jobs on a rerun (their `on_job_end` never fires): the sweep's start logs those
    that a tracker has not logged, each with its own `.hydra/config.yaml`; a logged job, a failed one, a damaged
    result and a folder without the saved config are left alone."""
    from unlearnbench.core.result import publish

    sweep = tmp_path / "sweep"
    complete, failed = fabricated_result(), fabricated_result() | {"status": "failed", "error": "boom"}
    jobs = {"a_unlogged": complete, "b_logged": complete, "c_failed": failed, "d_no_config": complete}
    for name, result in jobs.items():
        publish(sweep / name / "result.json", result)
        if name != "d_no_config":
            (sweep / name / ".hydra").mkdir()
            OmegaConf.save(fabricated_config(), sweep / name / ".hydra" / "config.yaml")
    (sweep / "e_damaged").mkdir()
    (sweep / "e_damaged" / "result.json").write_text("{")
    callback.keep_state(sweep, "sweep", "made", {"sweep_run_id": "s"})
    callback.keep_state(sweep / "b_logged", "job", "made", {"run_id": "old", "logged": True,
                                                             "finished": complete["finished"]})
    recorder = Recorder({}, sweep)
    callback.catch_up(fabricated_config(), sweep, [recorder])
    assert recorder.calls == [("a_unlogged", {})]
    assert callback.read_state(sweep / "a_unlogged", "job")["made"]["logged"] is True


def test_track_mlflow_without_a_uri_keeps_its_store_and_artifacts_in_the_sweep_folder(tmp_path, monkeypatch):
    """`logger=mlflow` with neither the option nor MLFLOW_TRACKING_URI: a SQLite store in the sweep folder, no
    server, the sweep's experiment with its run and the job's nested under it, artifacts in the sweep folder."""
    from mlflow.tracking import MlflowClient

    from unlearnbench.report.read.collect import result_files
    from unlearnbench.track.mlflow import MlflowTracker

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    job = logged(tmp_path)
    sweep = job.folder.parent
    tracker = MlflowTracker({}, sweep)
    assert tracker.uri == f"sqlite:///{sweep / 'mlflow.db'}"
    tracker.sweep_state = tracker.begin_sweep(job.group)
    state = tracker.log_job(job, {})
    (sweep / "report").mkdir()
    (sweep / "report" / "report.md").write_text("# the report\n")
    tracker.end_sweep(job.group, sweep / "report")
    client = MlflowClient(tracker.uri)
    experiment = client.get_experiment_by_name("sweep_7")
    assert experiment.artifact_location == (sweep / "mlartifacts").as_uri()
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs
    run = client.get_run(state["run_id"])
    assert run.data.tags["mlflow.parentRunId"] == tracker.sweep_state["sweep_run_id"]
    assert run.info.run_name == job.name and run.info.status == "FINISHED"
    assert run.data.metrics["unlearned/finetune/acc/forget_test"] == 0.125
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "during/finetune/acc/forget_test")
            ] == [(0, 0.97), (10, 0.5)]
    assert (run.info.start_time, run.info.end_time) == (1796635935000, 1796635937000)  # the job's own times
    assert (sweep / "mlartifacts" / run.info.run_id / "artifacts" / "result.json").is_file()
    assert result_files([sweep]) == [job.folder / "result.json"]  # the report reads no copy as another job
    assert [a.path for a in client.list_artifacts(tracker.sweep_state["sweep_run_id"], "report")] == [
        "report/report.md"]


def test_track_mlflow_batches_keep_a_series_whole_and_refuse_a_bad_option(tmp_path):
    """A batch goes through whole or not at all: a series is split only where it is longer than a batch, so a
    resumed run that has a key has every point of it. A retry count that is no whole number is one line."""
    from unlearnbench.track.mlflow import MlflowTracker, key_batches

    points = [Point(name, step, 0.0) for name, steps in (("a", 2), ("b", 2), ("c", 7)) for step in range(steps)]
    batches = [[(p.key, p.step) for p in batch] for batch in key_batches(points, size=3)]
    assert batches == [[("a", 0), ("a", 1)], [("b", 0), ("b", 1)], [("c", 0), ("c", 1), ("c", 2)],
                       [("c", 3), ("c", 4), ("c", 5)], [("c", 6)]]
    with pytest.raises(Exception, match=r"^the 'retries' option of logger.mlflow must be a whole number of at "
                                        r"least 0 \(or null: MLflow's own default\); got -1 instead$"):
        MlflowTracker({"retries": -1}, tmp_path)


def test_track_choosing_a_tracker_does_not_rename_the_jobs_folder():
    """`logger` and its options are left out of the folder's name (conf/config.yaml's exclude_keys): a sweep rerun
    with a tracker added finds its jobs complete; and several trackers compose into one `logger` node (Hydra's group
    list)."""
    names, saved = [], HydraConfig.instance().cfg  # the folder's name reads hydra.job.*: set, then put back
    for chosen, trackers in (([], []),
                             (["logger=mlflow", "logger.mlflow.experiment=x", "logger.mlflow.tracking_uri=http://h:1"],
                              ["mlflow"]),
                             (["logger=[mlflow,tensorboard,wandb]", "logger.wandb.project=p"],
                              ["mlflow", "tensorboard", "wandb"])):
        config = compose_config([*TINY, "+method=ssd", *chosen], return_hydra_config=True)
        HydraConfig.instance().set_config(config)
        try:
            names.append(str(config.hydra.sweep.subdir))
        finally:
            HydraConfig.instance().cfg = saved
        assert sorted(config.logger or {}) == trackers
    assert len(set(names)) == 1 and names[0].startswith("digits_resnet18_full_class_ssd_t0_u0_e0")
