"""`logger=mlflow`: each sweep an MLflow experiment with a run of its own (the report's files), each job a run
nested under it (its params, tags, curves, records and result.json), through MLflow's own client (`MlflowClient`).

Where: the `tracking_uri` option, else `MLFLOW_TRACKING_URI`, else a SQLite store in the sweep folder
(`sqlite:///<sweep>/mlflow.db`, its artifacts in `<sweep>/mlartifacts`): no server and no account needed, and
`mlflow ui --backend-store-uri sqlite:///<sweep>/mlflow.db` shows it. A server that does not answer fails fast
(`retries`, `timeout_s`: MLflow's own defaults retry for about four minutes, per request, per job), so that a job's
end is not held up; the user's own `MLFLOW_HTTP_REQUEST_*` variables win over these defaults.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import ClassVar

from unlearnbench.runtime.errors import invalid
from unlearnbench.track.tracker import JobLog, Point, Tracker

PARAMS_PER_BATCH = 100  # MLflow's limit on params (and tags) in one log_batch
METRICS_PER_BATCH = 1000  # … and on metrics
MAX_PARAM_VALUE = 6000  # characters of a param's value MLflow keeps
MAX_TAG_VALUE = 8000
LOCAL_SCHEMES = ("sqlite", "file", "")  # stores whose artifacts should live in the sweep folder too
PARENT = "mlflow.parentRunId"  # the tag that nests a run under another in MLflow's UI
KIND = "unlearnbench.kind"  # sweep or job: what a run of the experiment stands for
TRAINING = {"mlflow.experimentKind": "custom_model_development"}  # MLflow 3's UI opens on the runs, not on GenAI
ATTEMPT = "unlearnbench.finished"  # a job run's attempt: the job's end time (a failed job run again is a new run)


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def key_batches(points: list[Point], size: int = METRICS_PER_BATCH) -> Iterator[list[Point]]:
    """The points in batches of at most `size`, a key's points kept in one batch wherever they fit: a batch goes
    through whole or not at all, so that a key the run has is a key whose every point is there (a resumed run skips
    it)."""
    batch: list[Point] = []
    for _, series in groupby(sorted(points, key=lambda p: (p.key, p.step)), key=lambda p: p.key):
        series = list(series)
        if batch and len(batch) + len(series) > size:
            yield batch
            batch = []
        for part in chunks(series, size):
            if len(part) == size:
                yield part
            else:
                batch += part
    if batch:
        yield batch


def milliseconds(stamp: str | None) -> int | None:
    """An ISO time of result.json (`started`, `finished`) in MLflow's milliseconds; None where there is none."""
    return None if not stamp else int(datetime.fromisoformat(stamp).timestamp() * 1000)


class MlflowTracker(Tracker):
    name = "mlflow"
    extra = "mlflow"
    client = "mlflow"
    defaults: ClassVar[dict] = {"tracking_uri": None, "experiment": None, "retries": 2, "timeout_s": 10}

    def __init__(self, options: dict, sweep: Path) -> None:
        super().__init__(options, sweep)
        for option, least in (("retries", 0), ("timeout_s", 1)):
            value = self.options[option]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise invalid(option, "logger.mlflow", f"a whole number of at least {least} (or null: MLflow's "
                                                       "own default)", repr(value))
        for variable, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", self.options["retries"]),
                                ("MLFLOW_HTTP_REQUEST_TIMEOUT", self.options["timeout_s"]),
                                ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", 1)):
            if value is not None:
                os.environ.setdefault(variable, str(int(value)))
        self._client = None

    @property
    def uri(self) -> str:
        """The option, else the environment's `MLFLOW_TRACKING_URI`, else the sweep folder's SQLite store."""
        return (self.options["tracking_uri"] or os.environ.get("MLFLOW_TRACKING_URI")
                or f"sqlite:///{(Path(self.sweep) / 'mlflow.db').absolute()}")

    @property
    def mlflow(self):
        """MLflow's client for this tracker's store, made on first use (it imports MLflow: a second or two)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def experiment_id(self, name: str) -> str:
        """The experiment of that name, made where there is none (its artifacts in the sweep folder where the store
        is local), brought back where it was deleted."""
        found = self.mlflow.get_experiment_by_name(name)
        if found is None:
            local = self.uri.split(":", 1)[0] in LOCAL_SCHEMES or ":" not in self.uri
            location = (Path(self.sweep) / "mlartifacts").absolute().as_uri() if local else None
            return self.mlflow.create_experiment(name, artifact_location=location, tags=TRAINING)
        if found.lifecycle_stage == "deleted":
            self.mlflow.restore_experiment(found.experiment_id)
        return found.experiment_id

    def existing_run(self, run_id: str | None) -> str | None:
        """The run of that id where the store still has it (a rerun that changed store starts a new one)."""
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            return self.mlflow.get_run(run_id).info.run_id
        except MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise

    def begin_sweep(self, group: str) -> dict:
        """The sweep's experiment (`experiment` option, else the sweep folder's name) and its run (resumed on a
        rerun into the same folder)."""
        experiment = self.options["experiment"] or group
        experiment_id = self.experiment_id(experiment)
        run_id = self.existing_run(self.sweep_state.get("sweep_run_id"))
        if run_id is None:
            run_id = self.mlflow.create_run(experiment_id, run_name=group, tags={KIND: "sweep"}).info.run_id
        return {"experiment": experiment, "experiment_id": experiment_id, "sweep_run_id": run_id}

    def job_run(self, job: JobLog, kept: dict) -> str:
        """The job's run: the one kept for it, else one of its name and attempt (the job's end time) under the
        sweep's run (a log cut short before its id was kept), else a new one."""
        run_id = self.existing_run(kept.get("run_id"))
        if run_id is not None:
            return run_id
        experiment_id, parent = self.sweep_state["experiment_id"], self.sweep_state["sweep_run_id"]
        attempt = {PARENT: parent, "mlflow.runName": job.name, ATTEMPT: job.finished or "unfinished"}
        found = not any("'" in value for value in attempt.values()) and self.mlflow.search_runs(
            [experiment_id], max_results=1, filter_string=" and ".join(f"tags.`{k}` = '{v}'" for k, v in
                                                                       attempt.items()))
        if found:
            return found[0].info.run_id
        return self.mlflow.create_run(experiment_id, start_time=milliseconds(job.started), run_name=job.name,
                                      tags={PARENT: parent, KIND: "job", ATTEMPT: attempt[ATTEMPT]}).info.run_id

    def log_job(self, job: JobLog, kept: dict) -> dict:
        from mlflow.entities import Metric, Param, RunTag

        run_id = self.job_run(job, kept)
        data = self.mlflow.get_run(run_id).data
        params = [Param(k, v[:MAX_PARAM_VALUE]) for k, v in job.params.items() if k not in data.params]
        tags = [RunTag(k, v[:MAX_TAG_VALUE]) for k, v in job.tags.items()]
        for batch in chunks([*params, *tags], PARAMS_PER_BATCH):
            self.mlflow.log_batch(run_id, params=[p for p in batch if isinstance(p, Param)],
                                  tags=[t for t in batch if isinstance(t, RunTag)])
        now = int(time.time() * 1000)
        for batch in key_batches([p for p in job.points if p.key not in data.metrics]):
            self.mlflow.log_batch(run_id, metrics=[Metric(p.key, p.value, now, p.step) for p in batch])
        for artifact in job.artifacts:
            self.mlflow.log_artifact(run_id, str(artifact))
        status = "FINISHED" if job.tags.get("status") == "complete" else "FAILED"
        self.mlflow.set_terminated(run_id, status, end_time=milliseconds(job.finished))
        return {"run_id": run_id, "experiment_id": self.sweep_state["experiment_id"], "logged": True}

    def end_sweep(self, group: str, report: Path | None) -> None:
        """The report folder (report.md, CSVs, figures) as the sweep run's artifacts under `report/`."""
        run_id = self.sweep_state["sweep_run_id"]
        if report is not None:
            self.mlflow.log_artifacts(run_id, str(report), artifact_path="report")
        self.mlflow.set_terminated(run_id, "FINISHED")
