"""Lightning Fabric from the strategy and precision configs, after checking that this machine can run them.

A mode whose package or hardware is missing fails before any work with one line that names what it needs.
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
from lightning_fabric import Fabric
from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

from unlearnbench.runtime.errors import UserError, invalid


def resolve_accelerator(accelerator: str) -> str:
    if accelerator != "auto":
        return "cuda" if accelerator == "gpu" else accelerator
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def unmet_needs(kind: str, cfg, accelerator: str) -> list[str]:
    """What `cfg` (a strategy or precision config) needs that this machine lacks, each as a phrase."""
    needs = []
    if cfg.module and importlib.util.find_spec(cfg.module) is None:
        needs.append(f"the package {cfg.module} (pip install 'unlearnbench[{cfg.extra}]')")
    if cfg.needs_cuda and accelerator != "cuda":
        needs.append(f"a CUDA GPU (accelerator here: {accelerator})")
    capability = getattr(cfg, "min_capability", None)
    if capability and accelerator == "cuda" and torch.cuda.get_device_capability() < tuple(capability):
        major, minor = torch.cuda.get_device_capability()
        needs.append(f"a GPU of compute capability {capability[0]}.{capability[1]} or newer (found {major}.{minor})")
    return needs


def check_runtime(strategy, precision, accelerator: str) -> str:
    """Raise a `UserError` for a combination this machine cannot run; return the resolved accelerator."""
    accelerator = resolve_accelerator(accelerator)
    for kind, cfg in (("strategy", strategy), ("precision", precision)):
        needs = unmet_needs(kind, cfg, accelerator)
        if needs:
            hint = f"; {cfg.hint}" if getattr(cfg, "hint", None) else ""
            raise UserError(f"{kind} {cfg.name} needs {' and '.join(needs)}{hint}")
    world = strategy.devices * strategy.num_nodes
    if strategy.max_devices is not None and world > strategy.max_devices:
        raise UserError(f"strategy {strategy.name} runs on {strategy.max_devices} device(s), not {world}; for several "
                        f"devices use strategy=ddp_spawn on one machine or strategy=ddp under hydra/launcher=slurm")
    launched_outside = SLURMEnvironment.detect() or TorchElasticEnvironment.detect()
    if strategy.relaunches_script and world > 1 and not launched_outside:
        raise UserError(
            f"strategy {strategy.name} starts its extra processes by re-running the command line, which would re-run "
            f"the whole sweep in every rank; on one machine use strategy=ddp_spawn, on a cluster hydra/launcher=slurm "
            f"(SLURM starts one task per device)"
        )
    return accelerator


def fabric_precision(precision) -> dict:
    """Fabric's `precision` argument, or a bitsandbytes plugin (which replaces the linear layers)."""
    if precision.bitsandbytes is None:
        return {"precision": precision.fabric}
    from lightning_fabric.plugins import BitsandbytesPrecision

    dtype = getattr(torch, precision.dtype) if precision.dtype else None
    return {"plugins": [BitsandbytesPrecision(mode=precision.bitsandbytes, dtype=dtype)]}


def fabric_strategy(strategy):
    """Fabric's strategy: a data-parallel one built from Fabric's registry with `strategy.timeout_s` as its process
    group's timeout (and `strategy.start_method`, where set, as the way its ranks start); any other by name."""
    import inspect
    import multiprocessing
    from datetime import timedelta

    from lightning_fabric.strategies import STRATEGY_REGISTRY

    if strategy.fabric not in STRATEGY_REGISTRY:
        return strategy.fabric
    entry = STRATEGY_REGISTRY[strategy.fabric]
    if "timeout" not in inspect.signature(entry["strategy"]).parameters:
        return strategy.fabric
    options = dict(entry["init_params"])
    start_method = getattr(strategy, "start_method", None)
    if start_method is not None:
        methods = multiprocessing.get_all_start_methods()
        spawns = options.get("start_method") in methods  # not SLURM's or torchrun's ranks, nor re-run scripts
        if not spawns or start_method not in methods:
            where = f"one of {', '.join(methods)}" if spawns else "null: it spawns no ranks of its own"
            raise invalid("strategy.start_method", f"strategy {strategy.name}", where, repr(start_method))
        options["start_method"] = start_method
    return entry["strategy"](**options, timeout=timedelta(seconds=strategy.timeout_s))


def make_fabric(strategy, precision, accelerator: str) -> Fabric:
    accelerator = check_runtime(strategy, precision, accelerator)
    return Fabric(accelerator=accelerator, strategy=fabric_strategy(strategy), devices=strategy.devices,
                  num_nodes=strategy.num_nodes, **fabric_precision(precision))


def quiet_known_warnings() -> None:
    """Silence warnings that need no action: 1×1 convolutions' gradients have strides that DDP's buckets do not
    expect (their layouts are equivalent); Lightning's all_gather uses a torch function deprecated in favour of a
    private one; and on a machine with SLURM's `srun`, Lightning suggests it for a job that SLURM did not start
    (`hydra/launcher=slurm` starts jobs through sbatch, and a local sweep does not want srun); peft asks transformers
    whether gradient checkpointing is on through a name transformers deprecated."""
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    warnings.filterwarnings("ignore", message=r".*all_gather is deprecated")
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated")  # peft's call, not ours
