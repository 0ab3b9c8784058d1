"""A model's full state: every parameter and buffer, unsharded, on the CPU, whatever the strategy that holds it.

The cache stores it, and a task rebuilds its models from it (each rank, after a sharded training).
"""

from __future__ import annotations

from lightning_fabric import Fabric
from lightning_fabric.strategies import FSDPStrategy
from lightning_fabric.wrappers import is_wrapped
from torch import Tensor, nn


def full_state_dict(fabric: Fabric, model: nn.Module) -> dict[str, Tensor]:
    """Every parameter and buffer, unsharded, as CPU tensors, with the bare module's names, on every rank: each rank
    goes on to rebuild the model from them. FSDP's shards are gathered by torch's state-dict API (without its CPU
    offload, which would leave every rank but the first with nothing); DeepSpeed ZeRO-3's partitions inside
    `GatheredParameters`, outside which a parameter is an empty placeholder."""
    bare = model.module if is_wrapped(model) else model
    if is_wrapped(model) and isinstance(fabric.strategy, FSDPStrategy):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return on_cpu(get_model_state_dict(model._forward_module, options=StateDictOptions(full_state_dict=True)))
    if is_wrapped(model) and getattr(fabric.strategy, "zero_stage_3", False):
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(bare.parameters()), modifier_rank=None):
            return on_cpu(bare.state_dict())
    return on_cpu(bare.state_dict())


def on_cpu(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {name: tensor.detach().cpu().clone() for name, tensor in state.items()}
