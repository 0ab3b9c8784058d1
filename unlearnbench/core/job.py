"""One Hydra job: the inner body of the seed-sensitivity algorithm for fixed seeds, written to `result.json`.

    data  <- dataset.load()
    M_o   <- trained on D with the training seed (or from the cache)
    for each target c of the scenario:
        D_f, D_r, D'_f, D'_r <- scenario.split(c, unlearning seed)
        M_r <- trained on D_r with the unlearning seed (or from the cache)
        for each method a:
            M_u <- a(copy of M_o)                      timed; memory and utilisation sampled
            records += scores of M_o, M_r, M_u on every split, with the evaluation seed
            records += relearn time of copies of M_o, M_r, M_u on D_f (`evaluation.relearn`, opt-in)
            examples += M_o's, M_r's and M_u's outputs on D_f and samples of D_r, D'_r (examples.parquet)
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch
from lightning_fabric import Fabric
from omegaconf import DictConfig, OmegaConf
from torch import nn

from unlearnbench import __version__
from unlearnbench.core.components import build, locate, target_of
from unlearnbench.core.config import validate
from unlearnbench.core.errors import FILE_ONLY, UserError
from unlearnbench.core.files import EXAMPLES, RESULT, WriteError, remove_file, write_atomically
from unlearnbench.runtime import interrupt, progress
from unlearnbench.runtime.cache import ModelCache
from unlearnbench.runtime.evaluate import evaluation_batch_size
from unlearnbench.runtime.fabric import make_fabric, quiet_known_warnings
from unlearnbench.runtime.models import ModelStore, Trained, training_channels_last
from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.numerics import numerics_identity
from unlearnbench.runtime.ranks import (
    JOB,
    Failure,
    Lockstep,
    PeerFailed,
    RankDied,
    RoundAbandoned,
    launch,
    spawned,
    supervise,
)
from unlearnbench.runtime.seeding import configure_determinism, streams
from unlearnbench.tasks.image.data.base import full_pool
from unlearnbench.tasks.image.data.scenarios import Scenario, Splits
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.methods.base import Method, UnlearningTask
from unlearnbench.tasks.image.metrics.examples import ExampleTable
from unlearnbench.tasks.image.metrics.relearn import ImageRelearning, Relearning, RelearnSettings
from unlearnbench.tasks.image.metrics.scoring import Evaluator, Outputs, Scorer

log = logging.getLogger(__name__)
SCHEMA = 1
idle_since = psutil.Process().create_time()  # start of this process, then the end of its last job


@dataclass
class JobPlan:
    """What every rank needs, as plain data (it crosses process boundaries under ddp_spawn)."""

    config: dict
    methods: list[dict]
    folder: str
    known_failures: dict[str, str] = field(default_factory=dict)  # unit → message, from an earlier round (ranks.py)
    log: tuple[str | None, str | None] = (None, None)  # the job's log file and line format, for spawned ranks


@dataclass
class Outcome:
    records: list[dict] = field(default_factory=list)
    cache: dict = field(default_factory=lambda: {"original": None, "retrained": []})
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    trace: str | None = None
    numerics: dict | None = None  # the float trajectory's identity (runtime/numerics.py), once the job set it up
    dataset: dict | None = None  # the loaded data's identity, sizes and split (`ImageData.describe`)
    failures: list[dict] = field(default_factory=list)  # (target, method) that failed alone, with the reason
    succeeded: int = 0  # (target, method) pairs scored
    lockstep: Lockstep | None = None  # how the ranks agree on each unit's outcome (one rank: trivially)
    unreported: list[tuple[str, Failure]] = field(default_factory=list)  # failures not logged yet
    examples: ExampleTable | None = None  # the per-example outputs (`evaluation.examples`)
    curves: list[dict] = field(default_factory=list)  # per epoch: loss, accuracy, lr of each trained model

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - start

    @contextmanager
    def stage(self, title: str, timing: str) -> Iterator[progress.Stage]:
        """A stage of the job: timed into `timings[timing]`, with a line in the log when it starts and ends."""
        with self.timed(timing), progress.stage(title) as current:
            yield current

    @classmethod
    def begin(cls, fabric: Fabric, plan: JobPlan) -> Outcome:
        """An outcome whose first timing is the start-up (from the process start or the previous job's end), with
        this process's determinism switches set for the job and its numerics identity taken after them."""
        outcome = cls()
        outcome.timings["startup"] = time.time() - max(idle_since, psutil.Process().create_time())
        runtime, config = plan.config["runtime"], plan.config
        configure_determinism(runtime["deterministic"], runtime["threads"], runtime["matmul_precision"])
        outcome.numerics = numerics_identity(fabric.device, config["precision"]["name"], fabric.world_size,
                                             config["strategy"]["name"])
        outcome.lockstep = Lockstep(fabric, config["strategy"]["timeout_s"], plan.folder, plan.known_failures)
        return outcome

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Record an error instead of raising it (a job never raises: the sweep's report must still be built);
        a `UserError` is the whole message, anything else also keeps its traceback for the job log. With several
        ranks, an error on any of them is the job's error."""
        failure = None
        try:
            yield
        except RoundAbandoned as left:
            if self.lockstep.spawned:  # the launching process starts the ranks again (runtime/ranks.py)
                raise
            self.error = (f"{left.unit}: {left.message}; the ranks could not go on in step, so the job stopped there "
                          f"(rerun it to run the rest)")
            return  # no agreement: the peers are gone or stuck
        except Exception as error:
            failure = failure_of(error)
        failure = self.agreed(JOB, failure)
        if failure is not None:
            self.error, self.trace = failure.message, failure.trace

    def unsettled(self, items: list, target: str | None = None) -> Iterator:
        """The targets (or, for `target`, the methods) still to run; one that failed in an earlier round of the job
        (ranks.py) is recorded with its message and not run again."""
        for item in items:
            method = None if target is None else item.name
            known = self.lockstep.known.get(unit_name(target or item, method)) if self.lockstep else None
            if known is None:
                yield item
            else:
                self.fail(target or item, method, Failure(known))

    @contextmanager
    def isolated(self, target: str, method: str | None = None) -> Iterator[None]:
        """Run one target's (method None) or one method's work so that its failure is recorded and the rest of the
        job goes on: one diverging or crashing method never takes the other methods or targets with it. Every rank
        learns whether the unit succeeded on all of them before any goes on (ranks.py)."""
        unit, failure = unit_name(target, method), None
        try:
            yield
        except PeerFailed as peer:  # the ranks agreed on this failure inside the unit
            failure = peer.failure
        except Exception as error:
            failure = self.agreed(unit, failure_of(error))
        else:
            failure = self.agreed(unit, None)
        if failure is not None:
            self.fail(target, method, failure)
        elif method is not None:
            self.succeeded += 1

    def agreed(self, unit: str, failure: Failure | None) -> Failure | None:
        return self.lockstep.agree(unit, failure) if self.lockstep else failure

    def fail(self, target: str, method: str | None, failure: Failure) -> None:
        self.failures.append({"target": target, "method": method, "error": failure.message})
        self.unreported.append((unit_name(target, method), failure))
        if self.lockstep is None or self.lockstep.logs:
            self.report_failures()

    def report_failures(self) -> None:
        """Log the failures not logged yet: at once in the job's own process, after the launch for spawned ranks
        (their logging is not the job's: it would reach the terminal, tracebacks and all)."""
        for unit, failure in self.unreported:
            log.warning("%s failed: %s", unit, failure.message)
            if failure.trace:
                log.error("the traceback:\n%s", failure.trace, extra=FILE_ONLY)
        self.unreported.clear()

    @property
    def status(self) -> tuple[str, str | None]:
        """("complete", None) when the job ran and at least one method was scored (failures are listed beside);
        ("failed", why) when the job itself failed or nothing could be scored."""
        if self.error:
            return "failed", self.error
        if self.failures and not self.succeeded:
            first = self.failures[0]
            where = f"target {first['target']}" + (f", method {first['method']}" if first["method"] else "")
            return "failed", f"{first['error']} ({where}" + (f"; {len(self.failures) - 1} more failures)"
                                                               if len(self.failures) > 1 else ")")
        return "complete", None

    def keep_curve(self, model: str, seed: int, curve: dict | None, target: str | None = None,
                   method: str | None = None, cached: bool = False) -> None:
        """A trained model's per-epoch curve for result.json's `curves` (a model that trained no epoch has none)."""
        if curve and curve.get("epoch"):
            self.curves.append({"model": model, "target": target, "method": method, "seed": seed, "cached": cached,
                                **curve})

    def add(self, target: str, method: str | None, role: str, scores: dict) -> None:
        for (metric, split), value in scores.items():
            self.records.append({"target": target, "method": method, "role": role, "metric": metric,
                                 "split": split, "value": value})


class Diverged(Exception):
    """A model whose weights or outputs are not finite: its metrics are null and the reason is recorded."""


def failure_of(error: Exception) -> Failure:
    """What a unit's error records: a `UserError`'s or `Diverged`'s message alone; anything else is a bug, named by
    its type, with its traceback for the job log."""
    if isinstance(error, UserError | Diverged):
        return Failure(str(error))
    return Failure(f"{type(error).__name__}: {error}", traceback.format_exc())


def unit_name(target: str, method: str | None) -> str:
    return f"target {target}" + (f", method {method}" if method else "")


def cost_scores(cost: Cost) -> dict:
    return {(metric, None): value for metric, value in cost.as_dict().items()}


class Workbench:
    """What the stages of one job share: the data on the device, the model store, the evaluator, the monitor."""

    def __init__(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        cfg = OmegaConf.create(plan.config)
        self.fabric, self.cfg, self.seeds, self.outcome = fabric, cfg, cfg.seeds, outcome
        with self.stage(f"loading {plan.config['dataset']['name']}", "load_data") as loading:
            self.data = build(plan.config["dataset"], "dataset").load().to(fabric.device)
            loading.note(f"{len(self.data.train_labels):,} training and {len(self.data.test_labels):,} test images")
        outcome.dataset = self.data.describe()
        self.scenario = build(plan.config["scenario"], "scenario")
        if not isinstance(self.scenario, Scenario):
            raise UserError(f"scenario {self.scenario.name} is not an image-classification scenario; valid: "
                            f"full_class, sub_class, random_sample")
        self.targets = self.scenario.targets(self.data)
        self.methods = [build(m, "method") for m in plan.methods]
        self.normalizer = Normalizer(self.data.mean, self.data.std)
        self.monitor = CostMonitor(fabric.device)
        runtime = cfg.runtime
        channels_last = training_channels_last(fabric.device.type, runtime.channels_last)
        identity = {"dataset": self.data.name, "data": outcome.dataset["fingerprint"], "model": plan.config["model"],
                    "normalisation": [list(self.data.mean), list(self.data.std)],
                    "recipe": plan.config["train"], "channels_last": channels_last, "numerics": outcome.numerics}
        self.store = ModelStore(fabric, self.new_model, ModelCache(cfg.paths.cache_dir), self.normalizer,
                                self.monitor, cfg.train, identity, channels_last)
        batch_size = cfg.evaluation.batch_size or evaluation_batch_size(fabric.device.type)
        self.evaluator = Evaluator(fabric, self.data, self.store, self.normalizer, batch_size)
        if cfg.evaluation.examples:
            outcome.examples = ExampleTable(cfg.evaluation.examples_per_split, outcome.dataset["fingerprint"])

    def stage(self, title: str, timing: str):
        return self.outcome.stage(title, timing)

    def new_model(self) -> nn.Module:
        data = self.data
        return build(self.cfg.model, "model", num_classes=data.num_classes, in_channels=data.channels,
                     image_size=data.image_size)

    def original(self) -> Trained:
        """M_o: trained on the whole training pool with the training seed."""
        title = f"original model (training seed {self.seeds.train})"
        with self.stage(title, "original") as training:
            original = self.store.trained(full_pool(self.data, "train"), "original", self.seeds.train, title)
            training.note(provenance(original))
        self.outcome.cache["original"] = original.cache
        self.outcome.keep_curve("original", self.seeds.train, original.curve, cached=original.cache["hit"])
        return original

    def split(self, target: str) -> Splits:
        splits = self.scenario.split(self.data, target, streams("forget_set", self.seeds.forget).torch)
        progress.say(f"target {target}: |D_f| = {len(splits.forget_train)}, |D_r| = {len(splits.retain_train)}")
        if self.outcome.examples is not None:
            self.outcome.examples.choose(target, splits)
        return splits

    def keep_examples(self, target: str, splits: Splits, role: str, method: str | None, outputs: Outputs) -> None:
        """The model's per-example outputs on the target's chosen examples (examples.parquet)."""
        if self.outcome.examples is not None:
            self.outcome.examples.add(target, role, method, outputs.train, outputs.test, splits)

    def retrained(self, target: str, splits: Splits) -> Trained:
        """M_r: trained from scratch on D_r with the unlearning seed."""
        title = f"target {target}: retrained model (unlearning seed {self.seeds.unlearn})"
        with self.stage(title, "retrained") as training:
            retrained = self.store.trained(splits.retain_train, "retrained", self.seeds.unlearn, title)
            training.note(provenance(retrained))
        self.outcome.cache["retrained"].append({"target": target, **retrained.cache})
        self.outcome.keep_curve("retrained", self.seeds.unlearn, retrained.curve, target,
                                cached=retrained.cache["hit"])
        return retrained

    def scorer(self, target: str, splits: Splits) -> Scorer:
        evaluation = self.cfg.evaluation
        return Scorer(splits, self.seeds.eval, target, evaluation.mia_max_members, evaluation.mia_loss_folds)

    def reference_outputs(self, model: nn.Module, role: str, target: str | None = None) -> Outputs:
        """Outputs of M_o or M_r, kept for the job (the `retrain` method returns M_r: not evaluated twice); a
        reference model that diverged in training makes every comparison meaningless: an error."""
        where = f"target {target}: " if target is not None else ""
        with self.stage(f"{where}evaluation of the {role} model", f"evaluation:{role}"):
            outputs = self.evaluator.outputs(model, remember=True)
        diverged = outputs.non_finite()
        if diverged:
            raise UserError(f"the {role} model diverged in training ({diverged}); lower train.lr or choose another "
                            f"precision")
        return outputs

    def relearning(self, target: str, splits: Splits) -> ImageRelearning | None:
        """Relearn time for `target` (metrics/relearn.py), or None where `evaluation.relearn` is off."""
        relearn, evaluation = self.cfg.evaluation.relearn, self.cfg.evaluation
        if not relearn.enabled:
            return None
        return ImageRelearning(self.fabric, self.store, splits.forget_train, self.normalizer, self.cfg.train,
                               RelearnSettings.of(relearn, self.cfg.train.lr), self.seeds.eval, target,
                               evaluation.batch_size or evaluation_batch_size(self.fabric.device.type))

    def unlearn(self, method: Method, target: str, splits: Splits, original: Trained,
                retrained: Trained) -> tuple[nn.Module, Cost]:
        """M_u = method(copy of M_o), timed with memory and utilisation sampled; its randomness from the
        unlearning seed."""
        store = self.store
        task = UnlearningTask(
            self.fabric, self.cfg.model.name, self.data, splits, self.scenario, target, self.normalizer,
            rng=streams("method", self.seeds.unlearn, method.name, target),
            original=lambda: store.load(original.state),
            random_model=lambda generator: store.new(int(torch.randint(2**62, (1,), generator=generator))),
            retrained=retrained.module, retrained_cost=retrained.cost,
            memo=lambda kind, parts, build: store.memo(original, kind, parts, build),
        )
        title = f"target {target}: {method.name}"
        with (self.stage(title, f"method:{method.name}"), self.monitor.measure() as measured,
              progress.training(title) as run):
            unlearned = method.unlearn(store.load(original.state), task)
        self.outcome.keep_curve("unlearned", self.seeds.unlearn, run.curve, target, method.name)
        if self.outcome.lockstep:  # no rank evaluates (collectives) while another is failing inside the method
            self.outcome.lockstep.together(unit_name(target, method.name))
        return unlearned, method.cost(measured, task)


def execute(fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's work, run by every rank; rank 0's outcome is the job's. Errors are caught and reported: one
    target's or one method's failure is recorded and the rest of the job goes on."""
    outcome = Outcome.begin(fabric, plan)
    quiet_known_warnings()
    watch(fabric, plan)
    with outcome.capture():
        bench = Workbench(fabric, plan, outcome)
        original = bench.original()
        out_o = bench.reference_outputs(original.module, "original")
        for target in outcome.unsettled(bench.targets):
            with outcome.isolated(target):
                splits = bench.split(target)
                retrained = bench.retrained(target, splits)
                out_r = bench.reference_outputs(retrained.module, "retrained", target)
                scorer = bench.scorer(target, splits)
                scores_o, scores_r = scorer.model_scores(out_o), scorer.model_scores(out_r)
                comparison_o = scorer.comparison_scores(out_o, scores_o, out_r, scores_r)
                outcome.add(target, None, "original", scores_o | comparison_o | cost_scores(original.cost))
                outcome.add(target, None, "retrained", scores_r | cost_scores(retrained.cost))
                bench.keep_examples(target, splits, "original", None, out_o)
                bench.keep_examples(target, splits, "retrained", None, out_r)
                relearning = bench.relearning(target, splits)
                relearn_stage(outcome, relearning, original.module, target, "original", "forget_train")
                relearn_stage(outcome, relearning, retrained.module, target, "retrained", "forget_train")
                for method in outcome.unsettled(bench.methods, target):
                    with outcome.isolated(target, method.name):
                        unlearned, cost = bench.unlearn(method, target, splits, original, retrained)
                        with bench.stage(f"target {target}: evaluation of {method.name}",
                                         f"evaluation:{method.name}"):
                            out_u = bench.evaluator.outputs(unlearned)
                            scores_u = scorer.model_scores(out_u)
                            comparison_u = scorer.comparison_scores(out_u, scores_u, out_r, scores_r)
                        diverged = out_u.non_finite()
                        if diverged:  # its scores are meaningless: null, with the reason
                            scores_u, comparison_u = dict.fromkeys(scores_u), dict.fromkeys(comparison_u)
                        outcome.add(target, method.name, "unlearned", scores_u | comparison_u | cost_scores(cost))
                        if diverged:
                            raise Diverged(f"{method.name} diverged: {diverged}")
                        bench.keep_examples(target, splits, "unlearned", method.name, out_u)
                        relearn_stage(outcome, relearning, unlearned, target, "unlearned", "forget_train", method.name)
    return outcome


def relearn_stage(outcome: Outcome, relearning: Relearning | None, model: nn.Module, target: str, role: str,
                  split: str, method: str | None = None) -> None:
    """One model's relearn time (metrics/relearn.py) as a stage of its own, timed as `relearn:<role or method>`,
    into its records on `split` (D_f's name in the task); nothing where `evaluation.relearn` is off. M_o's run comes
    first: its loss sets the threshold."""
    if relearning is None:
        return
    who = method or role
    with outcome.stage(f"target {target}: relearning {who}", f"relearn:{who}") as current:
        run = relearning.original(model) if role == "original" else relearning.run(model)
        current.note(run.describe(relearning.settings.k))
    outcome.add(target, method, role, run.scores(split))


def provenance(model: Trained) -> str:
    """Where a reference model came from, for its stage's end line."""
    if model.cache["hit"]:
        return "from the cache"
    curve = model.curve or {}
    accuracy = (curve.get("train_acc") or [None])[-1]
    return f"trained, {len(curve.get('epoch') or [])} epochs" + (
        f", final training accuracy {accuracy:.1%}" if accuracy is not None else "")


def watch(fabric: Fabric, plan: JobPlan) -> None:
    """This rank's progress for the job: rank 0 logs (a spawned rank 0 into the job's log file, which its fresh
    process does not have yet), and shows live progress unless `runtime.progress` is false."""
    progress.configure(plan.config["runtime"]["progress"], fabric.is_global_zero)
    if fabric.is_global_zero and spawned(fabric):
        progress.join_job_log(*plan.log)


def registered_methods(cfg: DictConfig, task: str) -> list[dict]:
    """Every method config of `conf/method/` (and of added config dirs) that serves `task`, resolved against this
    job's config `cfg`."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    methods = []
    for name in loader.get_group_options("method"):
        method = method_config(cfg, loader, name)
        if target_of(OmegaConf.to_container(method), "method").task == task:
            methods.append(OmegaConf.to_container(method, resolve=True))
    return methods


def method_config(cfg: DictConfig, loader, name: str) -> DictConfig:
    """The config `+method=name` would give this job. A plain method YAML (no defaults list, the default package) is
    read and merged into `cfg`, in milliseconds; anything else is composed by Hydra with the job's overrides, about
    0.2 s each (18 methods made the demo's start-up 3 s longer)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    found = loader.repository.load_config(f"method/{name}")
    if found is not None and not found.defaults_list and found.header.get("package") in (None, "_group_", "method"):
        return OmegaConf.merge(cfg, {"method": found.config}).method
    hydra_cfg = HydraConfig.get()
    overrides = [*hydra_cfg.overrides.hydra, *hydra_cfg.overrides.task, f"+method={name}"]
    return loader.load_configuration(hydra_cfg.job.config_name, overrides, RunMode.RUN).method


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
                            f"a {task} dataset")
    config = OmegaConf.to_container(cfg, resolve=True)
    scenario = build(config["scenario"], "scenario")
    methods = [config["method"]] if config["method"] is not None else chosen(registered_methods(cfg, task),
                                                                             config["methods"], task)
    unserved = [m["name"] for m in methods if not build(m, "method").serves(scenario)]
    if config["method"] is not None and unserved:
        raise UserError(f"method {unserved[0]} does not serve scenario {scenario.name}")
    return JobPlan(config, [m for m in methods if m["name"] not in unserved], str(folder), log=progress.job_log())


def job_fields(cfg: DictConfig) -> dict:
    """The job's identity in `result.json` (whatever of it resolves: a job with a broken config still reports)."""
    try:
        return _job_fields(cfg)
    except Exception as error:
        return {"task": OmegaConf.select(cfg, "task.name", default=None), "config_error": str(error).splitlines()[0]}


def _job_fields(cfg: DictConfig) -> dict:
    return {"task": cfg.task.name, "dataset": cfg.dataset.name, "model": cfg.model.name,
            "scenario": cfg.scenario.name, "method": cfg.method.name if cfg.method is not None else "all",
            "seed_train": cfg.seeds.train, "seed_unlearn": cfg.seeds.unlearn, "seed_eval": cfg.seeds.eval,
            "seed_forget": cfg.seeds.forget,
            "strategy": cfg.strategy.name, "precision": cfg.precision.name,
            "devices": cfg.strategy.devices * cfg.strategy.num_nodes}


def versions() -> dict:
    import lightning_fabric

    return {"unlearnbench": __version__, "torch": torch.__version__, "lightning": lightning_fabric.__version__,
            "python": platform.python_version()}


def json_safe(value):
    """`value` with every non-finite float (NaN, ±inf) as None: strict JSON has no such numbers, and a metric that
    overflowed is not a measurement."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def write_json(path: Path, content: dict) -> None:
    write_atomically(path, json.dumps(json_safe(content), indent=1, allow_nan=False))


def read_result(path: Path) -> dict | None:
    """The result at `path`, or None where there is none (or none readable: the job is then run again)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def finished(path: Path) -> bool:
    return (read_result(path) or {}).get("status") == "complete"


def result_document(cfg: DictConfig, outcome: Outcome, started: str | None) -> dict:
    """`result.json`'s content: the job's identity and what its outcome holds."""
    status, error = outcome.status
    return {"schema": SCHEMA, "status": status, "error": error,
            "job": job_fields(cfg), "versions": versions(), "numerics": outcome.numerics,
            **({"dataset": outcome.dataset} if outcome.dataset else {}), "started": started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cache": outcome.cache, "timings": outcome.timings, "failures": outcome.failures,
            "curves": outcome.curves, "records": outcome.records}


def failed_result(cfg: DictConfig, error: str) -> dict:
    """The result of a job that ended without reporting (e.g. one SLURM killed), written for it by the launcher."""
    return result_document(cfg, Outcome(error=error), started=None)


def publish(path: Path, result: dict, examples: ExampleTable | None = None) -> None:
    """Write `result.json` whole or not at all, after the job's `examples.parquet` beside it (so that a complete
    result always has its examples; a stale file of an earlier run is removed). Where they cannot be written (a full
    disk, a read-only folder) the sweep cannot record anything more: stop it with one line, leaving every file
    already written intact."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        examples_path = path.with_name(EXAMPLES)
        if examples is not None and len(examples):
            examples.write(examples_path)
        else:
            remove_file(examples_path)
        write_json(path, result)
    except OSError as error:
        what = str(error) if isinstance(error, WriteError) else f"cannot write {path}: {error.strerror or error}"
        raise SystemExit(f"unlearnbench: {what}; the sweep stops (finished jobs are kept: rerun the same command to "
                         f"resume)") from None


def ranks_outcome(cfg: DictConfig, fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's outcome from its ranks. Ranks that Fabric spawns are supervised: a round the ranks had to leave at
    a failed unit starts again without it (runtime/ranks.py). Ranks that SLURM started cannot be started again from
    here: where they cannot go on in step, the job stops there, failed with the first failing rank's message and the
    records before it (`Outcome.capture`)."""
    runner = locate(cfg.task.runner)
    if not spawned(fabric):
        return launch(fabric, runner, plan)
    try:
        return supervise(lambda: make_fabric(cfg.strategy, cfg.precision, cfg.runtime.accelerator), runner, plan)
    except RankDied as error:
        return Outcome(error=str(error))


def run_job(cfg: DictConfig) -> dict:
    """Run one job into its Hydra output folder, unless its result is already complete there (resumption)."""
    from hydra.core.hydra_config import HydraConfig

    interrupt.check()  # asked for while Hydra composed this job: it does not start
    folder = Path(HydraConfig.get().runtime.output_dir)
    path = folder / RESULT
    if finished(path):
        log.info("%s: already complete, skipped", folder.name)
        return json.loads(path.read_text())
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
    global idle_since
    idle_since = time.time()
    if result["status"] == "complete" and cfg.runtime.print_table:
        from unlearnbench.report.render.console import job_table

        print(job_table(result))
    return result
