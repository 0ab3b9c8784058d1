"""`hydra/launcher=slurm`: Hydra's submitit launcher, with a job that SLURM ends as one failed job of the sweep.

Jobs never raise (errors go into `result.json`), but SLURM can end a job from outside: `scancel`, its time limit,
the out-of-memory killer, a node failure. submitit then raises `UncompletedJobError` on the submitting host, and
Hydra's launcher would let that one job abort the whole sweep with a traceback and no report. Here each such job
gets a `result.json` of status `failed` that names the SLURM job and its final state, the other jobs' results are
collected as usual, and the report covers them all (the console script exits 1 and names the failed job).

Preemption needs nothing special: a requeued job starts again from the top, skips nothing it had not finished
(`result.json` is written last, whole) and reuses every model it had already published to the cache. A rerun sweep
submits only the jobs that are not complete (resume.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import DictConfig, open_dict

from hydra_plugins.unlearnbench_launcher.resume import complete_jobs

log = logging.getLogger(__name__)
POLL_S = 2.0  # how often the submitting host looks for finished jobs (submitit rate-limits its sacct calls itself)
# A job that SLURM ended leaves no result file: submitit learns of it from sacct, which it asks at intervals that
# grow to half the time it has been watching, up to 10 min; a job cancelled an hour into a sweep would fail the
# sweep half an hour later. One sacct call per sweep every WATCH_S at most is a light load on slurmdbd.
WATCH_S = 10
# submitit waits up to 15 s for a finished job's result file (slow shared filesystems show new files late). A job
# that SLURM reports ended otherwise than COMPLETED was killed before it could write one: look for a few seconds only
# (its result.json, if it did write one, is still read: `killed`), so that a cancelled job fails the sweep at once.
ENDED_WAIT_S = 3

KILLED = ("the job was cancelled, exceeded its time limit or memory, or its node failed; its log: {log} (rerun the "
          "same command to resume: finished jobs are skipped)")


def first_task_failure(stderr: Path) -> str | None:
    """srun's own line on the first of the job's tasks that ended badly ("srun: error: node1: task 1: Killed"; task
    k is rank k; the later ones were killed for it), from the job's log: which rank of a multi-task job died, and
    how."""
    try:
        lines = Path(stderr).read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next((line.strip() for line in lines if re.match(r"srun: error: .*tasks? [0-9,-]+: ", line)), None)


class SlurmLauncher(SubmititSlurmLauncher):
    """submitit's SLURM launcher whose `launch` collects every job, a killed one as a failed result."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit
        import submitit.helpers
        from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

        from unlearnbench.runtime import interrupt, progress

        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        progress.launcher_reports = True
        returns: list[JobReturn | None] = [None] * len(job_overrides)
        for index, returned in complete_jobs(self.hydra_context, self.config, job_overrides,
                                             initial_job_idx).items():
            returns[index] = returned
            progress.job_finished(returned.return_value, by_launcher=True)
        pending = [i for i, returned in enumerate(returns) if returned is None]
        if not pending:  # a finished sweep resumed: nothing to submit
            return returns
        SlurmJob.watcher = SlurmInfoWatcher(delay_s=WATCH_S)
        executor = self.executor()
        arguments = [(list(job_overrides[i]), "hydra.sweep.dir", initial_job_idx + i,
                      f"job_id_for_{initial_job_idx + i}", Singleton.get_state()) for i in pending]
        log.info("SLURM: %d job(s) as one array into %s", len(arguments), self.config.hydra.sweep.dir)
        jobs = executor.map_array(self, *zip(*arguments, strict=True))
        submitted = {job.job_id: (i, job_arguments) for i, job_arguments, job in zip(pending, arguments, jobs,
                                                                                    strict=True)}
        with interrupt.immediately():  # this process only waits (the array's tasks go on: scancel stops them)
            for job in submitit.helpers.as_completed(jobs, poll_frequency=POLL_S):  # the count as jobs end
                index, (overrides, _, num, *_) = submitted[job.job_id]
                if job.watcher.get_state(job.job_id, mode="cache").upper() != "COMPLETED":
                    for each in (job, *job._sub_jobs):  # one per task of a multi-task job
                        each._results_timeout_s = ENDED_WAIT_S
                try:
                    returned = job.results()[0]
                except submitit.core.utils.UncompletedJobError:
                    returned = self.killed(job, overrides, num)
                returns[index] = returned
                progress.job_finished(returned._return_value if returned.status == JobStatus.COMPLETED else None,
                                      by_launcher=True)
        return returns

    def executor(self):
        """submitit's executor with this launcher's parameters (the names as submitit spells them)."""
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        params = dict(self.params)
        executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm",
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in shared else f"slurm_{key}": value
                                      for key, value in params.items()})
        # A task that dies (killed, segfault) ends the job's other tasks at once, instead of leaving them waiting in
        # a collective until strategy.timeout_s; the job is then one failed job that names the task.
        executor.update_parameters(slurm_srun_args=["--kill-on-bad-exit=1"])
        return executor

    def killed(self, job: Any, overrides: list[str], num: int) -> JobReturn:
        """Record a job that SLURM ended before it wrote a result: `result.json` of status failed in its folder
        (unless the job did write one), returned as the job's result."""
        from unlearnbench.core.result import failed_result, publish, stored_result

        config = self.job_config(overrides, num, job.job_id)
        folder = Path(config.hydra.sweep.dir) / str(config.hydra.sweep.subdir)
        result = stored_result(folder)
        if result is None:
            task = first_task_failure(job.paths.stderr)
            error = (f"SLURM job {job.job_id} ended {job.state}: " + (f"{task}; " if task else "")
                     + KILLED.format(log=job.paths.stdout))
            result = failed_result(config, error)
            publish(folder / "result.json", result)
        return JobReturn(overrides=overrides, cfg=config, working_dir=str(folder), task_name=config.hydra.job.name,
                         status=JobStatus.COMPLETED, _return_value=result)

    def job_config(self, overrides: list[str], num: int, job_id: str) -> DictConfig:
        """The job's config as its own process composed it (its folder name included)."""
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config.hydra.job) as job:
            job.id, job.num = job_id, num
        return config
