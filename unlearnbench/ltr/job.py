"""One job of the federated ranking task: the same contract as an image job, a different body.

    data      <- LETOR query sets (MQ2007 fold or synthetic)
    trained   <- T rounds of federated PDGD with the malicious clients poisoning (or from the cache)
    records   += offline NDCG@10 of the global model after every training round (role original, round 0..T)
    for each method a:
        rounds <- a(trained), U unlearning rounds       timed; memory and utilisation sampled
        records += NDCG@10 after every unlearning round (round T+1..T+U), online NDCG, ‖w_T − w‖
"""

from __future__ import annotations

import time

import numpy as np
import torch
from lightning_fabric import Fabric

from unlearnbench import __version__
from unlearnbench.components import build
from unlearnbench.errors import UserError
from unlearnbench.job import JobPlan, Outcome, cost_scores
from unlearnbench.ltr.data import LetorData
from unlearnbench.ltr.federation import ModelPoisoning, Simulator, TrainedFederation, train_federation
from unlearnbench.ltr.pdgd import Ndcg, click_model
from unlearnbench.ltr.unlearning import FederatedTask
from unlearnbench.metrics.scoring import finite
from unlearnbench.runtime.cache import ModelCache, cache_key
from unlearnbench.runtime.monitor import CostMonitor

ONLINE_DISCOUNT = 0.9995


def discounted(online: np.ndarray) -> float | None:
    """The online metric: Σ_t 0.9995^t · (mean NDCG@10 of the lists shown in round t), over rounds with a value;
    None for a method that shows no list (FedRemove)."""
    online = np.asarray(online, dtype=float)
    if not np.isfinite(online).any():
        return None
    return float(np.nansum(ONLINE_DISCOUNT ** np.arange(len(online)) * online))


def trained_federation(cache: ModelCache, data: LetorData, scenario: ModelPoisoning, model: dict, seed: int,
                       outcome: Outcome) -> TrainedFederation:
    """The state after training (final and every stored model, partitions, pointers), from the cache if there;
    keyed by this machine's numerics too (NumPy's kernels follow the CPU)."""
    training = {k: v for k, v in vars(scenario).items() if k != "unlearning_rounds"}
    key = cache_key({"artefact": "federated_ltr", "dataset": data.name, "data": data.fingerprint(), "model": model,
                     "scenario": training, "seed": seed, "version": __version__, "numerics": outcome.numerics})

    def train() -> tuple[dict[str, torch.Tensor], dict]:
        start = time.perf_counter()
        state = train_federation(data, scenario, model["lr"], seed)
        meta = {"train_s": time.perf_counter() - start, "seed": seed}
        return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in state.as_arrays().items()}, meta

    with outcome.timed("original"):
        entry = cache.get_or_build(key, train)
    outcome.cache["original"] = {"key": key, "hit": entry.hit, "train_s": entry.meta.get("train_s")}
    return TrainedFederation(**{name: tensor.numpy() for name, tensor in entry.state.items()})


def curve(outcome: Outcome, target: str, method: str | None, role: str, values: np.ndarray, first: int) -> None:
    """Offline NDCG@10 on the test queries after each round, numbered from `first`."""
    outcome.records += [{"target": target, "method": method, "role": role, "metric": "ndcg@10", "split": None,
                         "round": first + i, "value": finite(float(value))} for i, value in enumerate(values)]


def execute(fabric: Fabric, plan: JobPlan) -> Outcome:
    """The job's work (one process: NumPy, no accelerator); errors are caught and reported."""
    outcome = Outcome.begin(fabric, plan)
    config, seeds = plan.config, plan.config["seeds"]
    with outcome.capture():
        with outcome.timed("load_data"):
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
        with outcome.timed("evaluation:original"):
            curve(outcome, target, None, "original", ndcg.curve(trained.globals), 0)
        outcome.add(target, None, "original", {("online_ndcg", None): discounted(trained.online),
                                               ("time_s", None): outcome.cache["original"]["train_s"]})
        task = FederatedTask(data, scenario, Simulator(data.train, click_model(scenario.click_model), model["lr"]),
                             seeds["train"], seeds["unlearn"])
        monitor = CostMonitor(torch.device("cpu"))
        for method in methods:
            with outcome.isolated(target, method.name):
                with outcome.timed(f"method:{method.name}"), monitor.measure() as cost:
                    rounds = method.unlearn(trained, task)
                with outcome.timed(f"evaluation:{method.name}"):
                    curve(outcome, target, method.name, "unlearned", ndcg.curve(np.array(rounds.globals)),
                          len(trained.globals))
                final = rounds.globals[-1] if rounds.globals else trained.final
                outcome.add(target, method.name, "unlearned",
                            {("online_ndcg", None): discounted(rounds.online),
                             ("weight_distance", None): float(np.linalg.norm(trained.final - final)),
                             **cost_scores(method.cost(cost, task))})
    return outcome
