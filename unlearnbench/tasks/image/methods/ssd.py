"""Selective Synaptic Dampening (SSD): dampen the parameters that matter far more to D_f than to all of D.

Foster, Schoepf and Brintrup, "Fast Machine Unlearning Without Retraining Through Selective Synaptic Dampening",
AAAI 2024 (reference code: github if-loops/selective-synaptic-dampening, `src/ssd.py` run by `ssd_tuning` of the
`src/forget_{full_class,subclass,random}_*.py` scripts).

What it does, with the model in eval mode:
1. The importance of a data set is the diagonal of the empirical Fisher information, estimated per mini-batch: for
   each batch (unshuffled) zero the gradients, L = mean cross-entropy of the batch, backward, imp_θ += (∂L/∂θ)²;
   finally imp_θ /= number of batches. I_f is the importance of D_f, I_D that of the full training set D = D_r
   followed by D_f (the reference's `ConcatDataset((retain, forget))`: batches run across the boundary).
2. For every learnable parameter θ (conv and linear weights and biases, batch-norm γ and β; not the running
   statistics): selected = I_f > α·I_D; β = min(λ·I_D / I_f, 1); θ[selected] *= β[selected].

The order of D_f and D_r is part of the method: an importance is a mean of squared *batch-mean* gradients, so which
samples share a batch decides how much their gradients cancel (on the digits demo's M_o, width 8, class 3, α = 10
selects 1,538 parameter entries in the reference's order and 2,411 in index order). `order` chooses it:
- `reference` (the default), the order the reference's scripts build:
  - full class (`get_classwise_ds`, `build_retain_forget_sets` of `forget_full_class_strategies.py`): D_r class by
    class, every retained class in class order and each class's samples in pool order; D_f the forgotten class in
    pool order. On CIFAR-20 the class is the super-class, the label the loss uses (the reference groups by the
    third item of its samples, which its `Cifar20` makes the coarse label).
  - sub-class (the same functions of `forget_subclass_strategies.py`, which group by the second item, the fine
    label): D_r fine class by fine class in fine-class order, each in pool order; D_f the forgotten fine class in
    pool order; the loss still uses the super-class.
  - random sample (`torch.utils.data.random_split` in `forget_random_main.py`): D_f and D_r are slices of one
    uniform random permutation of the pool, so each is in random order. unlearnbench's split keeps the two sets but
    not its permutation, so the order of each is a uniform random permutation of the set drawn from the method's
    stream (the unlearning seed): D_f's first, then D_r's. Given the sets, the reference's two orders are exactly
    that, two independent uniform permutations, so the orders have the reference's distribution (not the same
    draw: the reference uses its own seed). In this scenario M_u thus depends on the unlearning seed through the
    order as well as through the forget set.
- `dataset`: both in pool (index) order; the classes then mix in every batch.
The SUPREME framework shuffles both loaders (its `unlearning_utils.py`); unlearnbench follows the authors' code.

Relation to the reference code:
- Defaults are the reference's: λ (`dampening_constant`) = 1, α (`selection_weighting`) = 10 for ResNet18 in every
  scenario; for ViT 5 (full class), 25 (sub-class), 10 (random sample) (`10 * model_size_scaler` in each
  `forget_*_main.py`). `alpha` and `lam` take a plain value or a mapping by model, dataset and scenario
  (`methods.base.setting`). The reference's other knobs (exponent 1, lower bound 1) are fixed at the values it uses.
- The batch size is the reference's (`scenario.batch_size`): 64 for both passes in the targeted scenarios (`-b`,
  default 64, not overridden by its scripts except `-b 64` for ViT on CIFAR-20); 128 for both in the random-sample
  scenario (D_f's loader has batch 128 written in, D's takes `-b`, whose default there is 128). It is not a detail:
  the importance changes with the batching.
- The reference as published runs only the full-class scenario end to end: its sub-class script asks for
  `ssd_tuning`, which `forget_subclass_strategies.py` names `pdr_tuning` (an AttributeError), and the random-sample
  `ssd_tuning` rebinds the module name `ssd` inside the function (an UnboundLocalError before any work). unlearnbench
  runs their evident intent, the same loops on the data those scripts build.
- Importances are accumulated in float32 (or float64 for a float64 model) whatever the training precision; the
  dampening is applied in place, in each parameter's own dtype. Under mixed precision with a gradient scaler the
  gradients are unscaled first. In float32 on one CPU thread the result is bit-identical to the reference's loops
  (`tests/image/test_oracle_ssd.py`).
- Under data parallelism every rank runs the same batches, each on its share of the global batch; the loss is
  weighted so that the gradient DDP averages is exactly that of the global batch.
- unlearnbench caches I_D: it depends only on M_o and the exact order of D (and the loss, batch size and
  normalisation), so it is computed once per original model, through `UnlearningTask.memo`, and reused by every
  job on that M_o (e.g. the single-training-seed design: many unlearning seeds, one M_o). The reported time stays
  that of the whole method: on a cache hit, the time the cached computation took is added to the measured time.
  Under FSDP (sharded parameters: each rank holds its own shard of the importances) I_D is not cached;
  DeepSpeed is refused (its engine keeps the gradients partitioned, out of reach of a per-parameter importance).
- The job log says how many parameter entries were selected (an entry whose β is 1 keeps its value).

LFSSD (`lfssd.py`) is this class with a label-free loss and |gradient| accumulation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from lightning_fabric.strategies import DeepSpeedStrategy, FSDPStrategy
from lightning_fabric.wrappers import is_wrapped
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, Range
from unlearnbench.runtime.cache import tensor_digest
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.train import float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, SubClass
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting
from unlearnbench.tasks.image.train import Batches

log = logging.getLogger(__name__)

ORDERS = ("reference", "dataset")


def cross_entropy_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """SSD's importance loss: mean cross-entropy over the batch."""
    return F.cross_entropy(logits, labels)


def logit_norm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """LFSSD's importance loss: mean over the batch of the squared L2 norm of the logits (labels unused), formed as
    the reference forms it (the norm, then its square), so that the gradients round as the reference's do."""
    return torch.linalg.vector_norm(logits, dim=1).pow(2).mean()


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


def grouped(subset: Subset, keys: Tensor) -> Subset:
    """`subset` group by group in increasing key (class or fine class), each group in pool order: the reference's
    `get_classwise_ds` followed by `build_retain_forget_sets`."""
    indices = subset.indices.sort().values
    return subset.with_indices(indices[keys[indices].sort(stable=True).indices])


def fine_labels(subset: Subset) -> Tensor:
    """The fine class of every sample of `subset`'s pool (CIFAR-20's groups)."""
    return subset.data.train_groups if subset.pool == "train" else subset.data.test_groups


def shuffled(subset: Subset, generator: torch.Generator) -> Subset:
    """`subset` in the order of a uniform random permutation drawn from `generator` (applied to the pool-ordered
    indices, so the order depends on the set and the draw only; the same on every rank, whose method streams start
    alike)."""
    indices = subset.indices.sort().values
    return subset.with_indices(indices[torch.randperm(len(indices), generator=generator).to(indices.device)])


def reference_order(task: UnlearningTask) -> tuple[Subset, Subset]:
    """D_f and D_r in the order the reference's scripts run them, by scenario (the module docstring says which).
    A scenario the reference has no script for keeps pool order."""
    forget, retain = task.splits.forget_train, task.splits.retain_train
    scenario = task.scenario
    if isinstance(scenario, SubClass):
        return grouped(forget, fine_labels(forget)), grouped(retain, fine_labels(retain))
    if isinstance(scenario, FullClass):
        return grouped(forget, forget.labels), grouped(retain, retain.labels)
    if isinstance(scenario, RandomSample):
        generator = task.rng.torch
        forget = shuffled(forget, generator)
        return forget, shuffled(retain, generator)
    return dataset_order(task)


def dataset_order(task: UnlearningTask) -> tuple[Subset, Subset]:
    """D_f and D_r in pool (index) order."""
    forget, retain = task.splits.forget_train, task.splits.retain_train
    return forget.with_indices(forget.indices.sort().values), retain.with_indices(retain.indices.sort().values)


ORDERINGS: dict[str, Callable[[UnlearningTask], tuple[Subset, Subset]]] = {"reference": reference_order,
                                                                            "dataset": dataset_order}


class SSD(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"alpha": AT_LEAST_0, "lam": AT_LEAST_0, "order": Range(choices=ORDERS)}
    deterministic = True
    loss_kind = "cross_entropy"  # the importance's loss (LOSSES) and how gradients accumulate (MAGNITUDES)
    magnitude = "square"
    memo_kind = "ssd_importance"  # the cache's name for I_D

    def __init__(self, name: str, alpha: float | dict = 10.0, lam: float | dict = 1.0, batch_size: int = 64,
                 order: str = "reference") -> None:
        """`alpha`: selection weighting α; `lam`: dampening constant λ (each a value or a mapping by model, dataset
        and scenario); `batch_size`: of the importance passes (the reference's, i.e. the scenario's); `order`: of
        D_f and D_r in those passes, `reference` or `dataset` (the module docstring says what each means)."""
        super().__init__(name)
        if order not in ORDERS:
            raise UserError(f"method {name}: order {order!r} is not valid; valid: {', '.join(ORDERS)}")
        self.alpha, self.lam, self.batch_size, self.order = alpha, lam, batch_size, order
        self.reused_importance_s: tuple[UnlearningTask, float] | None = None
        """For `cost`: the task of the last `unlearn` call and the original computing time of the I_D it took
        from the cache (0 when it computed I_D itself)."""

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        fabric = task.fabric
        if isinstance(fabric.strategy, DeepSpeedStrategy):
            raise UserError(f"method {self.name} needs every parameter's full gradient, which DeepSpeed keeps "
                            f"partitioned; use strategy single, ddp_spawn, ddp or fsdp")
        model = fabric.setup_module(model)
        forget, retain = ORDERINGS[self.order](task)
        full = forget.with_indices(torch.cat([retain.indices, forget.indices]))  # D_r, then D_f
        importance_full, reused_s = self.full_importance(model, task, full)
        importance_forget = self.importance(model, task, forget)
        alpha, lam = setting(self.alpha, task), setting(self.lam, task)
        dampened = dampen(model, importance_forget, importance_full, alpha, lam)
        if fabric.is_global_zero:
            total = sum(p.numel() for _, p in learnable(model))
            log.info(f"{self.name}: {dampened:,} of {total:,} parameter entries selected (I_f > α·I_D) and dampened; "
                     f"α = {alpha}, λ = {lam}, {self.order} order")
        self.reused_importance_s = (task, reused_s)
        return model

    def importance(self, model: nn.Module, task: UnlearningTask, subset: Subset) -> dict[str, Tensor]:
        batches = task.batches(subset, self.batch_size, shuffle=False, training=False)
        return importance(task.fabric, model, batches, self.loss_kind, self.magnitude)

    def full_importance(self, model: nn.Module, task: UnlearningTask, full: Subset) -> tuple[dict[str, Tensor], float]:
        """I_D from the model cache (computed on a miss), and the seconds its computation took if it was a hit. The
        key holds the exact sequence of D (`order` names the rule that made it)."""
        if isinstance(task.fabric.strategy, FSDPStrategy):  # rank-local shards: the cache holds one rank's only
            return self.importance(model, task, full), 0.0
        device = next(p.device for _, p in learnable(model))

        def build() -> tuple[dict[str, Tensor], dict]:
            start = time.perf_counter()
            result = self.importance(model, task, full)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return result, {"time_s": time.perf_counter() - start}

        parts = {"order": self.order, "sequence": tensor_digest(full.indices), "pool": full.pool,
                 "batch_size": self.batch_size, "loss": self.loss_kind, "magnitude": self.magnitude,
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
