"""The jobs of a rerun sweep that are complete already, found by the launching process: a resumed sweep starts no
worker (`local`) and submits no array task (`slurm`) for them.

A job is complete when its folder's result.json says so (the job itself would skip it: `unlearnbench.core.job.run_job`).
Its folder is where Hydra would put it: `hydra.sweep.dir` / `hydra.sweep.subdir` of the job's own config, composed
as every launcher composes it. Composing costs about 0.2 s a job, so a sweep folder that holds no result.json yet
(a new sweep) is not searched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


def complete_jobs(hydra_context: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
                  initial_job_idx: int) -> dict[int, JobReturn]:
    """Position in `job_overrides` → the job's return, for the jobs whose result.json is complete."""
    if not any(Path(str(config.hydra.sweep.dir)).glob("*/result.json")):
        return {}
    found = {}
    for position, overrides in enumerate(job_overrides):
        returned = complete_job(hydra_context, config, list(overrides), initial_job_idx + position)
        if returned is not None:
            found[position] = returned
    return found


def job_folder(hydra_context: HydraContext, config: DictConfig, overrides: list[str],
               num: int) -> tuple[Path, DictConfig]:
    """(the job's folder, its composed config): `hydra.sweep.dir` / `hydra.sweep.subdir` as its launcher makes it."""
    job_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(job_config):
        job_config.hydra.job.num = num
    saved = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(job_config)  # the folder's name may read hydra.job.* (override_dirname)
    try:
        folder = Path(str(OmegaConf.select(job_config, "hydra.sweep.dir"))) / str(
            OmegaConf.select(job_config, "hydra.sweep.subdir"))
    finally:
        HydraConfig.instance().cfg = saved
    return folder, job_config


def complete_job(hydra_context: HydraContext, config: DictConfig, overrides: list[str],
                 num: int) -> JobReturn | None:
    from unlearnbench.core.result import stored_result

    folder, job_config = job_folder(hydra_context, config, overrides, num)
    result = stored_result(folder)
    if result is None or result["status"] != "complete":
        return None
    log.info("%s: already complete, skipped", folder.name)
    returned = JobReturn(overrides=overrides, working_dir=str(folder), task_name=job_config.hydra.job.name,
                         status=JobStatus.COMPLETED)
    returned.return_value = result
    return returned
