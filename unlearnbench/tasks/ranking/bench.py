"""The federated ranking task's bench: the steps of the job loop (`core.job.execute`) for federated online
learning to rank, one target and no retrained model.

    data      <- LETOR query sets (MQ2007 fold or synthetic)
    trained   <- T rounds of federated PDGD with the malicious clients poisoning (or from the cache)
    records   += offline NDCG@10 of the global model after every training round (role original, round 0..T)
    for each method a:
        rounds <- a(trained), U unlearning rounds       timed; memory and utilisation sampled
        records += NDCG@10 after every unlearning round (round T+1..T+U), online NDCG, ‖w_T − w‖
                   (a method whose weights turn non-finite: null from that round on, listed in `failures`)
        (`evaluation.during.every=N`: records with a `step` += NDCG@10 on sampled test queries and ‖w_T − w‖ at
         step 0 (M_o), every N rounds and the end; round i is step i)
"""

from __future__ import annotations

import time

import numpy as np
import torch
from lightning_fabric import Fabric

from unlearnbench import __version__
from unlearnbench.core.bench import Bench, Evaluation, Scored
from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Metric
from unlearnbench.core.components import build
from unlearnbench.core.dynamics import chosen_metrics
from unlearnbench.core.outcome import Outcome, as_records, cost_scores
from unlearnbench.core.plan import JobPlan
from unlearnbench.core.result import finite
from unlearnbench.runtime.cache import ModelCache, cache_key, cached_or_trained
from unlearnbench.runtime.during import Schedule
from unlearnbench.runtime.errors import UserError, invalid
from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.ranking.data import LetorData, Queries
from unlearnbench.tasks.ranking.federation import ModelPoisoning, Rounds, Simulator, TrainedFederation, train_federation
from unlearnbench.tasks.ranking.methods.base import FederatedMethod, FederatedTask
from unlearnbench.tasks.ranking.pdgd import Ndcg, click_model, ideal_dcg

ONLINE_DISCOUNT = 0.9995
TRAINING_REVISION = 2  # raised whenever training's numbers change (2: ρ from stable denominators), so no stale cache


ONLINE_NDCG = Metric("online_ndcg", "online NDCG", RETRAINED, headline=(NO_SPLIT,))


def discounted(online: np.ndarray) -> float | None:
    """The online metric, as the reference's `online_ndcg_performance`: Σ_i 0.9995^i · (the online NDCG@10 of the
    i-th round that showed lists, i from 0), so a round without lists (FedEraser's first, replayed from storage)
    neither counts nor shifts the discount; None for a method that shows no list (FedRemove)."""
    online = np.asarray(online, dtype=float)
    shown = online[np.isfinite(online)]
    if not len(shown):
        return None
    return float(ONLINE_DISCOUNT ** np.arange(len(shown)) @ shown)


def finite_rounds(models: np.ndarray) -> int:
    """How many leading rounds' models (R × F) have finite weights: a NaN or an infinity never leaves a linear
    ranker again, and its lists are arbitrary (NaN scores still sort), so nothing from that round on is scored."""
    finite = np.isfinite(models).all(1)
    return len(models) if finite.all() else int(np.argmin(finite))


class RankingBench(Bench):
    """One federated ranking job: LETOR data, one federation poisoned by its malicious clients (the scenario's one
    target), no forget set drawn and no retrained model (`fed_retrain`, a method, is the gold standard). Every
    method starts from the trained federation and runs the unlearning rounds (one process: NumPy, no accelerator)."""

    def __init__(self, fabric: Fabric, plan: JobPlan, outcome: Outcome) -> None:
        config = plan.config
        self.outcome, self.seeds = outcome, config["seeds"]
        self.during = config["evaluation"]["during"]  # checked before any work: a bad option costs no training
        self.point_metrics = point_metrics(self.during["metrics"])
        refuse_epochs(self.during["every"])
        with outcome.stage(f"loading {config['dataset']['name']}", "load_data"):
            self.data: LetorData = build(config["dataset"], "dataset").load()
        scenario = build(config["scenario"], "scenario")
        self.model = {k: v for k, v in config["model"].items() if k != "_target_"}
        if not isinstance(scenario, ModelPoisoning) or "lr" not in self.model:
            raise UserError(f"the ranking task runs model=linear_ranker in scenario=model_poisoning (not "
                            f"{self.model.get('name')} in {scenario.name}): use experiment=foltr")
        self.scenario: ModelPoisoning = scenario
        self.methods = [build(m, "method") for m in plan.methods]
        self.targets = [scenario.target]
        self.cache = ModelCache(config["paths"]["cache_dir"])
        self.ndcg = Ndcg(self.data.test.features, self.data.test.labels)
        simulator = Simulator(self.data.train, click_model(scenario.click_model), self.model["lr"])
        self.task = FederatedTask(self.data, scenario, simulator, self.seeds["train"], self.seeds["unlearn"])
        self.monitor = CostMonitor(torch.device("cpu"))
        self.original_ndcg: np.ndarray | None = None  # after every training round (`original`)

    def original(self) -> TrainedFederation:
        """The state after training (final and every stored model, partitions, pointers), from the cache if there,
        and its NDCG@10 after every training round; keyed by this machine's numerics too (NumPy's kernels follow the
        CPU)."""
        data, scenario, seed = self.data, self.scenario, self.seeds["train"]
        training = {k: v for k, v in vars(scenario).items() if k != "unlearning_rounds"}
        key = cache_key({"artefact": "federated_ltr", "dataset": data.name, "data": data.fingerprint(),
                         "model": self.model, "scenario": training, "seed": seed, "version": __version__,
                         "numerics": self.outcome.numerics, "training": TRAINING_REVISION})

        def train() -> tuple[dict[str, torch.Tensor], dict]:
            start = time.perf_counter()
            state = train_federation(data, scenario, self.model["lr"], seed)
            meta = {"train_s": time.perf_counter() - start, "seed": seed}
            return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in state.as_arrays().items()}, meta

        provided = cached_or_trained(self.cache, key, train,
                                     self.outcome.stage(f"original federation (training seed {seed})", "original"),
                                     lambda meta: f"trained, {scenario.rounds} rounds")
        self.outcome.cache["original"] = provided.record
        trained = TrainedFederation(**{name: tensor.numpy() for name, tensor in provided.entry.state.items()})
        scored = finite_rounds(trained.globals)
        if scored < len(trained.globals):
            raise UserError(f"training diverged: the global model's weights are not finite from round {scored} on, "
                            f"so no method can be compared; lower model.lr")
        with self.outcome.stage("evaluation of the original federation", "evaluation:original"):
            self.original_ndcg = self.ndcg.curve(trained.globals)
        return trained

    def split(self, target: str) -> None:
        """None: the forget set is the malicious clients' contributions, fixed by the scenario."""

    def retrained(self, target: str, splits: None) -> None:
        """None: no retrained model (the `fed_retrain` method retrains without the malicious clients)."""

    def evaluation(self, target: str, splits: None, original: TrainedFederation,
                   retrained: None) -> RankingEvaluation:
        return RankingEvaluation(self, target, original)

    def unlearn(self, method: FederatedMethod, target: str, splits: None, original: TrainedFederation,
                retrained: None) -> tuple[Rounds, Cost]:
        """The method's unlearning rounds from the trained federation, timed with memory and utilisation sampled;
        its clients' streams from the unlearning seed."""
        with self.outcome.stage(method.name, f"method:{method.name}"), self.monitor.measure() as cost:
            rounds = method.unlearn(original, self.task)
        return rounds, method.cost(cost, self.task)


# `RankingEvaluation`: how far the unlearned global model's weights end from the retrained federation's
WEIGHT_DISTANCE = Metric("weight_distance", "‖w_T − w‖", headline=(NO_SPLIT,))


class RankingEvaluation(Evaluation):
    """NDCG@10 on the test queries after every round: the original federation's (rounds 0..T), then each method's
    after its unlearning rounds (T+1..T+U), with online NDCG and ‖w_T − w‖."""

    def __init__(self, bench: RankingBench, target: str, trained: TrainedFederation) -> None:
        self.bench, self.target, self.trained = bench, target, trained
        self.sampled: Ndcg | None = None  # NDCG@10 on the dynamics' test queries, drawn at the first point

    def references(self) -> list[dict]:
        """The original federation's curve, online NDCG and training time (from the cache record)."""
        return (curve(self.target, None, "original", self.bench.original_ndcg, 0)
                + as_records(self.target, None, "original",
                             {("online_ndcg", None): discounted(self.trained.online),
                              ("time_s", None): self.bench.outcome.cache["original"]["train_s"]}))

    def unlearned(self, method: str, rounds: Rounds, cost: Cost) -> Scored:
        """A method's records: NDCG@10 after each unlearning round, online NDCG, ‖w_T − w‖ and its cost. A method
        whose weights turned non-finite has diverged: NDCG@10 null from that round on, online NDCG and distance null
        (they would be numbers of a broken model), its cost kept."""
        trained = self.trained
        with self.bench.outcome.stage(f"evaluation of {method}", f"evaluation:{method}"):
            models = np.array(rounds.globals).reshape(len(rounds.globals), len(trained.final))
            scored = finite_rounds(models)
            values = np.concatenate([self.bench.ndcg.curve(models[:scored]), np.full(len(models) - scored, np.nan)])
            final = models[-1] if len(models) else trained.final
            scores = {("online_ndcg", None): discounted(rounds.online),
                      ("weight_distance", None): float(np.linalg.norm(trained.final - final))}
        records = curve(self.target, method, "unlearned", values, len(trained.globals))
        if scored == len(models):
            return Scored(records + as_records(self.target, method, "unlearned", scores | cost_scores(cost)))
        nulls = as_records(self.target, method, "unlearned", dict.fromkeys(scores) | cost_scores(cost))
        return Scored(records + nulls, f"{method} diverged: its weights are not finite from round "
                                       f"{len(trained.globals) + scored} on (unlearning round {scored + 1}); its "
                                       f"metrics are null")

    def during(self, method: str, model: np.ndarray | Rounds | None) -> dict[tuple[str, None], float | None]:
        """A point of the method's dynamics (runtime/during.py) between two of its rounds: NDCG@10 on the sampled
        test queries and ‖w_T − w‖ of the global weights (None: M_o, the trained federation's final weights; the
        method's `Rounds`: its last round's). Non-finite weights score null, as the final evaluation scores them.
        Nothing random is drawn but the query sample, from a stream of its own."""
        if self.sampled is None:
            bench = self.bench
            self.sampled = sampled_ndcg(bench.data.test, bench.ndcg, bench.seeds["eval"], self.target,
                                        bench.during["max_examples"])
        weights = point_weights(model, self.trained.final)
        scores = {NDCG_AT_10.name: lambda: self.sampled(weights),
                  WEIGHT_DISTANCE.name: lambda: float(np.linalg.norm(self.trained.final - weights))}
        healthy = bool(np.isfinite(weights).all())
        return {(metric, None): finite(scores[metric]()) if healthy else None for metric in self.bench.point_metrics}


NDCG_AT_10 = Metric("ndcg@10", "NDCG@10", RETRAINED, headline=(NO_SPLIT,), leaderboard=(NO_SPLIT,), figure=(NO_SPLIT,))


def curve(target: str, method: str | None, role: str, values: np.ndarray, first: int) -> list[dict]:
    """Offline NDCG@10 on the test queries after each round, numbered from `first`."""
    return [{"target": target, "method": method, "role": role, "metric": "ndcg@10", "split": None,
             "round": first + i, "value": finite(float(value))} for i, value in enumerate(values)]


# what a point of the dynamics computes; online NDCG, a discounted sum over a whole run's rounds, is the end's alone
POINT_METRICS = (NDCG_AT_10, WEIGHT_DISTANCE)


def point_metrics(asked: list[str] | None) -> list[str]:
    """The metrics each point computes: those `evaluation.during.metrics` names, or (null) the leaderboard metrics
    among those a point can compute."""
    return chosen_metrics(asked, [metric.name for metric in POINT_METRICS],
                          [metric.name for metric in POINT_METRICS if metric.leaderboard],
                          "online NDCG sums a whole run's rounds: it is scored at the end alone")


def refuse_epochs(every) -> None:
    """The ranking methods count rounds (one a step) and no epochs: `N epochs` would score M_o and the end alone."""
    schedule = Schedule.parse(every)
    if schedule is not None and schedule.unit == "epoch":
        raise invalid("every", "evaluation.during", 'null, or N >= 1 or "N steps" (every N unlearning rounds: the '
                      "ranking methods count rounds, no epochs)", every)


def sampled_ndcg(queries: Queries, whole: Ndcg, seed_eval: int, target: str, size: int) -> Ndcg:
    """NDCG@10 on at most `size` of the queries it scores (those with a relevant document), the same at every point
    and for every method: drawn with the evaluation seed from a stream of its own (no method's draws move); `whole`,
    the final evaluation's scorer, when all of them fit, so that a point equals that round's record."""
    scored = np.flatnonzero(ideal_dcg(queries.labels) > 0)
    if len(scored) <= size:
        return whole
    keep = np.sort(streams("during", seed_eval, target).numpy.choice(scored, size, replace=False))
    return Ndcg(queries.features[keep], queries.labels[keep])


def point_weights(model: np.ndarray | Rounds | None, final: np.ndarray) -> np.ndarray:
    """The global weights a point scores: `final` for M_o (None) or a method that ran no round, a `Rounds`' last."""
    if model is None:
        return final
    if isinstance(model, Rounds):
        return np.asarray(model.globals[-1], dtype=float).reshape(-1) if model.globals else final
    return model
