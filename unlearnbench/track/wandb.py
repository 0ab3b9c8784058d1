"""`logger=wandb`: each job a Weights & Biases run (named by its folder, grouped by sweep) with its params as the
run's config, its tags, every curve point, dynamics point and final record in its history (the final records are
its summary too) and its result.json, through W&B's own client (`wandb.init`, `run.log`).

W&B's conventions hold, an option winning over its variable: `project` (else `WANDB_PROJECT`, else
"unlearnbench"), `entity` (else `WANDB_ENTITY`, else the key's default), `mode` (else `WANDB_MODE`, else online
where an API key is known, offline where none is). Offline, the run is files in `<job>/wandb/offline-run-…/`, sent
nowhere, until `wandb sync` uploads them; the sweep says so once. The key is W&B's own business: read by W&B from
`WANDB_API_KEY` or `~/.netrc` (`wandb login`), never an option of ours, so it never reaches the config, result.json,
the report, a log or tracking.json.

W&B's step must only grow within a run, while a job's series have steps of their own (epochs, dynamics steps,
rounds). So each series is plotted against a step metric of its kind (`define_metric`): `epoch` for the training
curves, `during_step` for the dynamics, `round` for the final records, and each row of the history is one step of
one kind.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import ClassVar

from unlearnbench.runtime.errors import invalid
from unlearnbench.track.tracker import JobLog, Point, Tracker

MODES = ("online", "offline", "disabled")
ALIASES = {"dryrun": "offline", "run": "online"}  # W&B's older names of its modes, still read from WANDB_MODE
STEP_OF = {"curve": "epoch", "during": "during_step"}  # a series' kind (its key's first part) → its step metric
FINAL_STEP = "round"  # the step metric of the final records (0, or their round)
MAX_TAG = 64  # characters of a W&B tag


def api_key_known() -> bool:
    """Whether W&B would find credentials without asking: `WANDB_API_KEY`, the settings' key, an identity token
    file, or `~/.netrc` for its host (what `wandb login` writes). Read where W&B reads them, offline, no request."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    from wandb.sdk import wandb_setup
    from wandb.sdk.lib import wbauth

    settings = wandb_setup.singleton().settings
    try:
        return bool(settings.api_key or settings.identity_token_file
                    or wbauth.read_netrc_auth(host=settings.base_url))
    except Exception:  # a .netrc W&B cannot read: as if there were no key (offline, nothing lost)
        return False


def step_metric(key: str) -> str:
    return STEP_OF.get(key.split("/", 1)[0], FINAL_STEP)


def rows(points: list[Point]) -> list[dict]:
    """The points as history rows, one per step metric and step, in step order: {step metric: step, key: value}."""
    grouped: dict[tuple[str, int], dict] = defaultdict(dict)
    for point in sorted(points, key=lambda p: (step_metric(p.key), p.step)):
        grouped[step_metric(point.key), point.step][point.key] = point.value
    return [{metric: step, **values} for (metric, step), values in grouped.items()]


def run_tags(tags: dict[str, str]) -> list[str]:
    """The job's tags as W&B tags, `name=value` (a bare `0` would not say which seed), within W&B's length."""
    return [f"{name}={value}"[:MAX_TAG] for name, value in tags.items() if value != ""]


def remove_offline(runs: Path) -> None:
    """Remove the offline runs of earlier attempts at this job (a log cut short, or a result the job has since
    replaced): `wandb sync` would upload each of them, and only the last is the job's."""
    for folder in runs.glob("offline-run-*") if runs.is_dir() else []:
        shutil.rmtree(folder)


class WandbTracker(Tracker):
    name = "wandb"
    extra = "wandb"
    client = "wandb"
    defaults: ClassVar[dict] = {"project": None, "entity": None, "group": None, "mode": None, "timeout_s": 60}

    def __init__(self, options: dict, sweep: Path) -> None:
        super().__init__(options, sweep)
        if self.options["mode"] is not None and self.options["mode"] not in MODES:
            raise invalid("mode", "logger.wandb", f"one of {', '.join(MODES)} (or null: $WANDB_MODE)",
                          repr(self.options["mode"]))

    def mode(self) -> str:
        """The option, else `WANDB_MODE` (W&B's older names `dryrun` and `run` read as offline and online), else
        online where a key is known and offline where none is."""
        chosen = self.options["mode"] or os.environ.get("WANDB_MODE")
        return ALIASES.get(chosen, chosen) or ("online" if api_key_known() else "offline")

    def begin_sweep(self, group: str) -> dict:
        """Where the sweep's runs go (project, group, mode), said once where they stay offline."""
        state = {"project": self.options["project"] or os.environ.get("WANDB_PROJECT") or "unlearnbench",
                 "group": self.options["group"] or group, "mode": self.mode()}
        if state["mode"] == "offline":
            chosen = self.options["mode"] or os.environ.get("WANDB_MODE")
            print(f"wandb: offline{'' if chosen else ' (no API key)'}: sync the runs with "
                  f"`wandb sync {self.sweep}/*/wandb/offline-run-*`", flush=True)
        return state

    def log_job(self, job: JobLog, kept: dict) -> dict:
        """The job's run in `<job>/wandb/`: the kept one resumed (`kept` holds this very result's run), else a new
        one, earlier offline attempts removed."""
        if kept.get("logged"):
            return kept
        where = {"project": None, "group": job.group, "mode": None, **self.sweep_state}
        mode = where["mode"] or self.mode()
        if mode == "disabled":  # W&B's switch-off (`WANDB_MODE=disabled`): nothing logged, so a later rerun logs it
            return {"mode": mode, "logged": False}
        runs = Path(job.folder) / "wandb"
        run_id = kept.get("run_id") or new_id()
        if mode == "offline":
            remove_offline(runs)
        folder = self.log_run(job, run_id, {**where, "mode": mode})
        return {"run_id": run_id, "mode": mode, "folder": str(folder.relative_to(job.folder)), "logged": True}

    def log_run(self, job: JobLog, run_id: str, where: dict) -> Path:
        """Start (or resume) the job's run, log everything, finish it; its folder. W&B's service is started for it
        and stopped after it (`teardown`), whatever happens: `finish` returns before the run's files are all
        written, and a service left running would outlive the job."""
        import wandb

        settings = wandb.Settings(mode=where["mode"], console="off", silent=True, save_code=False, disable_git=True,
                                  x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
                                  x_save_requirements=False,
                                  **({"init_timeout": float(self.options["timeout_s"])}
                                     if self.options["timeout_s"] is not None else {}))
        wandb.setup(settings)  # the process's own settings: W&B's usage analytics stay off offline
        logging.getLogger("wandb").propagate = False  # W&B's log lines go to its debug.log, not the job's log
        try:
            run = wandb.init(dir=str(job.folder), project=where["project"] or "unlearnbench",
                             entity=self.options["entity"], group=where["group"], name=job.name, id=run_id,
                             resume="allow", config=job.params, tags=run_tags(job.tags), settings=settings,
                             reinit="create_new")
            exit_code = 1  # a log cut short marks the run failed
            try:
                log_points(run, job.points)
                for artifact in job.artifacts:  # a copy in the run's files (W&B would link the original, and say so)
                    run.save(shutil.copy2(artifact, run.dir), base_path=run.dir, policy="now")
                exit_code = 0 if job.tags.get("status") == "complete" else 1
            finally:
                run.finish(exit_code=exit_code)
            return Path(run.dir).parent
        finally:
            wandb.teardown()


def new_id() -> str:
    from wandb.sdk.lib.runid import generate_id

    return generate_id()


def log_points(run, points: list[Point]) -> None:
    """Every point in the run's history, each series against its step metric (W&B's own step only grows)."""
    for metric in dict.fromkeys(map(step_metric, (p.key for p in points))):
        run.define_metric(metric)
    for key in dict.fromkeys(p.key for p in points):
        run.define_metric(key, step_metric=step_metric(key))
    for row in rows(points):
        run.log(row)
