"""`hydra/sweeper=tune` (`experiment=tune`): a method's declared search space explored by Optuna's TPE, each trial a
batch of seeded jobs sent through the configured launcher, the best point then judged on training seeds the trials
never saw (docs/tuning.md; the search spaces: `unlearnbench.core.tuning`; the objective:
`unlearnbench.report.compute.tuning`).

For each method of `+method=a,b`, tuned on its own: trial k asks Optuna (ask-and-tell; a `TPESampler` seeded from
`tune.seed` and the method's name) for a point, runs one job per training seed of `tune.seeds` with it (at once
where the launcher can: `hydra/launcher=local`, SLURM), reads their records from the jobs' result.json and tells
Optuna the objective, or a failed trial where a job or the method failed (a diverging learning rate), never a score.
Then the best point and the method's defaults each run on `tune.heldout`, in one batch. Every job keeps the job
contract (result.json, the model cache that trains each training seed's M_o once, resume). `tuning.json` in the
sweep folder records the trials and the judgement after each method; the report reads it.

Resume: the sampler is seeded and told the same objectives, so a rerun into the same sweep folder asks the same
points in the same order; their jobs' folders hold their results, so no finished trial runs again. A job whose
method failed (a diverging point) is as settled as a complete one; one that failed as a whole (a killed job, a
missing file) runs again, as in every sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def settled(folder: Path) -> bool:
    """Whether the job in `folder` has its outcome: complete, or failed in its method (a diverging point, which
    would fail again)."""
    import json

    try:
        result = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(result, dict) and (result.get("status") == "complete" or bool(result.get("failures")))


class TuneSweeper(Sweeper):
    def __init__(self) -> None:
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None
        self.job_index = 0
        self.returns: list[Sequence[JobReturn]] = []

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from unlearnbench.core.errors import UserError
        from unlearnbench.core.tuning import Settings, split_arguments, write_tuning

        try:
            settings = Settings.of(self.config)
            methods, base = split_arguments(arguments)
            spaces = {method: self.space(override, base) for method, override in methods}
        except UserError as error:
            raise SystemExit(f"unlearnbench: {error}") from None
        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, folder / "multirun.yaml")
        record = {"seed": settings.seed, "seeds": settings.seeds, "heldout": settings.heldout,
                  "objective": settings.objective, "methods": {}}
        for method, override in methods:
            try:
                record["methods"][method] = self.tune(method, [override, *base], spaces[method], settings)
            except UserError as error:  # tune.objective naming a metric without an ideal (the results tell)
                raise SystemExit(f"unlearnbench: {error}") from None
            write_tuning(folder, record)
        return self.returns

    def space(self, override: str, base: list[str]) -> list:
        """The method's declared search space, from its config as its jobs compose it."""
        from unlearnbench.core.components import option_names, target_of
        from unlearnbench.core.tuning import search_space

        composed = self.hydra_context.config_loader.load_sweep_config(self.config, [*base, override])
        method = OmegaConf.to_container(composed.method, resolve=True)
        return search_space(method, option_names(target_of(method, "method")))

    def launch(self, batch: list[list[str]]) -> list[Path]:
        """Run one batch of jobs, at once where the launcher can, and return their folders (where each job writes
        its result.json whichever launcher ran it)."""
        from hydra_plugins.unlearnbench_launcher.resume import job_folder

        folders = [job_folder(self.hydra_context, self.config, overrides, self.job_index + k)[0]
                   for k, overrides in enumerate(batch)]
        pending = [overrides for overrides, folder in zip(batch, folders, strict=True) if not settled(folder)]
        if pending:
            self.returns.append(self.launcher.launch(pending, initial_job_idx=self.job_index))
        self.job_index += len(batch)
        return folders

    def tune(self, method: str, overrides: list[str], space: list, settings) -> dict:
        """The method's trials, then its best point and its defaults on the held-out training seeds."""
        from unlearnbench.core.tuning import DEFAULT, TRIAL, TUNED, Search
        from unlearnbench.report.compute.tuning import score_folders

        search, trials = Search(space, settings.seed, method), []
        for number in range(settings.trials):
            trial = search.ask()
            folders = self.launch([[*overrides, *search.overrides(trial.params), f"tune.stage={TRIAL}",
                                    f"tune.trial={number}", f"seeds.train={seed}"] for seed in settings.seeds])
            scored = score_folders(folders, method, settings.objective)
            search.tell(trial, None if scored.reason else scored.value)
            if scored.reason:
                log.warning("%s: trial %d failed: %s", method, number, scored.reason)
            trials.append({"trial": number, "params": dict(trial.params), **scored.as_record()})
        record = {"space": [vars(dimension) for dimension in space], "trials": trials}
        done = [t for t in trials if t["state"] == "complete"]
        if not done:
            return {**record, "error": f"all {len(trials)} trials failed"}
        best = min(done, key=lambda t: (t["objective"], t["trial"]))
        stages = {TUNED: [*overrides, *search.overrides(best["params"]), f"tune.stage={TUNED}"],
                  DEFAULT: [*overrides, f"tune.stage={DEFAULT}"]}
        folders = self.launch([[*stage, f"seeds.train={seed}"] for stage in stages.values()
                               for seed in settings.heldout])
        held = len(settings.heldout)
        judged = {stage: score_folders(folders[k * held:(k + 1) * held], method, settings.objective).as_record()
                  for k, stage in enumerate(stages)}
        return {**record, "best": best, "heldout": judged}
