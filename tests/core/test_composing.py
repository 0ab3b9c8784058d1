"""Each job's config composed once per sweep (hydra_plugins/unlearnbench_launcher/composing.py): the sweeper's checks,
the launcher and the resume get copies of one composition, equal to Hydra's own."""

from __future__ import annotations

import pickle

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hydra_plugins.unlearnbench_launcher import composing

# The classes are read from the module when used: Hydra's plugin scan executes the plugin modules again, in place.


class Counting:
    """A config loader that composes a small config per override list and counts its compositions."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.repository = "the loader's own"

    def load_sweep_config(self, master_config, sweep_overrides):
        self.calls.append(tuple(sweep_overrides))
        return OmegaConf.create({"job": {"overrides": list(sweep_overrides), "num": None}})


def test_a_job_is_composed_once_and_each_caller_gets_its_own_copy():
    loader = Counting()
    once, master = composing.ComposedOnce(loader), OmegaConf.create({})
    first = once.load_sweep_config(master, ["seeds.train=0"])
    first.job.num = 7  # a launcher sets the job's number in its copy
    again = once.load_sweep_config(master, ["seeds.train=0"])
    assert again.job.num is None and again.job.overrides == ["seeds.train=0"]
    once.load_sweep_config(master, ["seeds.train=1"])
    assert loader.calls == [("seeds.train=0",), ("seeds.train=1",)]
    once.load_sweep_config(OmegaConf.create({}), ["seeds.train=0"])  # another sweep's master: composed afresh
    assert loader.calls[-1] == ("seeds.train=0",) and len(loader.calls) == 3
    assert once.repository == "the loader's own"  # everything else is the wrapped loader's


def test_past_the_kept_configs_each_job_is_composed_every_time(monkeypatch):
    monkeypatch.setattr(composing, "KEPT", 2)
    loader = Counting()
    once, master = composing.ComposedOnce(loader), OmegaConf.create({})
    for _ in range(2):
        for seed in range(3):
            once.load_sweep_config(master, [f"seeds.train={seed}"])
    assert loader.calls.count(("seeds.train=0",)) == 1 and loader.calls.count(("seeds.train=2",)) == 2


def test_a_pickled_loader_carries_no_kept_config():
    once, master = composing.ComposedOnce(Counting()), OmegaConf.create({})
    once.load_sweep_config(master, ["seeds.train=0"])
    copied = pickle.loads(pickle.dumps(once))
    assert copied.composed == {} and copied.master is None and isinstance(copied.loader, Counting)
    copied.load_sweep_config(master, ["seeds.train=0"])
    assert copied.loader.calls == [("seeds.train=0",)] * 2  # the worker's loader composed again, for itself


@pytest.mark.parametrize("overrides", [["+method=finetune", "seeds.train=1"], ["experiment=tofu", "+method=npo"]])
def test_the_kept_composition_is_hydras_and_the_callback_puts_the_loader_back(overrides):
    with initialize_config_module("unlearnbench.conf", version_base="1.3"):
        master = compose("config", return_hydra_config=True)
        hydra = GlobalHydra.instance().hydra
        loader = hydra.config_loader
        composing.ComposeOnce().on_multirun_start(config=master)
        assert isinstance(hydra.config_loader, composing.ComposedOnce) and hydra.config_loader.loader is loader
        kept = [hydra.config_loader.load_sweep_config(master, overrides) for _ in range(2)]
        composing.ComposeOnce().on_multirun_end(config=master)
        assert hydra.config_loader is loader
        fresh = loader.load_sweep_config(master, overrides)
        for config in kept:
            assert OmegaConf.to_container(config) == OmegaConf.to_container(fresh)
