"""Each job's config composed once per sweep (`ComposeOnce`, a Hydra callback of every run: conf/config.yaml).

Hydra's basic sweeper composes every job's config before it launches a batch (so that an override that does not
compose fails before any job runs), the launcher composes it again to run the job, and this project's launchers and
tuning sweeper once more to find a rerun's complete jobs (resume.py): 0.25 s a composition of this config tree,
against 25 ms for a copy. At the start of a multirun, before Hydra builds the sweeper, the callback wraps the
config loader that Hydra hands to the sweeper and its launcher (`Hydra.config_loader`) in `ComposedOnce`, which keeps
the configs composed for the sweep and hands out copies; at its end it puts the loader back. A launcher's worker
process gets the loader alone and composes for itself.
"""

from __future__ import annotations

import copy
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

KEPT = 256  # configs kept per sweep (about 0.2 MB each); the jobs past them are composed each time, as by Hydra


class ComposedOnce:
    """A config loader whose `load_sweep_config` composes a job's config once per master config and returns a copy
    each time; everything else is the wrapped loader's."""

    def __init__(self, loader) -> None:
        self.loader, self.master, self.composed = loader, None, {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        if master_config is not self.master:
            self.master, self.composed = master_config, {}
        key = tuple(sweep_overrides)
        if key not in self.composed:
            config = self.loader.load_sweep_config(master_config, list(sweep_overrides))
            if len(self.composed) >= KEPT:
                return config
            self.composed[key] = config
        return copy.deepcopy(self.composed[key])

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "master", "composed"):  # not set yet: unpickling
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __getstate__(self) -> dict:
        return {"loader": self.loader, "master": None, "composed": {}}  # a worker composes for itself

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class ComposeOnce(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra = GlobalHydra.instance().hydra
        if hydra is not None and not isinstance(hydra.config_loader, ComposedOnce):
            hydra.config_loader = ComposedOnce(hydra.config_loader)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        hydra = GlobalHydra.instance().hydra
        if hydra is not None and isinstance(hydra.config_loader, ComposedOnce):
            hydra.config_loader = hydra.config_loader.loader
