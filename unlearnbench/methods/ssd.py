"""Selective Synaptic Dampening (SSD): dampen the parameters that matter far more to D_f than to all of D.

Foster, Schoepf and Brintrup, "Fast Machine Unlearning Without Retraining Through Selective Synaptic Dampening",
AAAI 2024 (reference code: github if-loops/selective-synaptic-dampening, `ssd.py`).

What it does (spec/methods.md, "SSD"), with the model in eval mode and no randomness at all:
1. The importance of a data set is the diagonal of the empirical Fisher information, estimated per mini-batch: for
   each batch (unshuffled) zero the gradients, L = mean cross-entropy of the batch, backward, imp_θ += (∂L/∂θ)²;
   finally imp_θ /= number of batches. I_f is the importance of D_f, I_D that of the full training set D = D_r
   followed by D_f (the reference's `ConcatDataset((retain, forget))`: batches run across the boundary).
2. For every learnable parameter θ (conv and linear weights and biases, batch-norm γ and β; not the running
   statistics): selected = I_f > α·I_D; β = min(λ·I_D / I_f, 1); θ[selected] *= β[selected].

Relation to the reference code:
- Defaults are the reference's: λ (`dampening_constant`) = 1, α (`selection_weighting`) = 10 for ResNet18 in every
  scenario; for ViT 5 (full class), 25 (sub-class), 10 (random sample). `alpha` and `lam` take a plain value or a
  mapping by model and scenario (`methods.base.setting`). The reference's other knobs (exponent 1, lower bound 1)
  are fixed at the values it uses.
- The batch size is the reference's unlearning batch size (`scenario.batch_size`: 64 targeted, 128 random sample).
  It is not a detail: the importance is a mean of squared *batch-mean* gradients, so it changes with the batching.
- Importances are accumulated in float32 (or float64 for a float64 model) whatever the training precision; the
  dampening is applied in place, in each parameter's own dtype. Under mixed precision with a gradient scaler the
  gradients are unscaled first.
- Under data parallelism every rank runs the same batches, each on its share of the global batch; the loss is
  weighted so that the gradient DDP averages is exactly that of the global batch.
- unlearnbench caches I_D: it depends only on M_o and the exact order of D (and the loss, batch size and
  normalisation), so it is computed once per original model, through `UnlearningTask.memo`, and reused by every
  job on that M_o (e.g. the single-training-seed design: many unlearning seeds, one M_o). The reported time stays
  that of the whole method: on a cache hit, the time the cached computation took is added to the measured time.
  Under FSDP (sharded parameters: each rank holds its own shard of the importances) I_D is not cached;
  DeepSpeed is refused (its engine keeps the gradients partitioned, out of reach of a per-parameter importance).

LFSSD (`lfssd.py`) is this class with a label-free loss and |gradient| accumulation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from lightning_fabric.strategies import DeepSpeedStrategy, FSDPStrategy
from lightning_fabric.wrappers import is_wrapped
from torch import Tensor, nn

from unlearnbench.config import AT_LEAST_0, Range
from unlearnbench.data.base import Subset
from unlearnbench.errors import UserError
from unlearnbench.methods.base import Method, UnlearningTask, setting
from unlearnbench.runtime.cache import tensor_digest
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.train import Batches, float_logits


def cross_entropy_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """SSD's importance loss: mean cross-entropy over the batch."""
    return F.cross_entropy(logits, labels)


def logit_norm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """LFSSD's importance loss: mean over the batch of the squared L2 norm of the logits (labels unused)."""
    return logits.pow(2).sum(dim=1).mean()


LOSSES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"cross_entropy": cross_entropy_loss,
                                                          "logit_norm": logit_norm_loss}
MAGNITUDES: dict[str, Callable[[Tensor], Tensor]] = {"square": torch.square, "abs": torch.abs}


def learnable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters SSD scores and dampens, named as in the bare module: every parameter that takes gradients
    (weights, biases, batch-norm γ and β; buffers such as running statistics are not parameters)."""
    bare = model.module if is_wrapped(model) else model
    return [(name, p) for name, p in bare.named_parameters() if p.requires_grad]


def gradient_scale(fabric: Fabric) -> float:
    """The factor `fabric.backward` multiplied the loss by (a 16-mixed gradient scaler's scale; otherwise 1)."""
    scaler = getattr(fabric.strategy.precision, "scaler", None)
    return float(scaler.get_scale()) if scaler is not None else 1.0


def importance(fabric: Fabric, model: nn.Module, batches: Batches, loss_kind: str = "cross_entropy",
               magnitude: str = "square") -> dict[str, Tensor]:
    """Per-parameter importance of `batches`: the mean over batches of magnitude(∂L/∂θ), L = LOSSES[loss_kind].

    `model` is set up by Fabric (so DDP averages gradients across ranks) and put in eval mode; `batches` must be
    unshuffled and identical on every rank. Returns float32 (or float64) tensors keyed by parameter name.
    """
    loss_of, magnitude_of = LOSSES[loss_kind], MAGNITUDES[magnitude]
    parameters = learnable(model)
    totals = {name: torch.zeros_like(p, dtype=torch.promote_types(p.dtype, torch.float32))
              for name, p in parameters}
    world, n, size = fabric.world_size, len(batches.subset), batches.batch_size
    scale = gradient_scale(fabric)
    count = len(batches)
    model.eval()
    for step, (inputs, labels) in enumerate(batches):
        model.zero_grad(set_to_none=True)
        loss = loss_of(float_logits(model(inputs)), labels)
        if world > 1:  # this rank's share of the global batch: DDP's average is then the global batch's gradient
            loss = loss * (labels.numel() * world / min(size, n - step * size))
        fabric.backward(loss)
        for name, p in parameters:
            if p.grad is not None:
                grad = p.grad.detach().to(totals[name].dtype)
                totals[name] += magnitude_of(grad / scale if scale != 1.0 else grad)
    model.zero_grad(set_to_none=True)
    return {name: total / count for name, total in totals.items()}


@torch.no_grad()
def dampen(model: nn.Module, importance_forget: dict[str, Tensor], importance_full: dict[str, Tensor],
           alpha: float, lam: float) -> int:
    """θ[selected] *= min(λ·I_D/I_f, 1)[selected] with selected = I_f > α·I_D, in place, for every learnable
    parameter; the product is formed in the importances' dtype and stored in the parameter's. Returns how many
    parameter entries were dampened."""
    dampened = 0
    for name, p in learnable(model):
        forget = importance_forget[name].to(p.device)
        full = importance_full[name].to(p.device)
        selected = forget > full.mul(alpha)
        beta = full[selected].mul(lam).div(forget[selected]).clamp(max=1.0)
        p[selected] = p[selected].to(beta.dtype).mul(beta).to(p.dtype)
        dampened += int(selected.sum())
    return dampened


class SSD(Method):
    ranges: ClassVar[dict[str, Range]] = {"alpha": AT_LEAST_0, "lam": AT_LEAST_0}
    deterministic = True
    loss_kind = "cross_entropy"  # the importance's loss (LOSSES) and how gradients accumulate (MAGNITUDES)
    magnitude = "square"
    memo_kind = "ssd_importance"  # the cache's name for I_D

    def __init__(self, name: str, alpha: float | dict = 10.0, lam: float | dict = 1.0, batch_size: int = 64) -> None:
        """`alpha`: selection weighting α; `lam`: dampening constant λ (each a value or a mapping by model and
        scenario); `batch_size`: of the importance passes (the reference's, i.e. the scenario's)."""
        super().__init__(name)
        self.alpha, self.lam, self.batch_size = alpha, lam, batch_size
        self.reused_importance_s: tuple[UnlearningTask, float] | None = None
        """For `cost`: the task of the last `unlearn` call and the original computing time of the I_D it took
        from the cache (0 when it computed I_D itself)."""

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        fabric = task.fabric
        if isinstance(fabric.strategy, DeepSpeedStrategy):
            raise UserError(f"method {self.name} needs every parameter's full gradient, which DeepSpeed keeps "
                            f"partitioned; use strategy single, ddp_spawn, ddp or fsdp")
        model = fabric.setup_module(model)
        forget = task.splits.forget_train
        full = forget.with_indices(torch.cat([task.splits.retain_train.indices, forget.indices]))  # D_r, then D_f
        importance_full, reused_s = self.full_importance(model, task, full)
        importance_forget = self.importance(model, task, forget)
        dampen(model, importance_forget, importance_full, setting(self.alpha, task), setting(self.lam, task))
        self.reused_importance_s = (task, reused_s)
        return model

    def importance(self, model: nn.Module, task: UnlearningTask, subset: Subset) -> dict[str, Tensor]:
        batches = task.batches(subset, self.batch_size, shuffle=False, training=False)
        return importance(task.fabric, model, batches, self.loss_kind, self.magnitude)

    def full_importance(self, model: nn.Module, task: UnlearningTask, full: Subset) -> tuple[dict[str, Tensor], float]:
        """I_D from the model cache (computed on a miss), and the seconds its computation took if it was a hit."""
        if isinstance(task.fabric.strategy, FSDPStrategy):  # rank-local shards: the cache holds one rank's only
            return self.importance(model, task, full), 0.0
        device = next(p.device for _, p in learnable(model))

        def build() -> tuple[dict[str, Tensor], dict]:
            start = time.perf_counter()
            result = self.importance(model, task, full)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return result, {"time_s": time.perf_counter() - start}

        parts = {"order": tensor_digest(full.indices), "pool": full.pool, "batch_size": self.batch_size,
                 "loss": self.loss_kind, "magnitude": self.magnitude,
                 "normalisation": [task.normalizer.mean.flatten().tolist(), task.normalizer.std.flatten().tolist()]}
        entry = task.memo(self.memo_kind, parts, build)
        state = {name: tensor.to(device) for name, tensor in entry.state.items()}
        return state, float(entry.meta.get("time_s", 0.0)) if entry.hit else 0.0

    def cost(self, measured: Cost, task: UnlearningTask) -> Cost:
        """The measured cost, plus the original computing time of I_D when it came from the cache, so the reported
        time is that of the whole method whether or not an earlier job computed I_D."""
        reused, self.reused_importance_s = self.reused_importance_s, None
        if reused is None or reused[0] is not task or not reused[1] or measured.time_s is None:
            return measured
        notes = [*measured.notes, f"time_s includes {reused[1]:.3f} s of cached I_D computation"]
        return Cost(measured.time_s + reused[1], measured.memory_gib, measured.utilisation_pct, notes)
