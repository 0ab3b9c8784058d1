"""A job's plan: its options checked, its methods chosen and its config resolved, before any work (`plan_job`), as
plain data that every rank gets (`JobPlan`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from unlearnbench.core.components import build, locate, target_of
from unlearnbench.core.config import validate
from unlearnbench.runtime import interrupt, progress
from unlearnbench.runtime.errors import UserError, invalid


@dataclass
class JobPlan:
    """What every rank needs, as plain data (it crosses process boundaries under ddp_spawn)."""

    config: dict
    methods: list[dict]
    folder: str
    known_failures: dict[str, str] = field(default_factory=dict)  # unit → message, from an earlier round (ranks.py)
    log: tuple[str | None, str | None] = (None, None)  # the job's log file and line format, for spawned ranks


def registered_methods(cfg: DictConfig, task: str) -> list[dict]:
    """Every method config of `conf/method/` (and of added config dirs) that serves `task`, resolved against this
    job's config `cfg`."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    job = scratch_copy(cfg)
    methods = []
    for name in loader.get_group_options("method", overrides=job_overrides()):
        method = method_config(job, loader, name)
        if target_of(OmegaConf.to_container(method), "method").task == task:
            methods.append(OmegaConf.to_container(method, resolve=True))
    return methods


def job_overrides() -> list[str]:
    """The job's overrides, Hydra's among them (`hydra.searchpath`: config folders added to the search path, whose
    methods are the job's too); none outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    overrides = HydraConfig.get().overrides
    return [*overrides.hydra, *overrides.task]


def scratch_copy(cfg: DictConfig) -> DictConfig:
    """A writable copy of the job's config, for `method_config` to put one method after another into."""
    job = copy.deepcopy(cfg)
    OmegaConf.set_readonly(job, False)
    return job


def method_config(job: DictConfig, loader, name: str) -> DictConfig:
    """The config `+method=name` would give this job, from `job`, a `scratch_copy` of its config (its `method` is
    replaced, and the node returned holds until the next call). A plain method YAML (no defaults list, the default
    package) is read and put into `job`, in milliseconds (merging it into a fresh copy of the whole config took 20 ms,
    0.6 s a job for 32 methods); anything else is composed by Hydra with the job's overrides, about 0.2 s each (18
    methods made the demo's start-up 3 s longer)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    found = loader.repository.load_config(f"method/{name}")
    if found is not None and not found.defaults_list and found.header.get("package") in (None, "_group_", "method"):
        job.method = found.config
        return job.method
    overrides = [*job_overrides(), f"+method={name}"]
    return loader.load_configuration(HydraConfig.get().job.config_name, overrides, RunMode.RUN).method


def chosen(methods: list[dict], names: list[str] | None, task: str) -> list[dict]:
    """The methods named by `methods=[…]` (all of them when it is not set), in the registry's order."""
    if names is None:
        return methods
    known = [m["name"] for m in methods]
    unknown = [name for name in names if name not in known] or ([] if names else ["(none given)"])
    if unknown:
        raise UserError(f"methods: {unknown[0]} is not a method of the {task} task; valid: {', '.join(known)}")
    return [m for m in methods if m["name"] in names]


def plan_job(cfg: DictConfig, folder: Path) -> JobPlan:
    """Check the options, choose the methods and resolve the config; fail here, before any work, on an option out of
    range or a method that does not fit."""
    validate(cfg)
    task = cfg.task.name
    if cfg.method is not None:  # its task first: another task's method may not even resolve here
        served = target_of(OmegaConf.to_container(cfg.method), "method").task
        if served != task:
            raise UserError(f"method {cfg.method.name} serves the {served} task, but dataset {cfg.dataset.name} is "
                            f"of the {task} task")
    config = OmegaConf.to_container(cfg, resolve=True)
    refuse_foreign_metrics(config["evaluation"]["metrics"], task, cfg.dataset.name)
    refuse_unhonoured(cfg)
    scenario = build(config["scenario"], "scenario")
    methods = [config["method"]] if config["method"] is not None else chosen(registered_methods(cfg, task),
                                                                             config["methods"], task)
    unserved = [m["name"] for m in methods if not build(m, "method").serves(scenario)]
    if config["method"] is not None and unserved:
        raise UserError(f"method {unserved[0]} does not serve scenario {scenario.name}")
    return JobPlan(config, [m for m in methods if m["name"] not in unserved], str(folder), log=progress.job_log())


def refuse_unhonoured(cfg: DictConfig) -> None:
    """Refuse, before any work, an option set where the job's bench does nothing with it (`Bench.ignores`: a bench
    declares what of its task's options it ignores, and why)."""
    for option, why in locate(cfg.task.bench).ignores.items():
        value = OmegaConf.select(cfg, option)
        if value:
            off, shown = ("false", "true") if isinstance(value, bool) else ("0", value)
            raise invalid(option, f"dataset {cfg.dataset.name}", f"{off}: {why}", shown)


def refuse_foreign_metrics(metrics: dict, task: str, dataset: str) -> None:
    """Refuse, before any work, an added metric (`evaluation.metrics`) that is not a component of the job's task."""
    for slot, metric in metrics.items():
        if not isinstance(metric, dict) or "_target_" not in metric:
            raise invalid(f"evaluation.metrics.{slot}", f"the {task} task", "a component config with a _target_ "
                          "(+metric=NAME, conf/metric/NAME.yaml)", repr(metric))
        served = getattr(target_of(metric, f"metric {slot}"), "task", None)
        if served != task:
            raise invalid(f"evaluation.metrics.{slot}", f"dataset {dataset}",
                          f"a metric of the {task} task", f"{metric['_target_']}, a metric of the {served} task")


def preload_forkserver(config: Mapping[str, Any], *modules: str) -> None:
    """What a multiprocessing forkserver started from this process imports once, before its first fork: the job loop,
    the task's bench and the dataset's module (named by `config`'s `task.bench` and `dataset._target_`) and what they
    import (torch, Lightning, a dataset's reader), and `modules`. A rank or a launcher's worker forked from it then
    does not import them again. A server already running keeps its own."""
    import multiprocessing

    targets = (config["task"]["bench"], config["dataset"]["_target_"])
    multiprocessing.set_forkserver_preload(["unlearnbench.core.job", *(t.rpartition(".")[0] for t in targets),
                                            *modules])


def start_forkserver(config: Mapping[str, Any], *modules: str) -> None:
    """Start multiprocessing's forkserver now, preloaded (`preload_forkserver`), unless it runs: with SIGINT blocked,
    which the server and the processes it forks inherit, so that a terminal's Ctrl-C during its seconds of imports,
    or in a child before the child ignores SIGINT, prints no traceback (runtime/interrupt.py). Call it from the
    thread that starts the processes, before anything else starts the server on its own."""
    from multiprocessing import forkserver, resource_tracker

    preload_forkserver(config, *modules)
    resource_tracker.ensure_running()  # first: it unblocks SIGINT in this thread once it has started its own process
    with interrupt.sigint_blocked():
        forkserver.ensure_running()
