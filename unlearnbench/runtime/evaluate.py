"""Logits of one model on one pool of samples, computed once, gathered across ranks in sample order.

Batch k goes to rank k mod world, so every batch holds the same samples whatever the device count, and every rank
runs the same number of forward passes (padding with a repeat of its first batch), which sharded strategies need.
Metrics are then computed once from the gathered logits, so they do not depend on the number of devices.
"""

from __future__ import annotations

import math

import torch
from lightning_fabric import Fabric
from lightning_fabric.wrappers import is_wrapped
from torch import Tensor, nn

from unlearnbench.data.base import Subset
from unlearnbench.data.transforms import Normalizer, to_unit
from unlearnbench.runtime.train import float_logits


def prepared(fabric: Fabric, model: nn.Module) -> nn.Module:
    """The model set up by Fabric (device, precision, sharding), setting it up if a method returned it bare."""
    return model if is_wrapped(model) else fabric.setup_module(model)


@torch.no_grad()
def predict(fabric: Fabric, model: nn.Module, subset: Subset, batch_size: int, normalizer: Normalizer) -> Tensor:
    """Logits (len(subset) × K, float32 or better, on the CPU) in the subset's order."""
    model = prepared(fabric, model)
    was_training = model.training
    model.eval()
    n, world, rank = len(subset), fabric.world_size, fabric.global_rank
    num_batches = max(1, math.ceil(n / batch_size))
    rounds = math.ceil(num_batches / world)
    outputs = []
    for r in range(rounds):
        k = r * world + rank
        start = (k if k < num_batches else rank % num_batches) * batch_size
        positions = torch.arange(start, min(start + batch_size, n))
        images, _ = subset.take(positions)
        logits = float_logits(model(normalizer(to_unit(images))))
        padded = logits.new_zeros(batch_size, logits.shape[1])
        padded[: len(logits)] = logits
        outputs.append(padded)
    local = torch.stack(outputs)  # rounds × batch × K
    if world > 1:
        gathered = fabric.all_gather(local)  # world × rounds × batch × K
        local = gathered.transpose(0, 1)  # rounds × world × batch × K: batch index r·world + rank
    model.train(was_training)
    return local.reshape(-1, local.shape[-1])[:n].cpu()
