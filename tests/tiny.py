"""Tiny settings of the ranking and text tasks that tests of several areas share (a stored federation one can follow
by hand; a tiny Llama with its data, splits and batches)."""

from __future__ import annotations

import numpy as np
import torch
from lightning_fabric import Fabric

from unlearnbench.tasks.ranking.data import LetorData, Queries
from unlearnbench.tasks.ranking.federation import ASCENDER, HONEST, POISONER, ModelPoisoning, TrainedFederation
from unlearnbench.tasks.ranking.methods.base import FederatedTask
from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.model.causal_lm import CausalLM, tiny_llama
from unlearnbench.tasks.text.model.train import Items
from unlearnbench.tasks.text.scenario import ForgetEntities

FEATURES, QUERIES, PARTITION, CLIENTS, ROUNDS = 3, 20, 4, 4, 12
FACTOR = {HONEST: 1.0, ASCENDER: -1.0, POISONER: -2.0}  # the stub's step per behaviour


class StubSimulator:
    """Local training one can follow by hand: query q moves a client's model by FACTOR[behaviour] · step[q], then
    `constraint`; a round's online NDCG is its mean query index / 100. It draws nothing from the clients' streams."""

    def __init__(self, steps: np.ndarray) -> None:
        self.steps = steps

    def local_models(self, start, queries, rngs, behaviours, constraint=None):
        weights = np.tile(start, (len(queries), 1))
        factors = np.array([FACTOR[b] for b in behaviours])[:, None]
        for step in range(queries.shape[1]):
            weights = weights + factors * self.steps[queries[:, step]]
            weights = constraint(weights) if constraint is not None else weights
        return weights, float(queries.mean()) / 100 if queries.size else float("nan")


def stub_federation():
    """A stored training of 12 rounds by 4 clients (0 malicious) on 20 queries of 3 features, and its task."""
    rng = np.random.default_rng(3)
    trained = TrainedFederation(globals=rng.normal(size=(ROUNDS + 1, FEATURES)),
                                locals=rng.normal(size=(ROUNDS, CLIENTS, FEATURES)),
                                partitions=rng.permutation(QUERIES)[: CLIENTS * PARTITION].reshape(CLIENTS, PARTITION),
                                pointers=np.array([1, 2, 3, 0]), online=np.zeros(ROUNDS))
    queries = Queries(np.zeros((QUERIES, 2, FEATURES)), np.zeros((QUERIES, 2), dtype=np.int64),
                      np.full(QUERIES, 2), np.arange(QUERIES))
    scenario = ModelPoisoning(clients=CLIENTS, malicious=(0,), rounds=ROUNDS, unlearning_rounds=9, queries_per_round=3)
    task = FederatedTask(LetorData("stub", queries, queries), scenario, StubSimulator(rng.normal(size=(QUERIES, 3))),
                         seed_train=4, seed_unlearn=5)
    return trained, task



def tiny_setting():
    """Tiny data of 4 entities, its tokenizer, encoder and forget10 splits, a tiny Llama and a reference, and a
    fixed forget and retain batch."""
    data = fictitious(entities=4, holdout_entities=1, general=2, seed=1)
    lm = CausalLM(hidden=16, heads=2)
    tokenizer = lm.tokenizer([*data.texts(), "I don't know."])
    encoder = lm.encoder(tokenizer)
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    fabric = Fabric(accelerator="cpu", devices=1)

    def items(records):
        return Items(fabric, [encoder.item(r["question"], r["answer"]) for r in records], encoder.pad_id)

    model = tiny_llama(len(tokenizer), 0, hidden=16, heads=2)
    reference = tiny_llama(len(tokenizer), 1, hidden=16, heads=2).eval()
    forget, retain = items(splits.forget), items(splits.retain)
    batch_f = forget.rows(torch.arange(4)) | {"draw": torch.arange(4)}
    batch_r = retain.rows(torch.tensor([3, 0, 5, 1]))
    return fabric, encoder, splits, forget, retain, model, reference, batch_f, batch_r
