"""Models of one architecture for one dataset: built from a seed, trained with the recipe, served from the cache."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench import __version__
from unlearnbench.runtime.cache import Entry, ModelCache, cache_key, cached_or_trained, derived_key, tensor_digest
from unlearnbench.runtime.monitor import Cost, CostMonitor
from unlearnbench.runtime.progress import Stage, training
from unlearnbench.runtime.seeding import global_seed, streams
from unlearnbench.runtime.state import full_state_dict
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.train import train_recipe

log = logging.getLogger(__name__)


@dataclass
class Trained:
    """A trained model set up for evaluation, its weights on the CPU, its training cost and where it came from."""

    module: nn.Module
    state: dict[str, Tensor]
    cost: Cost
    cache: dict
    curve: dict | None = None  # per epoch: epoch, loss, train_acc, lr (kept with the cached model; progress.py)


def training_channels_last(device_type: str, configured: bool | None) -> bool:
    """The models' memory layout: `runtime.channels_last`, or when null on for CUDA only (config.Runtime says why)."""
    return configured if configured is not None else device_type == "cuda"


def trained_from_scratch(meta: dict) -> str:
    """How a model the cache did not hold was trained, for its stage's end line."""
    curve = meta.get("curve") or {}
    accuracy = (curve.get("train_acc") or [None])[-1]
    return f"trained, {len(curve.get('epoch') or [])} epochs" + (
        f", final training accuracy {accuracy:.1%}" if accuracy is not None else "")


class ModelStore:
    def __init__(self, fabric: Fabric, factory: Callable[[], nn.Module], cache: ModelCache, normalizer: Normalizer,
                 monitor: CostMonitor, recipe, identity: dict, channels_last: bool = False) -> None:
        """`identity`: everything besides data, seed and stage that determines a trained model (dataset
        fingerprint, model config, recipe, precision, numerics switches); it becomes part of every cache key."""
        self.fabric = fabric
        self.factory = factory
        self.cache = cache
        self.normalizer = normalizer
        self.monitor = monitor
        self.recipe = recipe
        self.identity = {**identity, "version": __version__}
        self.channels_last = channels_last
        with torch.device("meta"):  # names and shapes only: no memory, no draw from any RNG
            reference = factory()
            self.parameter_names = [name for name, _ in reference.named_parameters()]
            self.shapes = {name: tuple(tensor.shape) for name, tensor in reference.state_dict().items()}

    def new(self, seed: int) -> nn.Module:
        """A freshly initialised model: PyTorch's initialisers draw from the global RNG, seeded here for them."""
        with global_seed(seed):
            return self.formatted(self.factory())

    def load(self, state: dict[str, Tensor]) -> nn.Module:
        """A bare model holding `state` (parameters allocated without initialising them first)."""
        with self.fabric.init_module(empty_init=True):
            model = self.factory()
        model.load_state_dict(state)
        return self.formatted(model)

    def formatted(self, model: nn.Module) -> nn.Module:
        """channels_last memory format: the fast path for convolutions on CPUs and with mixed precision on GPUs."""
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def fits(self, entry: Entry) -> bool:
        """Whether a cached state has exactly this model's tensor names and shapes. An entry that does not (written by
        other model code under a colliding key, or copied by hand) would fail every run in `load_state_dict`;
        rejecting it here has it rebuilt instead, like a damaged one."""
        shapes = {name: tuple(tensor.shape) for name, tensor in entry.state.items()}
        if shapes == self.shapes:
            return True
        missing, unexpected = sorted(self.shapes.keys() - shapes.keys()), sorted(shapes.keys() - self.shapes.keys())
        resized = sorted(name for name in self.shapes.keys() & shapes.keys() if self.shapes[name] != shapes[name])
        log.warning("cache entry %s does not fit the model: %d missing tensors %s, %d unexpected %s, %d resized %s",
                    entry.key[:12], len(missing), missing[:3], len(unexpected), unexpected[:3], len(resized),
                    resized[:3])
        return False

    def parameters_of(self, state: dict[str, Tensor]) -> dict[str, Tensor]:
        return {name: state[name] for name in self.parameter_names}

    def trained(self, subset: Subset, stage: str, seed: int, title: str | None = None,
                within: AbstractContextManager[Stage] | None = None) -> Trained:
        """The model trained from scratch on `subset` with the recipe and `seed`, from the cache when it is there.

        `stage` ('original' or 'retrained') names the seed stream: M_o draws from the training seed, M_r from the
        unlearning seed. `title` names the training in the job's log (one line per epoch); its curve is kept in the
        cache entry's metadata, so that a model from the cache still has it. `within` is the job's stage it runs in
        (timed; its end line says where the model came from), none where None.
        """
        indices = torch.sort(subset.indices.cpu()).values
        key = cache_key({**self.identity, "pool": subset.pool, "indices": tensor_digest(indices),
                         "stage": stage, "seed": seed})

        def train() -> tuple[dict[str, Tensor], dict]:
            rng = streams(stage, seed)
            model = self.new(rng.seed)
            with self.monitor.measure() as cost, training(title or f"{stage} model") as run:
                model, accuracy = train_recipe(self.fabric, model, subset, self.recipe, self.normalizer, rng.torch)
            meta = {**cost.as_dict(), "train_s": cost.time_s, "final_train_acc": accuracy, "stage": stage,
                    "seed": seed, "samples": len(subset), "curve": run.curve}
            return full_state_dict(self.fabric, model), meta

        provided = cached_or_trained(self.cache, key, train, within or nullcontext(Stage()), trained_from_scratch,
                                     group=self.group, accept=self.fits)
        state, meta = provided.entry.state, provided.entry.meta
        cost = Cost(meta.get("time_s"), meta.get("memory_gib"), meta.get("utilisation_pct"))
        return Trained(self.fabric.setup_module(self.load(state)), state, cost, provided.record, meta.get("curve"))

    @property
    def group(self) -> Fabric | None:
        """The ranks that build a cache entry together (None for a single process)."""
        return self.fabric if self.fabric.world_size > 1 else None

    def memo(self, model: Trained, kind: str, parts: dict,
             build: Callable[[], tuple[dict[str, Tensor], dict]]) -> Entry:
        """A cached artefact derived from `model` (e.g. SSD's parameter importances), keyed by the model's own key,
        `kind` and `parts` (everything else it depends on), built by `build()` on a miss."""
        return self.cache.get_or_build(derived_key(model.cache["key"], kind, parts), build, group=self.group)
