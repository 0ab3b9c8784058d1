"""`hydra/launcher=local`: several jobs of a sweep at once on one machine, each in a worker process of joblib's loky
pool.

Why loky and not submitit's local executor: loky keeps its workers for the whole sweep, so a worker imports torch
and Lightning once (7–8 s) and then runs job after job, as the basic launcher's one process does, while submitit
starts a new Python process for every job: on digits jobs of a few seconds that start-up would cost more than the
parallelism wins (docs/launchers.md has the measurement). The workers are forks of a multiprocessing forkserver
that has imported the job loop and the task's bench (and with them torch and Lightning) once: N workers cost one
import, not N. The server imports and runs nothing else, so forking it is safe, CUDA included.

Placement. With GPUs, `workers` defaults to one per GPU (`jobs_per_gpu` per GPU for small jobs; a job of
`strategy.devices=d` gets d GPUs), and each worker sees only its own GPUs: CUDA_VISIBLE_DEVICES is set in the
worker, before CUDA starts there, from the slot the worker holds for its lifetime (a lock file in the sweep folder,
released by the operating system when the worker ends). Without GPUs (or with `runtime.accelerator=cpu`) it is cores
÷ `runtime.threads` workers, with `runtime.threads` set to 1 in jobs that leave it unset; in general a job that
leaves it unset gets cores ÷ workers threads, so the workers never oversubscribe the cores.

What holds whatever the launcher: the report is built once, at the end, from the files on disk (the callback); a
model that several jobs need is trained once (the cache's lock: the others wait, then read it); a job's records are
those of the basic launcher at the same `runtime.threads`; Ctrl-C (or SIGTERM) ends every worker and a rerun resumes,
starting workers for the jobs that are not complete only (resume.py). A terminal's Ctrl-C reaches the forkserver and
the workers too: they were started with SIGINT blocked and the workers ignore it (runtime/interrupt.py), so that the
launching process alone stops them, and prints its one line; while the workers start (the forkserver's imports, a
few seconds), it waits until they have started, then ends them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.unlearnbench_launcher.resume import complete_jobs
from unlearnbench.runtime.errors import EndSweep, invalid

log = logging.getLogger(__name__)

SLOTS = ".workers"  # in the sweep folder: one lock file per worker slot
HAND_S = 0.001  # how often to look whether loky has handed the calls to the workers (`handed`)
IDLE_S = 300  # an idle worker ends after this long (joblib's loky default): the next sweep of this process reuses it


class Placement(NamedTuple):  # not a dataclass: Hydra's plugin scan executes this module outside sys.modules
    """Where the sweep's jobs run: how many at once, the GPUs each worker slot sees, and the jobs' default threads."""

    workers: int
    gpu_groups: tuple[str, ...]  # per GPU slot group, its CUDA_VISIBLE_DEVICES value; empty without GPUs
    jobs_per_gpu: int
    threads: int  # runtime.threads for jobs that leave it unset
    folder: str  # the slots' lock files

    def devices(self, slot: int) -> str | None:
        return self.gpu_groups[(slot // self.jobs_per_gpu) % len(self.gpu_groups)] if self.gpu_groups else None

    def describe(self) -> str:
        if not self.gpu_groups:
            return f"{self.workers} at once on the CPU, {self.threads} thread(s) each"
        return f"{self.workers} at once on GPU(s) {', '.join(self.gpu_groups)}, {self.jobs_per_gpu} per GPU"


def visible_gpus(accelerator: str) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (none for runtime.accelerator=cpu)."""
    if accelerator in ("cpu", "mps", "tpu"):
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in given.split(",") if name.strip()] if given else [str(i) for i in range(count)]
    return names[:count]


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def place(workers: int | None, jobs_per_gpu: int, config: DictConfig, folder: Path) -> Placement:
    """The placement the sweep's config asks for on this machine (module docstring)."""
    runtime = config.runtime
    gpus = visible_gpus(str(runtime.accelerator))
    per_job = int(OmegaConf.select(config, "strategy.devices", default=1) or 1)
    groups = tuple(",".join(gpus[i:i + per_job]) for i in range(0, len(gpus) - per_job + 1, per_job))
    if groups:
        count = workers or len(groups) * (jobs_per_gpu if per_job == 1 else 1)
    else:
        count = workers or max(1, cores() // (runtime.threads or 1))
    threads = runtime.threads or max(1, cores() // count)
    return Placement(count, groups, jobs_per_gpu if per_job == 1 else 1, threads, str(folder / SLOTS))


_slot: tuple[int, Any] | None = None  # this worker's slot and the open lock file that holds it


def take_slot(placement: Placement) -> int:
    """This worker's slot (the first free one; kept for the worker's lifetime), its GPUs made the only visible ones
    before CUDA starts in this process."""
    global _slot
    if _slot is None:
        folder = Path(placement.folder)
        folder.mkdir(parents=True, exist_ok=True)
        for slot in range(placement.workers):
            handle = open(folder / f"slot-{slot}.lock", "a")  # noqa: SIM115 (held open: the lock is the slot)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _slot = (slot, handle)
            break
        else:  # every slot held (workers of an earlier, still running sweep into this folder?): share one
            _slot = (os.getpid() % placement.workers, None)
        devices = placement.devices(_slot[0])
        if devices is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = devices
    return _slot[0]


def run_in_worker(index: int, overrides: list[str], hydra_context: HydraContext, config: DictConfig,
                  task_function: TaskFunction, singleton_state: dict, placement: Placement,
                  pooled: bool = True) -> tuple[int, JobReturn]:
    """One job in a worker process (`pooled`; with one worker joblib runs it in this process), composed as Hydra
    composes it in its own launchers."""
    import unlearnbench.core.config  # noqa: F401 (the resolvers the job's config uses)
    from unlearnbench.runtime import interrupt, progress

    if pooled:  # a terminal's Ctrl-C reaches the workers too: the launching process alone stops them, all at once
        interrupt.leave_to_parent()
    progress.settings.tag = f"job {index}: "  # its lines interleave with the other workers' on the console

    setup_globals()
    Singleton.set_state(singleton_state)
    take_slot(placement)
    job_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(job_config):
        job_config.hydra.job.id = f"{job_config.hydra.job.name}_{index}"
        job_config.hydra.job.num = index
        if OmegaConf.select(job_config, "runtime.threads") is None:
            job_config.runtime.threads = placement.threads
    HydraConfig.instance().set_config(job_config)
    return index, run_job(hydra_context=hydra_context, config=job_config, task_function=task_function,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


class LocalLauncher(Launcher):
    def __init__(self, workers: int | None = None, jobs_per_gpu: int = 1) -> None:
        for name, value in (("workers", workers), ("jobs_per_gpu", jobs_per_gpu)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                valid = "a whole number of at least 1" + (" (or null: one per GPU, else cores ÷ runtime.threads)"
                                                          if name == "workers" else "")
                raise EndSweep(invalid(name, "hydra.launcher", valid, repr(value)))
        self.workers, self.jobs_per_gpu = workers, jobs_per_gpu
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from unlearnbench.runtime import progress

        sweep = Path(str(self.config.hydra.sweep.dir))
        sweep.mkdir(parents=True, exist_ok=True)
        progress.launcher_reports = True
        returns: list[JobReturn | None] = [None] * len(job_overrides)
        for position, returned in complete_jobs(self.hydra_context, self.config, job_overrides,
                                                initial_job_idx).items():
            returns[position] = returned
            progress.job_finished(returned.return_value, by_launcher=True)
        pending = [i for i, returned in enumerate(returns) if returned is None]
        if not pending:  # a finished sweep resumed: no worker to start
            return returns
        placement = place(self.workers, self.jobs_per_gpu, self.config, sweep)
        workers = min(placement.workers, len(pending))
        log.info("local: %d job(s), %s, into %s", len(pending), placement.describe(), sweep)
        state = Singleton.get_state()
        calls = [(run_in_worker, initial_job_idx + i, list(job_overrides[i]), self.hydra_context, self.config,
                  self.task_function, state, placement, workers > 1) for i in pending]
        for index, returned in self.run(calls, workers):
            returns[index - initial_job_idx] = returned
            progress.job_finished(returned._return_value if returned.status == JobStatus.COMPLETED else None,
                                  by_launcher=True)
        return returns

    def run(self, calls: list[tuple], workers: int) -> Iterator[tuple[int, JobReturn]]:
        """Each call's (index, JobReturn), in the order they finish: in this process with one worker, else in loky's
        pool over a preloaded forkserver (module docstring), one call per worker at a time. Interrupted, or with the
        pool broken, the workers are ended at once, but never while a call is being handed to them (`handed`)."""
        from unlearnbench.runtime import interrupt

        if workers == 1:
            for function, *arguments in calls:
                yield function(*arguments)
            return
        interrupt.check()  # before starting the workers, rather than after
        pool = worker_pool(workers, self.config)
        queued, submitted = iter(calls), {}  # submitted: each unfinished call's future → its job's index
        try:
            while True:
                submitted |= {pool.submit(*call): call[1] for call in islice(queued, workers - len(submitted))}
                handed(submitted)
                if not submitted:
                    return
                with interrupt.immediately():  # this process only waits: Ctrl-C or SIGTERM stops it at once
                    done, _ = wait(submitted, return_when=FIRST_COMPLETED)
                    for future in sorted(done, key=submitted.get):
                        del submitted[future]
                        yield future.result()
        except BaseException:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pool.shutdown(wait=False, kill_workers=True)
            raise


def handed(futures: Iterable[Future]) -> None:
    """Wait until loky has handed each submitted call to the workers' queue (the call runs) or settled it; an
    interrupt meanwhile waits for the next `immediately`. Raised earlier, it would land inside the first `submit`,
    which starts the workers and waits seconds for the forkserver's imports: the server would then fork a worker for a
    process that is gone (a traceback). And loky 3.6, shut down with calls it has not handed yet, looks them up after
    discarding them (a KeyError traceback from its thread). With one call per worker at a time the queue has room for
    them all, so the wait is milliseconds once the workers run."""
    while not all(future.running() or future.done() for future in futures):
        time.sleep(HAND_S)


def worker_pool(workers: int, config: DictConfig):
    """loky's reusable pool of `workers` processes forked from a forkserver that imports the job loop, the task's
    bench and the dataset's module (`config`'s: core/plan.preload_forkserver) and this module once."""
    from joblib.externals.loky import get_reusable_executor

    from unlearnbench.core.plan import start_forkserver

    start_forkserver(config, "hydra_plugins.unlearnbench_launcher.local")
    return get_reusable_executor(max_workers=workers, context="forkserver", timeout=IDLE_S)
