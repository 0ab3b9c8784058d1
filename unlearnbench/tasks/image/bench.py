"""The image-classification task's bench: the steps of the job loop (`core.job.execute`) for image classifiers.

M_o is trained on the whole training pool and evaluated once for every target; per target, M_r is trained on D_r and
evaluated, and every M_u is scored against M_o's and M_r's outputs on every split (metrics/scoring.py). Per-example
outputs go to examples.parquet (metrics/examples.py), relearn time is metrics/relearn.py's.
"""

from __future__ import annotations

import torch
from lightning_fabric import Fabric
from omegaconf import OmegaConf
from torch import nn

from unlearnbench.core.bench import Bench, Evaluation, Scored
from unlearnbench.core.catalogue import Catalogue
from unlearnbench.core.components import build
from unlearnbench.core.outcome import Outcome, as_records, cost_scores
from unlearnbench.core.plan import JobPlan
from unlearnbench.core.relearn import RelearnSettings
from unlearnbench.core.validation import scored_part
from unlearnbench.runtime import progress
from unlearnbench.runtime.cache import ModelCache
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.image.catalogue import CATALOGUE
from unlearnbench.tasks.image.data.base import ImageData, full_pool
from unlearnbench.tasks.image.data.scenarios import Scenario, Splits
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.evaluate import evaluation_batch_size
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask
from unlearnbench.tasks.image.metrics.added import added_catalogue
from unlearnbench.tasks.image.metrics.during import Points, point_metrics
from unlearnbench.tasks.image.metrics.examples import ImageExamples
from unlearnbench.tasks.image.metrics.relearn import ImageRelearning
from unlearnbench.tasks.image.metrics.scoring import Evaluator, Outputs, Scorer, Scores
from unlearnbench.tasks.image.models.store import ModelStore, Trained, training_channels_last
from unlearnbench.tasks.image.options import ImageTrain


def scored_test_pool(data: ImageData, config: dict, outcome: Outcome) -> ImageData:
    """The data with the test pool this job scores: a tuning's trials one part of it, its held-out judgement the
    other (core/validation.py), so that D'_f, D'_r and the membership attacks' non-members come from the job's part;
    the whole pool outside tuning. The training pool, and with it M_o, M_r and their cache keys, is the loaded one."""
    part = scored_part(config, "test", len(data.test_labels))
    if part is None:
        return data
    outcome.dataset["scored"] = {"test": part.describe()}
    return data.test_part(torch.from_numpy(part.rows).to(data.device))


class ImageBench(Bench):
    """What the stages of one image job share: the data on the device, the model store, the evaluator, the
    monitor."""

    def __init__(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        cfg = OmegaConf.create(plan.config)
        self.fabric, self.cfg, self.seeds, self.outcome = fabric, cfg, cfg.seeds, outcome
        with self.stage(f"loading {plan.config['dataset']['name']}", "load_data") as loading:
            self.data = build(plan.config["dataset"], "dataset").load().to(fabric.device)
            loading.note(f"{len(self.data.train_labels):,} training and {len(self.data.test_labels):,} test images")
        outcome.dataset = self.data.describe()
        self.data = scored_test_pool(self.data, plan.config, outcome)
        self.scenario = build(plan.config["scenario"], "scenario")
        if not isinstance(self.scenario, Scenario):
            raise UserError(f"scenario {self.scenario.name} is not an image-classification scenario; valid: "
                            f"full_class, sub_class, random_sample")
        self.targets = self.scenario.targets(self.data)
        self.methods = [build(m, "method") for m in plan.methods]
        self.added = [build(m, f"metric {slot}") for slot, m in plan.config["evaluation"]["metrics"].items()]
        outcome.catalogue = (Catalogue.from_dict(outcome.catalogue) + added_catalogue(self.added)).as_dict()
        during = plan.config["evaluation"]["during"]  # the dynamics' metrics, checked before any work
        self.point_metrics = point_metrics(during["metrics"], CATALOGUE, [m.declaration.name for m in self.added])
        self.normalizer = Normalizer(self.data.mean, self.data.std)
        self.monitor = CostMonitor(fabric.device)
        runtime = cfg.runtime
        channels_last = training_channels_last(fabric.device.type, runtime.channels_last)
        identity = {"dataset": self.data.name, "data": outcome.dataset["fingerprint"], "model": plan.config["model"],
                    "normalisation": [list(self.data.mean), list(self.data.std)],
                    "recipe": ImageTrain.identity(plan.config["train"]), "channels_last": channels_last,
                    "numerics": outcome.numerics}
        self.store = ModelStore(fabric, self.new_model, ModelCache(cfg.paths.cache_dir), self.normalizer,
                                self.monitor, cfg.train, identity, channels_last)
        batch_size = cfg.evaluation.batch_size or evaluation_batch_size(fabric.device.type)
        self.evaluator = Evaluator(fabric, self.data, self.store, self.normalizer, batch_size)
        self.original_outputs: Outputs | None = None  # M_o's, the same for every target (`original`)
        if cfg.evaluation.examples:
            outcome.examples = ImageExamples(per_split=cfg.evaluation.examples_per_split,
                                             fingerprint=outcome.dataset["fingerprint"])

    def stage(self, title: str, timing: str):
        return self.outcome.stage(title, timing)

    def new_model(self) -> nn.Module:
        data = self.data
        return build(self.cfg.model, "model", num_classes=data.num_classes, in_channels=data.channels,
                     image_size=data.image_size)

    def original(self) -> Trained:
        """M_o: trained on the whole training pool with the training seed, and evaluated (once for every target)."""
        title = f"original model (training seed {self.seeds.train})"
        original = self.store.trained(full_pool(self.data, "train"), "original", self.seeds.train, title,
                                      self.stage(title, "original"))
        self.outcome.cache["original"] = original.cache
        self.outcome.keep_curve("original", self.seeds.train, original.curve, cached=original.cache["hit"])
        self.original_outputs = self.reference_outputs(original.module, "original")
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
        retrained = self.store.trained(splits.retain_train, "retrained", self.seeds.unlearn, title,
                                       self.stage(title, "retrained"))
        self.outcome.cache["retrained"].append({"target": target, **retrained.cache})
        self.outcome.keep_curve("retrained", self.seeds.unlearn, retrained.curve, target,
                                cached=retrained.cache["hit"])
        return retrained

    def evaluation(self, target: str, splits: Splits, original: Trained, retrained: Trained) -> ImageEvaluation:
        return ImageEvaluation(self, target, splits, original, retrained)

    def scorer(self, target: str, splits: Splits) -> Scorer:
        evaluation = self.cfg.evaluation
        return Scorer(splits, self.seeds.eval, target, evaluation.mia_max_members, evaluation.mia_loss_folds,
                      self.added)

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

    def unlearn(self, method: ImageMethod, target: str, splits: Splits, original: Trained,
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
        return unlearned, method.cost(measured, task)


class ImageEvaluation(Evaluation):
    """One target's scores: M_r's outputs taken here, M_o's once for the job (`ImageBench.original`); M_o and every
    M_u compared with M_r on every split."""

    def __init__(self, bench: ImageBench, target: str, splits: Splits, original: Trained, retrained: Trained) -> None:
        self.bench, self.target, self.splits = bench, target, splits
        self.costs = {"original": cost_scores(original.cost), "retrained": cost_scores(retrained.cost)}
        self.out_o, self.out_r = bench.original_outputs, bench.reference_outputs(retrained.module, "retrained", target)
        self.scorer = scorer = bench.scorer(target, splits)
        self.scores_o, self.scores_r = scorer.model_scores(self.out_o), scorer.model_scores(self.out_r)
        self.comparison_o = scorer.comparison_scores(self.out_o, self.scores_o, self.out_r, self.scores_r)
        self.points: Points | None = None  # the dynamics' samples and M_r's scores on them, at the first point

    def references(self) -> list[dict]:
        self.bench.keep_examples(self.target, self.splits, "original", None, self.out_o)
        self.bench.keep_examples(self.target, self.splits, "retrained", None, self.out_r)
        return (as_records(self.target, None, "original", self.scores_o | self.comparison_o | self.costs["original"])
                + as_records(self.target, None, "retrained", self.scores_r | self.costs["retrained"]))

    def unlearned(self, method: str, model: nn.Module, cost: Cost) -> Scored:
        """M_u's scores and its comparison with M_r; null, with the reason, where its weights or outputs are not
        finite."""
        with self.bench.stage(f"target {self.target}: evaluation of {method}", f"evaluation:{method}"):
            out_u = self.bench.evaluator.outputs(model)
            scores_u = self.scorer.model_scores(out_u)
            comparison_u = self.scorer.comparison_scores(out_u, scores_u, self.out_r, self.scores_r)
        diverged = out_u.non_finite()
        if diverged:  # its scores are meaningless
            scores_u, comparison_u = dict.fromkeys(scores_u), dict.fromkeys(comparison_u)
        else:
            self.bench.keep_examples(self.target, self.splits, "unlearned", method, out_u)
        records = as_records(self.target, method, "unlearned", scores_u | comparison_u | cost_scores(cost))
        return Scored(records, f"{method} diverged: {diverged}" if diverged else None)

    def during(self, method: str, model: nn.Module | None) -> Scores:
        """A point of the method's dynamics on samples of the splits (metrics/during.py); M_o's from its outputs."""
        if self.points is None:
            bench = self.bench
            self.points = Points(bench.evaluator, self.splits, bench.seeds.eval, self.target,
                                 bench.cfg.evaluation.during.max_examples, bench.point_metrics, self.out_r, bench.added)
        return self.points.scores(model, self.out_o if model is None else None)
