"""The text task's bench (TOFU-format question answering with a causal LM): the steps of the job loop
(`core.job.execute`) for language models.

    data, tokenizer <- dataset.load(), model.tokenizer(the data's text)
    M_o  <- the base model fine-tuned on full ∪ general sets with the training seed (or from the cache)
    for each target (one forget set of whole entities):
        D_f, D_r <- scenario.split(forget seed)
        M_r <- the base model fine-tuned on D_r ∪ general sets with the unlearning seed (or from the cache)
        records += M_r's and M_o's metrics; forget quality and privleak against M_r's
        records += relearn time of copies of M_o and M_r on the forget records (`evaluation.relearn`, opt-in)
        for each method a:
            M_u <- a(copy of M_o)                      timed; memory and utilisation sampled
            records += M_u's metrics, the relearn time of a copy of M_u
            examples += M_o's, M_r's, M_u's per-example outputs (examples.parquet)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import FSDPStrategy
from torch import nn

from unlearnbench import __version__
from unlearnbench.core.bench import Bench, Evaluation, Scored
from unlearnbench.core.components import SEARCH_SPACE, build, target_of
from unlearnbench.core.method import keyed
from unlearnbench.core.outcome import Diverged, Outcome, as_records, cost_scores
from unlearnbench.core.plan import JobPlan
from unlearnbench.core.relearn import RelearnSettings
from unlearnbench.core.validation import scored_part
from unlearnbench.runtime import progress
from unlearnbench.runtime.cache import ModelCache, cache_key, cached_or_trained, derived_key
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.seeding import global_seed, streams
from unlearnbench.runtime.train import NonFiniteStep
from unlearnbench.tasks.text.benchmarks.tofu import POINTS, SELECTION, TextEvaluator
from unlearnbench.tasks.text.data.records import IDK_ANSWERS
from unlearnbench.tasks.text.evaluate import nli
from unlearnbench.tasks.text.evaluate.during import PointMetrics, Points, PointSettings, Scores
from unlearnbench.tasks.text.evaluate.examples import TextExamples
from unlearnbench.tasks.text.evaluate.generation import Sampling
from unlearnbench.tasks.text.methods.base import TextMethod, TextTask
from unlearnbench.tasks.text.model.causal_lm import CausalLM
from unlearnbench.tasks.text.model.train import Items, fine_tune
from unlearnbench.tasks.text.options import TextTrain
from unlearnbench.tasks.text.relearn import TextRelearning, bare_copy
from unlearnbench.tasks.text.scenario import ForgetEntities, TextSplits

EVAL_BATCH = 32  # OpenUnlearning's evaluation batch size


@dataclass
class TunedModel:
    """A fine-tuned reference model (M_o or M_r): the module, its weights, its training cost and cache entry."""

    module: nn.Module
    state: dict[str, torch.Tensor]  # every weight, or the adapters with LoRA
    base_seed: int  # the seed of a random-init base (`CausalLM.new`); unused with a pretrained one
    cost: Cost
    cache: dict
    curve: dict | None


def shards_weights(fabric: Fabric) -> bool:
    """Whether the strategy splits the weights themselves across ranks (FSDP, DeepSpeed ZeRO-3)."""
    return isinstance(fabric.strategy, FSDPStrategy) or bool(getattr(fabric.strategy, "zero_stage_3", False))


def subclass(config: dict, kind: str, base: type) -> bool:
    """Whether the component `config` builds is a `base` (checked before building: another task's model does not
    even build from a text job's arguments)."""
    target = target_of(config, kind)
    return isinstance(target, type) and issubclass(target, base)


class TextBench(Bench):
    """What the stages of one text job share: data, tokenizer, encoder, model cache and monitor."""

    scenario_type: type = ForgetEntities  # the scenario and preset this bench's data runs in
    preset = "experiment=tofu"
    selection = SELECTION  # the metrics its jobs show, and how (`core.catalogue.declared`)
    points: PointMetrics = POINTS  # what a point of a method's dynamics can record (`evaluation.during`)

    def __init__(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        self.prepare(fabric, plan, outcome)
        self.targets = self.scenario.targets(self.data)
        self.holdout_rows: dict[str, np.ndarray] = {}  # where a tuning's job scores a part of the holdout set
        drawn = {target: self.scenario.split(self.data, streams("forget_set", self.seeds["forget"]).torch)
                 for target in self.targets}  # before any training: a forget set that cannot be fails here
        self.splits = {target: self.scored_holdout(target, splits) for target, splits in drawn.items()}
        self.general = self.data.real_authors + self.data.world_facts
        if plan.config["evaluation"]["examples"]:
            outcome.examples = TextExamples()

    def prepare(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        """What every text bench shares: the data loaded, the scenario, model and methods built, the tokenizer
        learnt or loaded, the model cache and the cost monitor; the settings that cannot work refused."""
        config = plan.config
        self.fabric, self.config, self.outcome, self.seeds = fabric, config, outcome, config["seeds"]
        with outcome.stage(f"loading {config['dataset']['name']}", "load_data") as loading:
            self.data = build(config["dataset"], "dataset").load()
            loading.note(self.data_note())
        outcome.dataset = self.data.describe()
        if getattr(self.data, "files", None):  # the file(s) each part was read from, or "built-in"
            outcome.dataset["files"] = dict(self.data.files)
        if not (subclass(config["scenario"], "scenario", self.scenario_type) and subclass(config["model"], "model",
                                                                                          CausalLM)):
            scenario = config["scenario"]["name"]
            raise UserError(f"dataset {config['dataset']['name']} runs model=causal_lm in scenario="
                            f"{self.scenario_type().name} (not {config['model']['name']} in {scenario}): use "
                            f"{self.preset}")
        self.scenario, self.model = build(config["scenario"], "scenario"), build(config["model"], "model")
        names = (config["model"]["name"], config["dataset"]["name"], config["scenario"]["name"])
        self.methods: list[TextMethod] = [build({k: keyed(v, names) for k, v in m.items() if k != SEARCH_SPACE},
                                                "method")
                                          for m in plan.methods]  # options by model, dataset or scenario resolved
        self.tokenizer = self.model.tokenizer(self.data.texts() + list(IDK_ANSWERS))
        self.encoder = self.model.encoder(self.tokenizer)
        self.recipe = SimpleNamespace(**config["train"])
        self.cache = ModelCache(config["paths"]["cache_dir"])
        self.monitor = CostMonitor(fabric.device)
        self.identity = {"artefact": "text_model", "version": __version__, "dataset": self.data.name,
                         "data": outcome.dataset["fingerprint"], "model": self.model.identity(self.tokenizer),
                         "recipe": TextTrain.identity(config["train"]), "numerics": outcome.numerics}
        if config["evaluation"]["gradnorm"] is True and shards_weights(fabric):
            raise UserError(f"evaluation.gradnorm takes each model's gradient whole, which strategy="
                            f"{config['strategy']['name']} splits across ranks; for the GradNorm attack use strategy "
                            f"single, ddp, ddp_spawn or deepspeed_stage_1/2 (or leave evaluation.gradnorm null)")
        self.gradnorm = config["evaluation"]["gradnorm"] is not False and not shards_weights(fabric)
        if config["evaluation"]["sampling"]["k"] and config["evaluation"]["sampling"]["nli"]:
            nli.checked(config["evaluation"]["sampling"]["nli"])  # a bad judge refused before any model trains
        self.during = self.point_settings()  # unknown metrics refused before any model trains
        if config["evaluation"]["relearn"]["enabled"] and shards_weights(fabric):
            raise UserError(f"evaluation.relearn copies each model whole, which strategy={config['strategy']['name']} "
                            f"splits across ranks; for relearn time use strategy single, ddp, ddp_spawn or "
                            f"deepspeed_stage_1/2")

    def point_settings(self) -> PointSettings:
        """`evaluation.during` read: the metrics of each point (evaluate/during.py; null: the benchmark's leaderboard
        metrics that need no generation, or their stand-ins), its sample size and the evaluation seed."""
        options = self.config["evaluation"]
        leaderboard = [roles.name for roles in self.selection.metrics if roles.leaderboard]
        metrics = self.points.chosen(options["during"]["metrics"], leaderboard, bool(options["sampling"]["k"]))
        return PointSettings(metrics, options["during"]["max_examples"], self.seeds["eval"])

    def scored_holdout(self, target: str, splits: TextSplits) -> TextSplits:
        """The splits with the holdout set this job scores: a tuning's trials one part of it, its held-out judgement
        the other (core/validation.py); the whole set outside tuning. The holdout set (the membership attacks'
        non-members) is the one set outside training: the forget and retain sets are the object of unlearning, and
        the general sets are retained training data (M_o and M_r train on them: `original_records`,
        `retrained_records`), so every job scores them whole."""
        part = scored_part(self.config, "holdout", len(splits.holdout))
        if part is None:
            return splits
        self.outcome.dataset["scored"] = {"holdout": part.describe()}
        self.holdout_rows[target] = part.rows
        return replace(splits, holdout=[splits.holdout[row] for row in part.rows])

    def data_note(self) -> str:
        return f"{len(self.data.full):,} records of {len(self.data.entities())} entities"

    def items(self, records: list[dict]) -> Items:
        try:
            encoded = [self.encoder.item(r["question"], r["answer"]) for r in records]
        except UserError as error:  # a record too long for the model, or a template that cuts into the answer
            raise UserError(f"dataset {self.data.name}: {error}") from None
        return Items(self.fabric, encoded, self.encoder.pad_id)

    def tuned(self, records: list[dict], stage: str, seed: int, title: str, forget: tuple[str, ...] = ()) -> TunedModel:
        """The base model fine-tuned on `records` with `seed` (its initialisation and data order), from the cache
        when it is there; `stage` names the seed stream (M_o: the training seed's, M_r: the unlearning seed's)."""
        key = cache_key({**self.identity, "stage": stage, "seed": seed, "forget": sorted(forget)})

        def train() -> tuple[dict[str, torch.Tensor], dict]:
            rng = streams(stage, seed)
            with self.monitor.measure() as cost, progress.training(title) as run, global_seed(rng.seed):
                model = self.model.adapt(self.model.new(self.tokenizer, rng.seed), streams("lora", stage, seed).seed)
                model = fine_tune(self.fabric, model, self.items(records), self.recipe, rng.torch)
            meta = {**cost.as_dict(), "train_s": cost.time_s, "stage": stage, "seed": seed, "base_seed": rng.seed,
                    "records": len(records), "curve": run.curve}
            return self.model.trained_state(self.fabric, model), meta

        try:
            provided = cached_or_trained(self.cache, key, train, self.outcome.stage(title, stage),
                                         lambda meta: f"fine-tuned, {self.recipe.epochs} epochs",
                                         group=self.fabric if self.fabric.world_size > 1 else None)
        except NonFiniteStep as diverged:  # nothing was published: the cache never holds a diverged model
            raise UserError(f"the {stage} model diverged in fine-tuning {diverged.where}; lower train.lr") from None
        state, meta = provided.entry.state, provided.entry.meta
        base_seed = meta.get("base_seed", 0)
        module = self.fabric.setup_module(self.model.restore(self.tokenizer, state, base_seed))
        module.eval()
        cost = Cost(meta.get("time_s"), meta.get("memory_gib"), meta.get("utilisation_pct"))
        return TunedModel(module, state, base_seed, cost, provided.record, meta.get("curve"))

    def kept(self, original_key: str, title: str, parts: dict, compute) -> dict:
        """`compute()`'s result for the M_o under `original_key` and `parts`, from the model cache or computed and
        published there (an entry of no tensors whose meta holds it), so that a sweep computes it once."""
        key = derived_key(original_key, "text_kept", parts)
        provided = cached_or_trained(self.cache, key, lambda: ({}, {"kept": compute()}), progress.stage(title),
                                     lambda meta: "computed",
                                     group=self.fabric if self.fabric.world_size > 1 else None)
        return provided.entry.meta["kept"]

    def copy(self, tuned: TunedModel) -> nn.Module:
        """A fresh copy of a fine-tuned model, its adapters (if any) merged into its weights."""
        return self.model.merged(self.model.restore(self.tokenizer, tuned.state, tuned.base_seed))

    def original(self) -> TunedModel:
        """M_o: fine-tuned on the full set and the general sets with the training seed."""
        seed = self.seeds["train"]
        original = self.tuned(self.original_records(), "original", seed, f"original model (training seed {seed})")
        self.outcome.cache["original"] = original.cache
        self.outcome.keep_curve("original", seed, original.curve, cached=original.cache["hit"])
        return original

    def original_records(self) -> list[dict]:
        """What M_o trains on: the full set and the general sets."""
        return self.data.full + self.general

    def retrained_records(self, splits: TextSplits) -> list[dict]:
        """What M_r trains on, and the methods' retain set: the retain set and the general sets."""
        return splits.retain + self.general

    def method_retain(self, splits: TextSplits) -> list[dict]:
        """The methods' retain set: what M_r trains on."""
        return self.retrained_records(splits)

    def split(self, target: str) -> TextSplits:
        splits = self.splits[target]
        progress.say(f"target {target}: forget {len(splits.entities)} entities ({len(splits.forget)} records), "
                     f"retain {len(splits.retain)}")
        return splits

    def retrained(self, target: str, splits: TextSplits) -> TunedModel:
        """M_r: fine-tuned on the retain set and the general sets with the unlearning seed."""
        seed = self.seeds["unlearn"]
        retrained = self.tuned(self.retrained_records(splits), "retrained", seed,
                               f"target {target}: retrained model (unlearning seed {seed})", splits.entities)
        self.outcome.cache["retrained"].append({"target": target, **retrained.cache})
        self.outcome.keep_curve("retrained", seed, retrained.curve, target, cached=retrained.cache["hit"])
        return retrained

    def unlearn(self, method: TextMethod, target: str, splits: TextSplits, original: TunedModel,
                retrained: TunedModel) -> tuple[nn.Module, Cost]:
        """M_u = method(copy of M_o), timed with memory sampled; its randomness from the unlearning seed."""
        task = TextTask(self.fabric, self.encoder, splits, self.items(splits.forget),
                        self.items(self.method_retain(splits)), streams("method", self.seeds["unlearn"],
                                                                             method.name, target),
                        self.recipe, original=lambda: self.copy(original), retrained=retrained.module,
                        retrained_cost=retrained.cost,
                        kept=lambda title, parts, compute: self.kept(original.cache["key"], title, parts, compute))
        title, diverged = f"target {target}: {method.name}", None
        with self.outcome.stage(title, f"method:{method.name}"), self.monitor.measure() as measured, \
                progress.training(title), global_seed(task.rng.seed):  # dropout, in a model that has it
            start = self.model.adapt(self.copy(original), streams("lora", "method", self.seeds["unlearn"],
                                                                  method.name, target).seed)
            try:
                unlearned = method.unlearn(start, task)
            except NonFiniteStep as error:  # every rank stops at the same step (`text.train.step`)
                diverged = error
        cost = method.cost(measured, task)
        if diverged is not None:  # a failure, with the cost it had run up
            self.outcome.add(target, method.name, "unlearned", cost_scores(cost))
            raise Diverged(f"{method.name} diverged {diverged.where}; lower method.lr")
        return unlearned, cost

    def evaluation(self, target: str, splits: TextSplits, original: TunedModel,
                   retrained: TunedModel) -> TextEvaluation:
        options = self.config["evaluation"]
        evaluator = TextEvaluator(self.fabric, self.encoder, splits, options["batch_size"] or EVAL_BATCH,
                                  self.model.max_new_tokens, self.sampling(), self.gradnorm,
                                  options["reference_numerics"])
        return TextEvaluation(self.outcome, evaluator, target, self.positions(target, splits), original, retrained,
                              self.points, self.during)

    def sampling(self) -> Sampling | None:
        """Leak@k's sampled decoding (`evaluation.sampling`), from the evaluation seed; None where it is off."""
        return Sampling.of(self.config["evaluation"]["sampling"], self.seeds["eval"])

    def relearning(self, target: str, splits: TextSplits) -> TextRelearning | None:
        """Relearn time for `target` (text/relearn.py), or None where `evaluation.relearn` is off."""
        relearn, evaluation = self.config["evaluation"]["relearn"], self.config["evaluation"]
        if not relearn["enabled"]:
            return None
        return TextRelearning(self.fabric, self.items, splits.forget, RelearnSettings.of(relearn, self.recipe.lr),
                              self.recipe.weight_decay, self.seeds["eval"], target,
                              evaluation["batch_size"] or EVAL_BATCH, self.relearn_copy)

    def relearn_copy(self, model: nn.Module) -> nn.Module:
        """A plain, trainable copy of a model to relearn: its adapters (if any) merged, fresh ones added where LoRA
        is on (from the evaluation seed), as a method starts from M_o."""
        plain = bare_copy(model)
        plain = plain.merge_and_unload() if hasattr(plain, "merge_and_unload") else plain
        return self.model.adapt(plain, streams("lora", "relearn", self.seeds["eval"]).seed)

    def positions(self, target: str, splits: TextSplits) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per example split, each record's `index` and `label` for examples.parquet (`TextExamples`): a holdout
        record's index is its position in the whole holdout set, also where a tuning's job scores a part of it."""
        entity = {name: i for i, name in enumerate(self.data.entities())}
        forgotten = set(splits.entities)
        in_full = np.array([i for i, r in enumerate(self.data.full) if r["entity"] in forgotten], dtype=np.int64)
        labelled = {split: np.array([entity.get(r["entity"], -1) for r in records], dtype=np.int64)
                    for split, records in (("forget", splits.forget), ("retain", splits.retain_eval),
                                           ("holdout", splits.holdout))}
        return {"forget": (in_full, labelled["forget"]),
                "retain": (np.arange(len(splits.retain_eval)), labelled["retain"]),
                "holdout": (self.holdout_rows.get(target, np.arange(len(splits.holdout))), labelled["holdout"])}


class TextEvaluation(Evaluation):
    """One target's scores: M_r's and M_o's evaluated together, every M_u against M_r's (forget quality, privleak)."""

    def __init__(self, outcome: Outcome, evaluator: TextEvaluator, target: str, positions: dict,
                 original: TunedModel, retrained: TunedModel, points: PointMetrics, during: PointSettings) -> None:
        self.outcome, self.evaluator, self.target, self.positions = outcome, evaluator, target, positions
        self.point_metrics, self.point_settings = points, during
        self.points: Points | None = None  # the dynamics' samples and M_o's and M_r's outputs on them, at the first
        self.costs = {"original": cost_scores(original.cost), "retrained": cost_scores(retrained.cost)}
        with outcome.stage(f"target {target}: evaluation of M_r and M_o", "evaluation:reference"):
            self.out_r, self.out_o = evaluator.outputs(retrained.module), evaluator.outputs(original.module)

    def references(self) -> list[dict]:
        self.keep_examples("retrained", None, self.out_r)
        self.keep_examples("original", None, self.out_o)
        scores = {"retrained": self.evaluator.values(self.out_r, self.out_r),
                  "original": self.evaluator.values(self.out_o, self.out_r)}
        return [record for role, values in scores.items()
                for record in as_records(self.target, None, role, values | self.costs[role])]

    def unlearned(self, method: str, model: nn.Module, cost: Cost) -> Scored:
        """M_u's metrics; where its losses are not finite, its cost alone, with the reason."""
        with self.outcome.stage(f"target {self.target}: evaluation of {method}", f"evaluation:{method}"):
            out_u = self.evaluator.outputs(model)
        if not self.evaluator.finite(out_u):
            return Scored(as_records(self.target, method, "unlearned", cost_scores(cost)),
                          f"{method} diverged: its losses on the evaluated splits are not finite; its metrics are "
                          f"left out")
        self.keep_examples("unlearned", method, out_u)
        return Scored(as_records(self.target, method, "unlearned",
                                 self.evaluator.values(out_u, self.out_r) | cost_scores(cost)))

    def during(self, method: str, model: nn.Module | None) -> Scores:
        """A point of the method's dynamics on samples of the benchmark's examples (evaluate/during.py); M_o's from
        the outputs the evaluation holds."""
        if self.points is None:
            self.points = Points(self.evaluator, self.point_metrics, self.point_settings, self.target, self.out_o,
                                 self.out_r)
        return self.points.scores(model)

    def keep_examples(self, role: str, method: str | None, outputs: dict) -> None:
        """A model's rows of examples.parquet, unless `evaluation.examples` is off."""
        if self.outcome.examples is not None:
            self.outcome.examples.add_model(self.target, role, method, outputs, self.positions, self.out_r)
