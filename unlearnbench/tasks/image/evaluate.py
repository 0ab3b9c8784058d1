"""Logits of one model on one pool of samples, computed once, gathered across ranks in sample order.

Batch k goes to rank k mod world, so every batch holds the same samples whatever the device count, and every rank
runs the same number of forward passes (padding with a repeat of its first batch), which sharded strategies need.
Metrics are then computed once from the gathered logits, so they do not depend on the number of devices.

The batch and the inputs' memory layout are chosen per device, by measurement (`make bench`,
benchmarks/bench_throughput.py). On a CPU, batches of 64 and channels_last inputs: at width 64 a 32 × 32 batch of
64 makes 16 MiB activations, under glibc's 32 MiB mmap ceiling, so they are reused from the heap instead of being
mapped and page-faulted afresh by every operation (batch 1024 ran at 0.66–0.86 of that, 3.4 M minor faults per
pass); channels_last inputs run oneDNN's faster convolutions (1.3–2× in float32, 3.6× in bf16 on a 2-core AMD EPYC).
On a GPU, batches of 1024 in the model's own layout keep the device busy.
"""

from __future__ import annotations

import math

import torch
from lightning_fabric import Fabric
from lightning_fabric.wrappers import is_wrapped
from torch import Tensor, nn

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.train import float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.transforms import Normalizer, to_unit


def prepared(fabric: Fabric, model: nn.Module) -> nn.Module:
    """The model set up by Fabric (device, precision, sharding), setting it up if a method returned it bare."""
    return model if is_wrapped(model) else fabric.setup_module(model)


CPU_BATCH, GPU_BATCH = 64, 1024


def evaluation_batch_size(device_type: str) -> int:
    """`evaluation.batch_size` when it is null: the measured best for the device (module docstring)."""
    return CPU_BATCH if device_type == "cpu" else GPU_BATCH


def channels_last_inputs(device_type: str) -> bool:
    """Whether forward passes without gradients take channels_last inputs (module docstring). Training keeps
    `runtime.channels_last`'s choice: on CPUs a channels_last backward pass is not safe (config.Runtime)."""
    return device_type == "cpu"


@torch.no_grad()
def predict(fabric: Fabric, model: nn.Module, subset: Subset, batch_size: int, normalizer: Normalizer) -> Tensor:
    """Logits (len(subset) × K, float32 or better, on the CPU) in the subset's order; every batch is a safe point for
    an interrupt (runtime/interrupt.py)."""
    model = prepared(fabric, model)
    was_training = model.training
    model.eval()
    n, world, rank = len(subset), fabric.world_size, fabric.global_rank
    num_batches = max(1, math.ceil(n / batch_size))
    rounds = math.ceil(num_batches / world)
    outputs = []
    for r in interrupt.checked(range(rounds)):
        k = r * world + rank
        start = (k if k < num_batches else rank % num_batches) * batch_size
        positions = torch.arange(start, min(start + batch_size, n))
        images, _ = subset.take(positions)
        inputs = normalizer(to_unit(images))
        if channels_last_inputs(fabric.device.type):
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        logits = float_logits(model(inputs))
        if len(logits) < batch_size:  # the last batch: padded so that every rank gathers one shape
            logits = torch.cat([logits, logits.new_zeros(batch_size - len(logits), logits.shape[1])])
        outputs.append(logits)
    local = torch.stack(outputs)  # rounds × batch × K
    if world > 1:
        gathered = fabric.all_gather(local)  # world × rounds × batch × K
        local = gathered.transpose(0, 1)  # rounds × world × batch × K: batch index r·world + rank
    model.train(was_training)
    return local.reshape(-1, local.shape[-1])[:n].cpu()
