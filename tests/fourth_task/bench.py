"""The tally task's components and bench: values drawn from the dataset's seed in groups, a model that is their
mean, a scenario that forgets one group."""

from __future__ import annotations

import numpy as np
import torch

from unlearnbench.core.bench import Bench, Evaluation, Scored
from unlearnbench.core.components import build
from unlearnbench.core.outcome import as_records, cost_scores
from unlearnbench.runtime.monitor import CostMonitor


class Values:
    def __init__(self, name: str, count: int, groups: int, seed: int) -> None:
        self.name, self.count, self.groups, self.seed = name, count, groups, seed

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        groups = np.arange(self.count) % self.groups
        return rng.normal(groups, 1.0), groups


class ForgetGroup:
    def __init__(self, name: str, targets: list[str]) -> None:
        self.name, self.targets = name, targets


class TallyBench(Bench):
    def __init__(self, fabric, plan, outcome) -> None:
        config = plan.config
        self.outcome, self.decimals = outcome, config["evaluation"]["decimals"]
        with outcome.stage(f"loading {config['dataset']['name']}", "load_data"):
            self.values, self.groups = build(config["dataset"], "dataset").load()
        self.targets = build(config["scenario"], "scenario").targets
        self.methods = [build(m, "method") for m in plan.methods]
        self.monitor = CostMonitor(torch.device("cpu"))

    def original(self) -> float:
        return float(self.values.mean())

    def split(self, target: str) -> np.ndarray:
        return self.groups == int(target)

    def retrained(self, target: str, forget: np.ndarray) -> float:
        return float(self.values[~forget].mean())

    def evaluation(self, target: str, forget: np.ndarray, original: float, retrained: float) -> TallyScoring:
        return TallyScoring(self, target, original, retrained)

    def unlearn(self, method, target: str, forget: np.ndarray, original: float, retrained: float):
        with self.monitor.measure() as cost:
            unlearned = float(method.unlearn(original, (self.values, forget)))
        return unlearned, cost


class TallyScoring(Evaluation):
    def __init__(self, bench: TallyBench, target: str, original: float, retrained: float) -> None:
        self.bench, self.target, self.original, self.retrained = bench, target, original, retrained

    def rounded(self, value: float) -> float:
        return round(value, self.bench.decimals)

    def references(self) -> list[dict]:
        return [*as_records(self.target, None, "original", {("mean", None): self.rounded(self.original)}),
                *as_records(self.target, None, "retrained", {("mean", None): self.rounded(self.retrained)})]

    def unlearned(self, method: str, model: float, cost) -> Scored:
        return Scored(as_records(self.target, method, "unlearned", self.scores(model) | cost_scores(cost)))

    def scores(self, model: float) -> dict:
        return {("mean", None): self.rounded(model), ("gap", None): self.rounded(abs(model - self.retrained))}

    def during(self, method: str, model: float | None) -> dict:
        return self.scores(self.original if model is None else model)
