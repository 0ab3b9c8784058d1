"""One Hydra job: the inner body of the seed-sensitivity algorithm for fixed seeds, written to `result.json`. The
loop is every task's; each step is the task's bench's (`task.bench`, core/bench.py).

    data  <- dataset.load()
    M_o   <- trained on D with the training seed (or from the cache)
    for each target c of the scenario:
        D_f, D_r, D'_f, D'_r <- scenario.split(c, unlearning seed)
        M_r <- trained on D_r with the unlearning seed (or from the cache)
        records += scores of M_o and M_r on every split, with the evaluation seed
        records += relearn time of copies of M_o, M_r on D_f (`evaluation.relearn`, opt-in)
        for each method a:
            M_u <- a(copy of M_o)                      timed; memory and utilisation sampled
                                                       (its dynamics: M at step 0, every N, the end; opt-in)
            records += scores of M_u on every split, against M_r's, with the evaluation seed
            records += relearn time of a copy of M_u on D_f
            examples += M_o's, M_r's and M_u's outputs on D_f and samples of D_r, D'_r (examples.parquet)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from lightning_fabric import Fabric
from omegaconf import DictConfig
from torch import nn

from unlearnbench.core.bench import Bench
from unlearnbench.core.components import locate
from unlearnbench.core.dynamics import Dynamics
from unlearnbench.core.files import RESULT
from unlearnbench.core.outcome import Diverged, Outcome, job_ended, unit_name
from unlearnbench.core.plan import JobPlan, chosen, method_config, plan_job, preload_forkserver
from unlearnbench.core.relearn import Relearning
from unlearnbench.core.result import failed_result, publish, result_document, stored_result
from unlearnbench.runtime import interrupt, progress
from unlearnbench.runtime.errors import FILE_ONLY
from unlearnbench.runtime.fabric import make_fabric, quiet_known_warnings
from unlearnbench.runtime.ranks import RankDied, launch, spawned, supervise

__all__ = [  # the job's entry points, and the names the launcher and tests import from here
    "JobPlan", "Outcome", "chosen", "execute", "failed_result", "method_config", "plan_job", "publish",
    "relearn_stage", "run_job", "watch",
]

log = logging.getLogger(__name__)


def execute(fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's work (the module docstring's algorithm), run by every rank; rank 0's outcome is the job's. Errors
    are caught and reported: one target's or one method's failure is recorded and the rest of the job goes on."""
    outcome = Outcome.begin(fabric, plan)
    quiet_known_warnings()
    watch(fabric, plan)
    with outcome.capture():
        bench: Bench = locate(plan.config["task"]["bench"])(fabric, plan, outcome)
        original = bench.original()
        for target in outcome.unsettled(bench.targets):
            with outcome.isolated(target):
                splits = bench.split(target)
                retrained = bench.retrained(target, splits)
                evaluation = bench.evaluation(target, splits, original, retrained)
                outcome.records += evaluation.references()
                relearning = bench.relearning(target, splits)
                if relearning is not None:  # M_o's run first: its loss sets the threshold
                    relearn_stage(outcome, relearning, original.module, target, "original")
                    relearn_stage(outcome, relearning, retrained.module, target, "retrained")
                for method in outcome.unsettled(bench.methods, target):
                    with outcome.isolated(target, method.name):
                        dynamics = Dynamics(plan.config, outcome, evaluation, target, method.name)
                        with dynamics.watching():
                            unlearned, cost = bench.unlearn(method, target, splits, original, retrained)
                        # no rank evaluates (collectives) while another is failing inside the method
                        outcome.lockstep.together(unit_name(target, method.name))
                        scored = evaluation.unlearned(method.name, unlearned, dynamics.cost(cost))
                        outcome.records += scored.records
                        dynamics.end(unlearned)
                        if scored.diverged:  # its metrics are null or left out, with the reason
                            raise Diverged(scored.diverged)
                        if relearning is not None:
                            relearn_stage(outcome, relearning, unlearned, target, "unlearned", method.name)
    return outcome


def relearn_stage(outcome: Outcome, relearning: Relearning, model: nn.Module, target: str, role: str,
                  method: str | None = None) -> None:
    """One model's relearn time (core/relearn.py) as a stage of its own, timed as `relearn:<role or method>`, into
    its records on D_f's split (`relearning.split`)."""
    who = method or role
    with outcome.stage(f"target {target}: relearning {who}", f"relearn:{who}") as current:
        run = relearning.original(model) if role == "original" else relearning.run(model)
        current.note(run.describe(relearning.settings.k))
    outcome.add(target, method, role, run.scores(relearning.split))


def watch(fabric: Fabric, plan: JobPlan) -> None:
    """This rank's progress for the job: rank 0 logs (a spawned rank 0 into the job's log file, which its fresh
    process does not have yet), and shows live progress unless `runtime.progress` is false."""
    progress.configure(plan.config["runtime"]["progress"], fabric.is_global_zero)
    if fabric.is_global_zero and spawned(fabric):
        progress.join_job_log(*plan.log)


def ranks_outcome(cfg: DictConfig, fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's outcome from its ranks. Ranks that Fabric spawns are supervised: a round the ranks had to leave at
    a failed unit starts again without it (runtime/ranks.py). Ranks that SLURM started cannot be started again from
    here: where they cannot go on in step, the job stops there, failed with the first failing rank's message and the
    records before it (`Outcome.capture`)."""
    if not spawned(fabric):
        return launch(fabric, execute, plan)
    preload_forkserver(plan.config)  # strategy.start_method=forkserver's ranks
    try:
        return supervise(lambda: make_fabric(cfg.strategy, cfg.precision, cfg.runtime.accelerator), execute, plan)
    except RankDied as error:
        return Outcome(error=str(error))


def run_job(cfg: DictConfig, show: Callable[[dict], None] | None = None) -> dict:
    """Run one job into its Hydra output folder, unless its result is already complete there (resumption). A
    complete job's result goes to `show` where `runtime.print_table` asks for its table: the caller chooses the
    printer (the console script, the report's table), since the core names nothing of the floors above it."""
    from hydra.core.hydra_config import HydraConfig

    interrupt.check()  # asked for while Hydra composed this job: it does not start
    folder = Path(HydraConfig.get().runtime.output_dir)
    path = folder / RESULT
    done = stored_result(path)
    if done is not None and done["status"] == "complete":
        log.info("%s: already complete, skipped", folder.name)
        return done
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    outcome = failure = Outcome()  # what the job reports if planning or launching fails
    fabric = None
    with failure.capture():
        plan = plan_job(cfg, folder)
        quiet_known_warnings()
        fabric = make_fabric(cfg.strategy, cfg.precision, cfg.runtime.accelerator)
        outcome = ranks_outcome(cfg, fabric, plan)
    if fabric is not None and not fabric.is_global_zero:  # under SLURM every task runs the job: rank 0 alone writes
        return {}
    outcome.report_failures()
    if outcome.trace:
        log.error("%s failed: %s (the traceback is in the job's log file)", folder.name, outcome.error)
        log.error("the traceback:\n%s", outcome.trace, extra=FILE_ONLY)
    result = result_document(cfg, outcome, started)
    publish(path, result, outcome.examples)
    log.info("%s: result.json written by rank %d of %d", folder.name, fabric.global_rank if fabric else 0,
             fabric.world_size if fabric else 1, extra=FILE_ONLY)
    job_ended()
    if show is not None and result["status"] == "complete" and cfg.runtime.print_table:
        show(result)
    return result
