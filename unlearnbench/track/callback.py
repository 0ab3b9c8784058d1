"""Hydra callback: each job's run in the chosen experiment trackers (`logger=mlflow`, `logger=[mlflow,tensorboard]`),
logged when the job ends, from its result document, and the sweep's report on the sweep's own run when it ends.

Why at the job's end and not inside its loops: `result.json` is written before any tracker is called, so a tracker
that is unreachable or fails can cost a run in the tracker, never a result, and nothing in training or evaluation
changes (no record can move). Every tracker logs the same content (track/content.py).

Where it runs: `on_job_end` fires in the process that ran the job: the basic launcher's one process, each worker of
the local launcher, the SLURM task on its node (each logs its own jobs; a rank other than 0 returns `{}` and logs
nothing). What each tracker kept for a job (its run id, whether everything went through) is in the job folder's
`tracking.json`, and the sweep's run in the sweep folder's: a rerun into the same sweep folder resumes the same runs
and logs nothing twice. Jobs that a launcher skips on a rerun (complete already) but no tracker logged yet are
logged when the sweep starts (`catch_up`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from unlearnbench.runtime.errors import EndSweep, UserError

log = logging.getLogger(__name__)
STATE = "tracking.json"  # in the sweep folder ({"sweep": {tracker: state}}) and each job's ({"job": {…}})
PASSWORD = re.compile(r"(//[^/@\s:]*:)[^/@\s]*@")  # user:password@ in a URI an error message quotes
MAX_ERROR = 300  # characters of a tracker's error on its warning line


def chosen(config: DictConfig) -> dict[str, dict]:
    """`logger` of the config: tracker name → its options (with `_target_`); empty where none is chosen."""
    node = OmegaConf.select(config, "logger", default=None)
    if not node:
        return {}
    return {name: dict(options) for name, options in OmegaConf.to_container(node, resolve=True).items()
            if isinstance(options, dict)}


def build(config: DictConfig, sweep: Path) -> list:
    """The chosen trackers, each built from its options; a missing client, an unknown option or a `_target_` that
    is no tracker is one line (UserError)."""
    from unlearnbench.core.components import target_of
    from unlearnbench.track.tracker import Tracker

    trackers = []
    for name, options in chosen(config).items():
        kind = target_of(options, f"logger.{name}")
        if not (isinstance(kind, type) and issubclass(kind, Tracker)):
            raise UserError(f"logger.{name}: _target_ {options['_target_']} is not a tracker (a subclass of "
                            "unlearnbench.track.tracker.Tracker)")
        missing = kind.missing_client()
        if missing:
            raise UserError(missing)
        trackers.append(kind({k: v for k, v in options.items() if k != "_target_"}, sweep))
    return trackers


def read_state(folder: Path, part: str) -> dict:
    """What the trackers kept in `folder/tracking.json` under `part` (sweep or job); {} where there is none yet or
    it cannot be read (then the runs are looked for again, not lost)."""
    try:
        return json.loads((folder / STATE).read_text()).get(part) or {}
    except (OSError, ValueError, AttributeError):
        return {}


def keep_state(folder: Path, part: str, name: str, state: dict) -> None:
    """Write one tracker's state into `folder/tracking.json` (whole or not at all)."""
    from unlearnbench.runtime.files import write_atomically

    try:
        kept = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    kept.setdefault(part, {})[name] = state
    write_atomically(folder / STATE, json.dumps(kept, indent=1))


def shortened(message: str) -> str:
    """An error's first line without a password, its head and tail where it is long (a client's message nests its
    causes: the request comes first, the reason, such as "Connection refused", last)."""
    line = PASSWORD.sub(r"\1***@", (message.strip().splitlines() or [""])[0])
    half = MAX_ERROR // 2
    return line if len(line) <= MAX_ERROR else f"{line[:half]} … {line[-half:]}"


def warn(name: str, error: BaseException, where: Path, what: str = "the job's results") -> None:
    """The one line a failing tracker costs: which, why, and where the results are."""
    log.warning("tracker %s: %s: %s; %s are in %s", name, type(error).__name__, shortened(str(error)), what, where)


@contextlib.contextmanager
def quiet_retries() -> Iterator[None]:
    """A tracker's HTTP client retries without a line per retry (urllib3 warns at each): the failure, if it comes,
    is the one line `warn` writes."""
    retries = logging.getLogger("urllib3")
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        yield
    finally:
        retries.setLevel(level)


def sweep_folder(config: DictConfig) -> Path:
    """The sweep's folder: `hydra.sweep.dir` in a multirun, the run's own folder in a single run (`--run`:
    `hydra.run.dir`, which Hydra makes the job's output folder only once the run starts)."""
    from hydra.types import RunMode

    if OmegaConf.select(config, "hydra.mode") == RunMode.RUN:
        return Path(str(OmegaConf.select(config, "hydra.runtime.output_dir") or config.hydra.run.dir)).absolute()
    return Path(str(config.hydra.sweep.dir))


def this_attempts(state: dict | None, result: dict) -> dict:
    """A tracker's state for the job where it logged this very result (`finished`, result.json's end time), else {}:
    a job that failed and ran again on a rerun is another attempt, logged as a new run, not as points added to the
    failed one's."""
    state = state or {}
    return state if state.get("finished") == result.get("finished") else {}


def log_job(config: DictConfig, result: dict, folder: Path, sweep: Path, trackers: list | None = None) -> None:
    """Log one job to each chosen tracker that has not logged it yet; a tracker's error is one warning line."""
    from unlearnbench.track.content import job_log

    try:
        trackers = build(config, sweep) if trackers is None else trackers
    except Exception as error:  # the sweep's start checked these options: a failure here is the environment's
        warn("logger", error, folder)
        return
    begun, kept, content = read_state(sweep, "sweep"), read_state(folder, "job"), None
    for tracker in trackers:
        previous = this_attempts(kept.get(tracker.name), result)
        if previous.get("logged") or tracker.name not in begun:
            continue  # logged already, or the sweep's start could not reach it (said then, retried on a rerun)
        tracker.sweep_state = begun[tracker.name]
        try:
            content = content or job_log(config, result, folder, sweep)
            with quiet_retries():
                state = tracker.log_job(content, previous)
            keep_state(folder, "job", tracker.name, {**state, "finished": result.get("finished")})
        except Exception as error:
            warn(tracker.name, error, folder)


def begin(config: DictConfig, sweep: Path) -> list:
    """The chosen trackers, built before any job (a missing client ends the sweep in one line), each with its sweep
    run begun (resumed on a rerun) and its state in the sweep's tracking.json."""
    try:
        trackers = build(config, sweep)
    except UserError as error:
        raise EndSweep(error) from None
    kept = read_state(sweep, "sweep")
    sweep.mkdir(parents=True, exist_ok=True)  # a tracker's local store may live there (MLflow's SQLite file)
    for tracker in trackers:
        tracker.sweep_state = kept.get(tracker.name) or {}
        try:
            with quiet_retries():
                state = tracker.begin_sweep(sweep.name)
            keep_state(sweep, "sweep", tracker.name, state)
            tracker.sweep_state = state
        except Exception as error:
            warn(tracker.name, error, sweep, "the sweep's jobs are not logged to it (a rerun logs them); their "
                                             "results")
    return trackers


def catch_up(config: DictConfig, sweep: Path, trackers: list) -> None:
    """Log the sweep's complete jobs that a tracker has not logged yet (a rerun after a tracker failed: the local
    and SLURM launchers skip complete jobs, so their `on_job_end` never fires), each with the config its own
    process saved in `.hydra/config.yaml`."""
    from unlearnbench.core.result import stored_result

    for folder in sorted(path for path in sweep.iterdir() if path.is_dir()):
        result = stored_result(folder)  # None where the folder holds no job's valid result
        saved = folder / ".hydra" / "config.yaml"  # the job's own config, as its process composed it
        if result is None or result["status"] != "complete" or not saved.is_file():
            continue  # the sweep runs it, and its end logs it
        log_job(OmegaConf.load(saved), result, folder, sweep, trackers)


def end(config: DictConfig, sweep: Path) -> None:
    """Each chosen tracker's sweep run gets the report folder (where there is one) and ends."""
    if not chosen(config):
        return
    begun, report = read_state(sweep, "sweep"), sweep / "report"
    for tracker in build(config, sweep):
        if tracker.name not in begun:
            continue
        tracker.sweep_state = begun[tracker.name]
        try:
            with quiet_retries():
                tracker.end_sweep(sweep.name, report if report.is_dir() else None)
        except Exception as error:
            warn(tracker.name, error, sweep, "the sweep's report and results")


class TrackCallback(Callback):
    """Registered in conf/config.yaml before `report`: Hydra calls the *_end hooks in reverse order, so the report
    exists when the sweep's run receives it. With `logger: none` (the default) every hook returns at once."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if chosen(config):
            sweep = sweep_folder(config)
            catch_up(config, sweep, begin(config, sweep))

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if chosen(config):
            begin(config, sweep_folder(config))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """Log the job that ran in this process, from the result document it returned (`{}` on a SLURM rank
        other than 0: rank 0 alone logs; an exception: the job wrote nothing to log)."""
        from hydra.core.utils import JobStatus

        if not chosen(config) or job_return.status != JobStatus.COMPLETED:
            return
        result = job_return._return_value
        if isinstance(result, dict) and result.get("status") is not None:
            log_job(config, result, Path(str(config.hydra.runtime.output_dir)), sweep_folder(config))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        end(config, sweep_folder(config))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        end(config, sweep_folder(config))
