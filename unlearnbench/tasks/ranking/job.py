"""One job of the federated ranking task: the same contract as an image job, a different body.

    data      <- LETOR query sets (MQ2007 fold or synthetic)
    trained   <- T rounds of federated PDGD with the malicious clients poisoning (or from the cache)
    records   += offline NDCG@10 of the global model after every training round (role original, round 0..T)
    for each method a:
        rounds <- a(trained), U unlearning rounds       timed; memory and utilisation sampled
        records += NDCG@10 after every unlearning round (round T+1..T+U), online NDCG, ‖w_T − w‖
                   (a method whose weights turn non-finite: null from that round on, listed in `failures`)
"""

from __future__ import annotations

import time

import numpy as np
import torch
from lightning_fabric import Fabric

from unlearnbench import __version__
from unlearnbench.core.components import build
from unlearnbench.core.errors import UserError
from unlearnbench.core.job import Diverged, JobPlan, Outcome, cost_scores
from unlearnbench.runtime import progress
from unlearnbench.runtime.cache import ModelCache, cache_key
from unlearnbench.runtime.monitor import CostMonitor
from unlearnbench.tasks.image.metrics.scoring import finite
from unlearnbench.tasks.ranking.data import LetorData
from unlearnbench.tasks.ranking.federation import ModelPoisoning, Rounds, Simulator, TrainedFederation, train_federation
from unlearnbench.tasks.ranking.methods.base import FederatedTask
from unlearnbench.tasks.ranking.pdgd import Ndcg, click_model

ONLINE_DISCOUNT = 0.9995
TRAINING_REVISION = 2  # raised whenever training's numbers change (2: ρ from stable denominators), so no stale cache


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


def trained_federation(cache: ModelCache, data: LetorData, scenario: ModelPoisoning, model: dict, seed: int,
                       outcome: Outcome) -> TrainedFederation:
    """The state after training (final and every stored model, partitions, pointers), from the cache if there;
    keyed by this machine's numerics too (NumPy's kernels follow the CPU)."""
    training = {k: v for k, v in vars(scenario).items() if k != "unlearning_rounds"}
    key = cache_key({"artefact": "federated_ltr", "dataset": data.name, "data": data.fingerprint(), "model": model,
                     "scenario": training, "seed": seed, "version": __version__, "numerics": outcome.numerics,
                     "training": TRAINING_REVISION})

    def train() -> tuple[dict[str, torch.Tensor], dict]:
        start = time.perf_counter()
        state = train_federation(data, scenario, model["lr"], seed)
        meta = {"train_s": time.perf_counter() - start, "seed": seed}
        return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in state.as_arrays().items()}, meta

    with outcome.stage(f"original federation (training seed {seed})", "original") as training:
        entry = cache.get_or_build(key, train)
        training.note("from the cache" if entry.hit else f"trained, {scenario.rounds} rounds")
    outcome.cache["original"] = {"key": key, "hit": entry.hit, "train_s": entry.meta.get("train_s")}
    trained = TrainedFederation(**{name: tensor.numpy() for name, tensor in entry.state.items()})
    scored = finite_rounds(trained.globals)
    if scored < len(trained.globals):
        raise UserError(f"training diverged: the global model's weights are not finite from round {scored} on, so "
                        f"no method can be compared; lower model.lr")
    return trained


def curve(outcome: Outcome, target: str, method: str | None, role: str, values: np.ndarray, first: int) -> None:
    """Offline NDCG@10 on the test queries after each round, numbered from `first`."""
    outcome.records += [{"target": target, "method": method, "role": role, "metric": "ndcg@10", "split": None,
                         "round": first + i, "value": finite(float(value))} for i, value in enumerate(values)]


def execute(fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's work (one process: NumPy, no accelerator); errors are caught and reported."""
    outcome = Outcome.begin(fabric, plan)
    config, seeds = plan.config, plan.config["seeds"]
    progress.configure(config["runtime"]["progress"], rank_zero=True)
    with outcome.capture():
        with outcome.stage(f"loading {config['dataset']['name']}", "load_data"):
            data = build(config["dataset"], "dataset").load()
        scenario = build(config["scenario"], "scenario")
        model = {k: v for k, v in config["model"].items() if k != "_target_"}
        if not isinstance(scenario, ModelPoisoning) or "lr" not in model:
            raise UserError(f"the ranking task runs model=linear_ranker in scenario=model_poisoning (not "
                            f"{model.get('name')} in {scenario.name}): use experiment=foltr")
        methods = [build(m, "method") for m in plan.methods]
        trained = trained_federation(ModelCache(config["paths"]["cache_dir"]), data, scenario, model,
                                     seeds["train"], outcome)
        ndcg = Ndcg(data.test.features, data.test.labels)
        target = scenario.target
        with outcome.stage("evaluation of the original federation", "evaluation:original"):
            curve(outcome, target, None, "original", ndcg.curve(trained.globals), 0)
        outcome.add(target, None, "original", {("online_ndcg", None): discounted(trained.online),
                                               ("time_s", None): outcome.cache["original"]["train_s"]})
        task = FederatedTask(data, scenario, Simulator(data.train, click_model(scenario.click_model), model["lr"]),
                             seeds["train"], seeds["unlearn"])
        monitor = CostMonitor(torch.device("cpu"))
        for method in methods:
            with outcome.isolated(target, method.name):
                with outcome.stage(method.name, f"method:{method.name}"), monitor.measure() as cost:
                    rounds = method.unlearn(trained, task)
                with outcome.stage(f"evaluation of {method.name}", f"evaluation:{method.name}"):
                    score_method(outcome, target, method.name, trained, rounds, ndcg,
                                 cost_scores(method.cost(cost, task)))
    return outcome


def score_method(outcome: Outcome, target: str, method: str, trained: TrainedFederation, rounds: Rounds,
                 ndcg: Ndcg, costs: dict) -> None:
    """A method's records: NDCG@10 after each unlearning round, online NDCG, ‖w_T − w‖ and its cost. A method whose
    weights turned non-finite is `Diverged`: NDCG@10 null from that round on, online NDCG and distance null (they
    would be numbers of a broken model), its cost kept; the job goes on with the next method."""
    models = np.array(rounds.globals).reshape(len(rounds.globals), len(trained.final))
    scored = finite_rounds(models)
    values = np.concatenate([ndcg.curve(models[:scored]), np.full(len(models) - scored, np.nan)])
    curve(outcome, target, method, "unlearned", values, len(trained.globals))
    final = models[-1] if len(models) else trained.final
    scores = {("online_ndcg", None): discounted(rounds.online),
              ("weight_distance", None): float(np.linalg.norm(trained.final - final))}
    if scored < len(models):
        scores = dict.fromkeys(scores)
    outcome.add(target, method, "unlearned", scores | costs)
    if scored < len(models):
        raise Diverged(f"{method} diverged: its weights are not finite from round {len(trained.globals) + scored} on "
                       f"(unlearning round {scored + 1}); its metrics are null")
