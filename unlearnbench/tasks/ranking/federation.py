"""Federated online learning to rank: clients, rounds, model poisoning, FedAvg (docs/ranking.md).

Each round every participating client takes its next queries, shows a Plackett–Luce list for each, simulates the
clicks of a cascade user, computes the PDGD gradient and steps its local copy of the ranker; the server then
averages the local models. The clients of a round step together (one row each), so a round costs a handful of
vectorised steps instead of a Python loop over interactions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from unlearnbench.runtime import during, interrupt
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.ranking import pdgd
from unlearnbench.tasks.ranking.data import LetorData, Queries
from unlearnbench.tasks.ranking.pdgd import DEPTH, ClickModel, click_model


@dataclass(frozen=True)
class Behaviour:
    """How a client turns its PDGD gradient g into its step, per query: g ← sign · γ · g + noise_sign · μ, with
    γ ~ U(gamma) and μ ~ N(mean(g), std(g)) element-wise. Honest clients: sign 1, γ = 1, no noise."""

    sign: float = 1.0
    gamma: tuple[float, float] = (1.0, 1.0)
    noise_sign: float = 0.0


HONEST = Behaviour()
POISONER = Behaviour(sign=-2.0, gamma=(1.0, 2.0), noise_sign=1.0)  # g ← −2γg + μ, γ ~ U(1, 2)
ASCENDER = Behaviour(sign=1.0, gamma=(0.0, 1.0), noise_sign=-1.0)  # still malicious (−γg + μ), then ascent: −(…)


@dataclass
class ModelPoisoning:
    """The scenario: `clients` clients, of which `malicious` poison the model; the target is the malicious set."""

    name: str = "model_poisoning"
    clients: int = 10
    malicious: Sequence[int] = (0, 1, 2)
    click_model: str = "navigational"
    rounds: int = 1000
    unlearning_rounds: int = 1000
    queries_per_round: int = 5

    def __post_init__(self) -> None:
        counts = {"clients": self.clients, "rounds": self.rounds, "unlearning_rounds": self.unlearning_rounds,
                  "queries_per_round": self.queries_per_round}
        small = [f"scenario.{name}={value}" for name, value in counts.items() if value < 1]
        if small:
            raise UserError(f"scenario {self.name}: {', '.join(small)} is not valid; valid: a whole number >= 1")
        self.malicious = tuple(int(k) for k in self.malicious)
        bad = [k for k in self.malicious if not 0 <= k < self.clients]
        if bad:
            raise UserError(f"scenario {self.name}: malicious clients {bad} do not exist; valid: 0..{self.clients - 1}")
        click_model(self.click_model)

    @property
    def target(self) -> str:
        return ",".join(str(k) for k in self.malicious)

    @property
    def retained(self) -> list[int]:
        return [k for k in range(self.clients) if k not in self.malicious]

    def behaviours(self) -> list[Behaviour]:
        return [POISONER if k in self.malicious else HONEST for k in range(self.clients)]


@dataclass
class Rounds:
    """What a run of rounds produced: the global model after each round and the online NDCG of each round."""

    globals: list[np.ndarray] = field(default_factory=list)
    online: list[float] = field(default_factory=list)
    locals: list[np.ndarray] = field(default_factory=list)  # kept only when asked (training stores them)

    def ended(self, weights: np.ndarray, online: float) -> None:
        """A round ended with the global model `weights`: kept, and announced as one step of the method's run
        (`runtime.during.stepped`: a point of its dynamics may score it; nothing happens outside a watched method,
        e.g. in training). One unlearning round is one step, so step i is the record of round T + i."""
        self.globals.append(weights)
        self.online.append(online)
        during.stepped(weights)


def partition(queries: int, clients: int, rng: np.random.Generator) -> np.ndarray:
    """The training queries shuffled once and cut into `clients` equal parts (remainder dropped): C × P."""
    size = queries // clients
    if size == 0:
        raise UserError(f"{queries} training queries cannot be shared by {clients} clients")
    return rng.permutation(queries)[: size * clients].reshape(clients, size)


def initial_weights(features: int, rng: np.random.Generator) -> np.ndarray:
    """w0 = 0.01 · u/‖u‖, u ~ N(0, I)."""
    u = rng.standard_normal(features)
    return 0.01 * u / np.linalg.norm(u)


Constraint = Callable[[np.ndarray], np.ndarray]  # C × F local models → the same, e.g. a projection


class Simulator:
    """Local training of a set of clients on one query set, with a click model and a learning rate."""

    def __init__(self, train: Queries, model: ClickModel, lr: float) -> None:
        self.train, self.model, self.lr = train, model, lr
        self.width, self.features = train.features.shape[1], train.features.shape[2]
        self.ideal = pdgd.ideal_dcg(train.labels)  # IDCG@10 per training query, for the online NDCG of shown lists

    def local_models(self, start: np.ndarray, queries: np.ndarray, rngs: Sequence[np.random.Generator],
                     behaviours: Sequence[Behaviour], constraint: Constraint | None = None) -> tuple[np.ndarray, float]:
        """Each client's model after its queries (C × q query indices), starting from `start` (F, or C × F for a
        copy each), `constraint` applied after every step; and the round's online NDCG@10 (`online_ndcg`)."""
        clients, steps = queries.shape
        if clients == 0:
            return np.zeros((0, self.features)), float("nan")
        rows = np.arange(clients)[:, None]
        weights = np.tile(start, (clients, 1)) if start.ndim == 1 else start.copy()
        gumbel, uniform, gamma, normal = self.draw(rngs, steps)
        sign = np.array([b.sign for b in behaviours])[:, None]
        noise_sign = np.array([b.noise_sign for b in behaviours])[:, None]
        low = np.array([b.gamma[0] for b in behaviours])
        gamma = low + (np.array([b.gamma[1] for b in behaviours]) - low) * gamma.T  # q × C
        dcg = np.zeros((steps, clients))
        for step in range(steps):
            q = queries[:, step]
            width = self.train.sizes[q].max()  # this step's longest query: the padding beyond it plays no part
            features, labels = self.train.features[q, :width], self.train.labels[q, :width]
            scores = pdgd.scores_of(features, labels >= 0, weights)
            ranking, shown = pdgd.display(scores, gumbel[:, step, :width])
            relevance = labels[rows, ranking]
            clicks = pdgd.cascade_clicks(relevance, shown, uniform[:, step, : ranking.shape[1]], self.model)
            gradient = pdgd.pdgd_gradient(features, scores, ranking, shown, clicks)
            mu = gradient.mean(1, keepdims=True) + gradient.std(1, keepdims=True) * normal[:, step]
            weights += self.lr * (sign * gamma[step][:, None] * gradient + noise_sign * mu)
            if constraint is not None:
                weights = constraint(weights)
            dcg[step] = pdgd.list_dcg(relevance, shown)
        return weights, online_ndcg(dcg, self.ideal[queries.T])

    def draw(self, rngs: Sequence[np.random.Generator], steps: int) -> tuple[np.ndarray, ...]:
        """Each client's randomness for a round, from its own stream: Gumbel noise for the list (C × q × D), the
        click model's uniforms (C × q × 10 × 2), γ's uniforms (C × q) and μ's normals (C × q × F)."""
        draws = [(rng.gumbel(size=(steps, self.width)), rng.random((steps, DEPTH, 2)), rng.random(steps),
                  rng.standard_normal((steps, self.features))) for rng in rngs]
        return tuple(np.stack(parts) for parts in zip(*draws, strict=True))


def online_ndcg(dcg: np.ndarray, ideal: np.ndarray) -> float:
    """The online NDCG@10 of a round, as the reference's: each shown list's NDCG@10, 0 for a query without a relevant
    document (`evl_tool.query_ndcg_at_k`), averaged over each client's queries and then over the clients; every
    client takes as many queries as the others, so this is the mean over all lists (q × C)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.where(ideal > 0, dcg / ideal, 0.0).mean())


QUERY_BUDGETS = {"capped": False, "wrapped": True}  # name → whether a client may go round its partition in a round


class QueryCursor:
    """Each client's next queries: its partition in order from its pointer (the pointers persist across phases).

    Capped (the reference's `client_ranker_update`): a client takes min(count, P) queries, at most one pass over its
    P queries, and its pointer moves on by as many, modulo P. Wrapped: exactly `count`, going round the partition
    as often as that needs (e.g. 1000 on a partition of 101 is about ten passes).
    """

    def __init__(self, partitions: np.ndarray, pointers: np.ndarray | None = None, wrap: bool = False) -> None:
        self.partitions, self.wrap = partitions, wrap
        self.pointers = np.zeros(len(partitions), dtype=np.int64) if pointers is None else pointers.copy()

    @staticmethod
    def pointers_at(partitions: np.ndarray, rounds: int, per_round: int) -> np.ndarray:
        """Every client's pointer after `rounds` training rounds of `per_round` capped queries each."""
        size = partitions.shape[1]
        return np.full(len(partitions), rounds * min(per_round, size) % size, dtype=np.int64)

    def budget(self, count: int) -> int:
        """The queries a client takes when asked for `count`."""
        return count if self.wrap else min(count, self.partitions.shape[1])

    def take(self, clients: Sequence[int], count: int) -> np.ndarray:
        size, count = self.partitions.shape[1], self.budget(count)
        rows = []
        for k in clients:
            rows.append(self.partitions[k, (self.pointers[k] + np.arange(count)) % size])
            self.pointers[k] = (self.pointers[k] + count) % size
        return np.array(rows)


def mean_online(groups: Sequence[tuple[np.ndarray, float]]) -> float:
    """The online NDCG of a round whose clients stepped in several groups (`local_models` results): the mean over
    the clients of each client's mean, as one call over all of them would give; NaN when no group showed a list."""
    sizes = np.array([len(local) for local, online in groups if len(local) and np.isfinite(online)])
    values = np.array([online for local, online in groups if len(local) and np.isfinite(online)])
    return float(values @ sizes / sizes.sum()) if len(sizes) else float("nan")


def fedavg(local: np.ndarray) -> np.ndarray:
    """The server's model: the plain mean of the clients' local models (FedAvg with equal weights)."""
    return local.mean(0)


def client_streams(clients: int, *seeds: int) -> list[np.random.Generator]:
    """One generator per client (clicks, list sampling, attack noise, query draws), from SeedSequence([*seeds, k])."""
    return [np.random.default_rng(np.random.SeedSequence([*seeds, k])) for k in range(clients)]


def run_rounds(simulator: Simulator, start: np.ndarray, queries: Callable[[Sequence[int]], np.ndarray],
               clients: Sequence[int], rngs: Sequence[np.random.Generator], behaviours: Sequence[Behaviour],
               rounds: int, keep_locals: bool = False) -> Rounds:
    """`rounds` rounds of FedAvg over `clients`: local steps from the global model on `queries(clients)` (C × q
    query indices per round), then the plain mean of the local models. Every round is a safe point for an
    interrupt (runtime/interrupt.py)."""
    result = Rounds()
    weights = start
    for _ in interrupt.checked(range(rounds)):
        local, online = simulator.local_models(weights, queries(clients), [rngs[k] for k in clients],
                                               [behaviours[k] for k in clients])
        weights = fedavg(local)
        result.ended(weights, online)
        if keep_locals:
            result.locals.append(local)
    return result


@dataclass
class TrainedFederation:
    """The state after training, as the cache stores it: G^0..G^T, every round's local models, partitions, query
    pointers, and the per-round online NDCG of training."""

    globals: np.ndarray  # (T + 1) × F, globals[0] = w0
    locals: np.ndarray  # T × C × F: client k's model at the end of round t (0-based)
    partitions: np.ndarray  # C × P
    pointers: np.ndarray  # C
    online: np.ndarray  # T

    @property
    def final(self) -> np.ndarray:
        return self.globals[-1]

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"globals": self.globals, "locals": self.locals, "partitions": self.partitions,
                "pointers": self.pointers, "online": self.online}


def train_federation(data: LetorData, scenario: ModelPoisoning, lr: float, seed: int) -> TrainedFederation:
    """Train with every client, the malicious ones poisoning, for `scenario.rounds` rounds (the training seed fixes
    w0, the partition and every client's stream)."""
    rng = np.random.default_rng(np.random.SeedSequence([0xF0, seed]))
    w0 = initial_weights(data.features, rng)
    partitions = partition(len(data.train), scenario.clients, rng)
    cursor = QueryCursor(partitions)
    simulator = Simulator(data.train, click_model(scenario.click_model), lr)
    everyone = list(range(scenario.clients))
    per_round = scenario.queries_per_round
    rounds = run_rounds(simulator, w0, lambda clients: cursor.take(clients, per_round), everyone,
                        client_streams(scenario.clients, 0xF1, seed), scenario.behaviours(), scenario.rounds,
                        keep_locals=True)
    locals_ = np.stack(rounds.locals) if rounds.locals else np.zeros((0, scenario.clients, data.features))
    return TrainedFederation(np.stack([w0, *rounds.globals]), locals_, partitions, cursor.pointers,
                             np.array(rounds.online))
