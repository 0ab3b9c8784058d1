"""`hydra/sweeper=tune` (`experiment=tune`): a method's declared search space explored by Optuna's TPE, each trial a
batch of seeded jobs sent through the configured launcher, the best point then judged on training seeds the trials
never saw (docs/tuning.md; the search spaces: `unlearnbench.core.tuning`; the objective:
`unlearnbench.report.compute.tuning`).

For each method of `+method=a,b`, tuned on its own: trial 0 runs the method's defaults (its config unchanged);
trial k > 0 asks Optuna (ask-and-tell; a `TPESampler` seeded from `tune.seed` and the method's name, with
`tune.startup_trials` random start-up points) for a point, runs one job per tuning training seed with it (at once
where the launcher can: `hydra/launcher=local`, SLURM), reads their records from the jobs' result.json and tells
Optuna the objective, or a failed trial where a job or the method failed (a diverging learning rate), never a score.
With `tune.replicates=R` (or R sets of `tune.seed_sets`) the whole tuning runs R times, each replicate with its own
sampler seed (and tuning seeds). The searches are independent, so trial k of every method and replicate runs in one
batch (a launcher keeps more workers busy than with one method's). Then the defaults and each replicate's best point
of every method run on `tune.heldout`, in one batch. Every job keeps the job contract (result.json, the model cache
that trains each training seed's M_o once, resume). `tuning.json` in the sweep folder records the trials after each
round and the judgement at the end; the report reads it. With `tune.stop_step=true` a trial is scored at the best of
its step records (`evaluation.during.every`), and the best point's held-out jobs rerun the method to that step
(`core.tuning.stopping_of`: refused in one line for a method whose shorter run is not the start of a longer one).

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


def recorded(scored) -> dict:
    """What tuning.json keeps of a scored batch (`Scored.as_record`), its reason in words."""
    from unlearnbench.report.render.words import text

    return {**scored.as_record(), "reason": None if scored.reason is None else text(scored.reason)}


def worded_rule(rule: dict | None) -> dict | None:
    """The objective's rule (`compute.tuning.objective_rule`) as tuning.json states it: in words."""
    from unlearnbench.report.render.words import text

    return None if rule is None else {**rule, "rule": text(rule["rule"])}


def settled(folder: Path) -> bool:
    """Whether the job in `folder` has its outcome: complete, or failed in its method (a diverging point, which
    would fail again)."""
    from unlearnbench.core.result import stored_result

    result = stored_result(folder)
    return result is not None and (result["status"] == "complete" or bool(result.get("failures")))


class MethodTuning:
    """One method's tuning: a search per replicate (trial 0: the defaults), their trials, and the jobs of a trial and
    of the held-out judgement."""

    def __init__(self, method: str, overrides: list[str], space: list, defaults, settings, stopping=None) -> None:
        from unlearnbench.core.tuning import Search

        self.method, self.overrides, self.space, self.defaults, self.settings = (method, overrides, space, defaults,
                                                                                settings)
        self.stopping = stopping  # `tune.stop_step`: how the method's rerun stops at the chosen step (None: off)
        self.searches = [Search(space, settings.seed, method, replicate, settings.startup_trials, defaults)
                         for replicate in range(settings.replicates)]
        self.trials: list[list[dict]] = [[] for _ in self.searches]
        self.points: list = []
        self.judged: list[dict | None] = [None] * settings.replicates

    def trial_jobs(self, number: int) -> list[list[list[str]]]:
        """Trial `number` of every replicate: its jobs, one per tuning seed of the replicate. They carry
        `tune.replicate` where there are several replicates, but for the defaults' trial, whose jobs are the same
        in every replicate on the same seeds."""
        from unlearnbench.core.tuning import DEFAULTS, TRIAL

        self.points = [search.ask() for search in self.searches]
        several = self.settings.replicates > 1
        return [[[*self.overrides, *search.overrides(point.params, point.drawn), f"tune.stage={TRIAL}",
                  f"tune.trial={number}", *([f"tune.replicate={replicate}"] if several and point.drawn != DEFAULTS
                                            else []), f"seeds.train={seed}"]
                 for seed in self.settings.sets[replicate]]
                for replicate, (search, point) in enumerate(zip(self.searches, self.points, strict=True))]

    def tell(self, number: int, folders: list[list[Path]]):
        """Each replicate's sampler told the objective of its trial `number` (the jobs in `folders`, per replicate);
        the scored batches' objective rule."""
        from unlearnbench.report.compute.tuning import score_folders
        from unlearnbench.report.render.words import text

        rule = None
        for replicate, (search, point, batch) in enumerate(zip(self.searches, self.points, folders, strict=True)):
            scored = score_folders(batch, self.method, self.settings.objective,
                                   None if self.stopping is None else self.stopping.unit)
            search.tell(point, None if scored.reason else scored.value)
            rule = rule or worded_rule(scored.rule)
            if scored.reason:
                where = f" of replicate {replicate}" if self.settings.replicates > 1 else ""
                log.warning("%s: trial %d%s failed: %s", self.method, number, where, text(scored.reason))
            self.trials[replicate].append({"trial": number, "params": point.params, "drawn": point.drawn,
                                           **recorded(scored)})
        return rule

    def best(self, replicate: int) -> dict | None:
        done = [trial for trial in self.trials[replicate] if trial["state"] == "complete"]
        return min(done, key=lambda t: (t["objective"], t["trial"])) if done else None

    def stages(self) -> list[list[str]]:
        """The held-out stages: the defaults, then each replicate's best point (none where no trial completed). With
        several replicates a best point's jobs carry its replicate, so that the report keeps each replicate's
        judgement apart (job field `tuning_replicate`); the defaults' are the same for all."""
        from unlearnbench.core.tuning import DEFAULT, TUNED

        several = self.settings.replicates > 1
        chosen = [(replicate, best) for replicate, best in enumerate(map(self.best, range(self.settings.replicates)))
                  if best is not None]
        if not chosen:
            return []
        return [[*self.overrides, f"tune.stage={DEFAULT}"],
                *([*self.tuned_overrides(best), f"tune.stage={TUNED}",
                   *([f"tune.replicate={replicate}"] if several else [])] for replicate, best in chosen)]

    def tuned_overrides(self, best: dict) -> list[str]:
        """The overrides of a best trial's held-out jobs: its point, and with `tune.stop_step` the override that stops
        the method at the chosen step, in place of any other value of that option (the point's own epochs, the
        command line's max_steps)."""
        point = [*self.overrides, *self.searches[0].overrides(best["params"], best["drawn"])]
        if self.stopping is None:
            return point
        key = self.stopping.key
        return [*(o for o in point if o.split("=", 1)[0].lstrip("+~") != key),
                self.stopping.override(best["step"], best.get("epoch"))]

    def judge(self, folders: list[list[Path]]) -> None:
        """The held-out objectives of the stages' jobs (`folders`, per stage)."""
        from unlearnbench.core.tuning import DEFAULT, TUNED
        from unlearnbench.report.compute.tuning import score_folders

        judged = [recorded(score_folders(batch, self.method, self.settings.objective)) for batch in folders]
        chosen = [replicate for replicate in range(self.settings.replicates) if self.best(replicate) is not None]
        for replicate, tuned in zip(chosen, judged[1:], strict=True):
            self.judged[replicate] = {TUNED: tuned, DEFAULT: judged[0]}

    def record(self) -> dict:
        """The method's entry of tuning.json."""
        from unlearnbench.core.tuning import DEFAULTS_TRIAL, TPE
        from unlearnbench.report.compute.notes import Note
        from unlearnbench.report.render.words import text

        replicates = []
        for replicate, (search, trials) in enumerate(zip(self.searches, self.trials, strict=True)):
            tpe = sum(trial["drawn"] == TPE for trial in trials)
            entry = {"replicate": replicate, "seeds": list(self.settings.sets[replicate]),
                     "sampler_seed": search.seed, "trials": trials, "tpe_trials": tpe, "random_search": tpe == 0}
            best = self.best(replicate)
            if best is None:
                entry["error"] = text(Note("all_trials_failed", {"trials": len(trials)}))
            else:
                entry["best"] = best
                if self.judged[replicate] is not None:
                    entry["heldout"] = self.judged[replicate]
            replicates.append(entry)
        stop = {} if self.stopping is None else {"stop_step": vars(self.stopping)}
        return {**stop, "space": [vars(dimension) for dimension in self.space],
                "defaults": {"trial": DEFAULTS_TRIAL, "params": self.defaults.params,
                             "outside_space": list(self.defaults.outside), "told": self.defaults.told},
                "startup_trials": self.searches[0].startup, "replicates": replicates}


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
        from unlearnbench.core.tuning import Settings, split_arguments, write_tuning
        from unlearnbench.runtime.errors import EndSweep, UserError

        try:
            settings = Settings.of(self.config)
            methods, base = split_arguments(arguments)
            tunings = [self.tuning(method, [override, *base], settings) for method, override in methods]
        except UserError as error:
            raise EndSweep(error) from None
        folder = Path(str(self.config.hydra.sweep.dir))
        folder.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, folder / "multirun.yaml")
        record = {"seed": settings.seed, "seeds": settings.seeds, "heldout": settings.heldout,
                  "objective": settings.objective, "startup_trials": settings.startup_trials,
                  "replicates": settings.replicates, "seed_sets": [list(seeds) for seeds in settings.sets],
                  **({"stop_step": True} if settings.stop_step else {}),
                  "objective_rule": None, "methods": {}}
        try:
            for number in range(settings.trials):
                record["objective_rule"] = self.trial_round(number, tunings) or record["objective_rule"]
                write_tuning(folder, {**record, "methods": {t.method: t.record() for t in tunings}})
            self.judge(tunings)
        except UserError as error:  # tune.objective naming a metric without an ideal (the results tell)
            raise EndSweep(error) from None
        write_tuning(folder, {**record, "methods": {t.method: t.record() for t in tunings}})
        return self.returns

    def tuning(self, method: str, overrides: list[str], settings) -> MethodTuning:
        space, defaults, stopping = self.space(overrides[0], overrides[1:], settings.stop_step)
        return MethodTuning(method, overrides, space, defaults, settings, stopping)

    def space(self, override: str, base: list[str], stop_step: bool = False) -> tuple[list, Any, Any]:
        """The method's declared search space, its defaults' point, and with `tune.stop_step` how its rerun stops at
        a step (`core.tuning.stopping_of`, refused in one line where it cannot), from its config as its jobs compose
        it."""
        from unlearnbench.core.components import option_names, target_of
        from unlearnbench.core.tuning import defaults_of, search_space, stopping_of

        composed = self.hydra_context.config_loader.load_sweep_config(self.config, [*base, override])
        method = OmegaConf.to_container(composed.method, resolve=True)
        space = search_space(method, option_names(target_of(method, "method")))
        job = {key: OmegaConf.to_container(composed[key], resolve=True) for key in ("evaluation", "train")}
        return space, defaults_of(method, space), stopping_of(method, job) if stop_step else None

    def launch(self, batch: list[list[str]]) -> list[Path]:
        """Run one batch of jobs, at once where the launcher can, and return their folders (where each job writes
        its result.json whichever launcher ran it). A job already settled, or twice in the batch (the same config
        for two replicates), runs once."""
        from hydra_plugins.unlearnbench_launcher.resume import job_folder

        folders = [job_folder(self.hydra_context, self.config, overrides, self.job_index + k)[0]
                   for k, overrides in enumerate(batch)]
        pending: dict[Path, list[str]] = {}
        for overrides, folder in zip(batch, folders, strict=True):
            if folder not in pending and not settled(folder):
                pending[folder] = overrides
        if pending:
            self.returns.append(self.launcher.launch(list(pending.values()), initial_job_idx=self.job_index))
        self.job_index += len(batch)
        return folders

    def launch_nested(self, nested: list[list[list[str]]]) -> list[list[Path]]:
        """`launch` of groups of jobs in one batch, their folders grouped alike."""
        folders = iter(self.launch([jobs for group in nested for jobs in group]))
        return [[next(folders) for _ in group] for group in nested]

    def trial_round(self, number: int, tunings: list[MethodTuning]) -> dict | None:
        """Trial `number` of every method and replicate in one batch of jobs (the searches are independent), each
        search then told its objective; the objective's rule, where a batch was scored."""
        jobs = [tuning.trial_jobs(number) for tuning in tunings]
        folders = iter(self.launch_nested([batch for replicates in jobs for batch in replicates]))
        rule = None
        for tuning, replicates in zip(tunings, jobs, strict=True):
            rule = tuning.tell(number, [next(folders) for _ in replicates]) or rule
        return rule

    def judge(self, tunings: list[MethodTuning]) -> None:
        """The defaults and every replicate's best point of every method on `tune.heldout`, in one batch. The
        held-out jobs carry no replicate, so a point two replicates chose runs once, and the defaults once."""
        stages = [tuning.stages() for tuning in tunings]
        folders = iter(self.launch_nested([[[*stage, f"seeds.train={seed}"] for seed in tuning.settings.heldout]
                                           for tuning, own in zip(tunings, stages, strict=True) for stage in own]))
        for tuning, own in zip(tunings, stages, strict=True):
            if own:
                tuning.judge([next(folders) for _ in own])
