"""Config tree: every option composes against the schemas, typos fail at composition, seeds interpolate."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import compose_config
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from unlearnbench.cli import wants_own_mode
from unlearnbench.core.components import build
from unlearnbench.core.config import _subdir_suffix
from unlearnbench.runtime.errors import UserError

CONF = Path(__file__).resolve().parents[2] / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_default_is_the_digits_demo_without_a_method():
    cfg = compose_config([])
    assert (cfg.dataset.name, cfg.model.name, cfg.scenario.name) == ("digits", "resnet18", "full_class")
    assert (cfg.strategy.name, cfg.precision.name, cfg.strategy.devices) == ("single", "32-true", 1)
    assert cfg.method is None
    assert cfg.model.width == 8  # digits asks for a narrow ResNet18; 64 is the reference width
    assert compose_config(["dataset=cifar10"]).model.width == 64


@pytest.mark.parametrize("group", ["dataset", "model", "method", "scenario", "strategy", "precision"])
def test_every_option_composes(group):
    names = options(group)
    assert names, group
    for name in names:
        override = f"+method={name}" if group == "method" else f"{group}={name}"
        cfg = compose_config([override, "paths.data_dir=/data", "paths.cache_dir=/cache"])
        OmegaConf.to_container(cfg[group], resolve=True)  # interpolations resolve
        assert cfg[group].name == name


def test_all_fourteen_precisions_and_seven_strategies_exist():
    assert len(options("precision")) == 14
    assert set(options("strategy")) == {"single", "ddp_spawn", "ddp", "fsdp", "deepspeed_stage_1",
                                        "deepspeed_stage_2", "deepspeed_stage_3"}


def test_seeds_default_to_each_other_and_override_independently():
    cfg = compose_config(["seeds.train=7"])
    assert (cfg.seeds.train, cfg.seeds.unlearn, cfg.seeds.eval) == (7, 7, 7)
    cfg = compose_config(["seeds.train=7", "seeds.unlearn=3"])
    assert (cfg.seeds.train, cfg.seeds.unlearn, cfg.seeds.eval) == (7, 3, 3)


def test_the_forget_seed_follows_the_unlearning_seed_unless_set():
    cfg = compose_config(["seeds.train=7", "seeds.unlearn=3"])
    assert cfg.seeds.forget == 3
    assert compose_config(["seeds.train=7", "seeds.forget=0"]).seeds.forget == 0


def test_the_forget_quality_experiment_numbers_designs_a_and_b_as_one_sweep():
    def cell(job: int) -> tuple[int, int, int]:
        cfg = compose_config(["experiment=forget_quality", f"study.job={job}"])
        return cfg.seeds.train, cfg.seeds.unlearn, cfg.seeds.forget

    cfg = compose_config(["experiment=forget_quality"])
    assert (cfg.scenario.name, cfg.study.I, cfg.study.J, cfg.study.B) == ("random_sample", 3, 32, 32)
    assert [cell(k) for k in (0, 31, 32, 95, 96, 124)] == [(0, 0, 0), (0, 31, 0), (1, 32, 0), (2, 95, 0),
                                                          (3, 96, 0), (31, 992, 0)]  # B: training seeds 3..31, j = 0
    from unlearnbench.core.config import design_jobs

    assert design_jobs(3, 32, 32) == 125 and design_jobs(3, 2, 2) == 6  # B inside A: no job of its own
    with pytest.raises(Exception, match=r"study.job. option of experiment=forget_quality must be in 0..124"):
        cell(125)


@pytest.mark.parametrize("override", ["seeds.trian=1", "train.epoch=3", "scenario.target=[1]", "runtime.thread=2",
                                      "dataset.nmae=x"])
def test_misspelled_key_fails_at_composition(override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_config([override])


@pytest.mark.parametrize("override", ["seeds.train=abc", "train.epochs=many", "strategy.devices=two"])
def test_wrongly_typed_value_fails_at_composition(override):
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_config([override])


def test_unknown_group_option_fails():
    with pytest.raises(ConfigCompositionException, match="method/nope"):
        compose_config(["+method=nope"])


def test_dataset_sets_its_own_recipe_and_command_line_wins():
    assert list(compose_config(["dataset=cifar100"]).train.milestones) == [60, 120, 160]
    assert compose_config(["dataset=cifar100"]).train.epochs == 200
    assert compose_config(["dataset=cifar20"]).train.epochs == 40
    cfg = compose_config(["dataset=cifar10", "train.epochs=3"])
    assert (cfg.train.epochs, cfg.train.lr, cfg.train.batch_size) == (3, 0.1, 64)


def test_method_options_are_checked_against_the_constructor():
    method = OmegaConf.to_container(compose_config(["+method=finetune"]).method, resolve=True)
    assert build(method, "method").lr == 0.02
    with pytest.raises(UserError, match=r"unknown option lrr.*valid options: .*lr"):
        build({**method, "lrr": 1}, "method")


def test_dataset_options_follow_the_base_class():
    dataset = OmegaConf.to_container(compose_config([]).dataset, resolve=True)
    with pytest.raises(UserError, match=r"unknown option test_fractoin.*test_fraction.*mean"):
        build({**dataset, "test_fractoin": 0.3}, "dataset")


def test_slurm_preset_uses_submitit_with_one_task_per_device():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = compose_config(["hydra/launcher=slurm", "strategy=ddp", "strategy.devices=4"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == 4 and launcher.gpus_per_node == 4
    assert launcher.timeout_min > 0
    assert launcher._target_ == "hydra_plugins.unlearnbench_launcher.slurm.SlurmLauncher"
    on_cpus = compose_config(["hydra/launcher=slurm", "strategy=ddp", "runtime.accelerator=cpu"],
                             return_hydra_config=True).hydra.launcher
    assert on_cpus.gpus_per_node == 0 and on_cpus.tasks_per_node == 2  # a CPU partition refuses GPU requests


def test_sweep_folder_names_are_readable_and_distinct():
    cfg = compose_config(["+method=finetune", "seeds.train=3"], return_hydra_config=True)
    assert cfg.hydra.sweep.subdir == "digits_resnet18_full_class_finetune_t3_u3_e3"
    assert compose_config([], return_hydra_config=True).hydra.sweep.subdir.endswith("_all_t0_u0_e0")
    assert _subdir_suffix("") == ""
    assert _subdir_suffix("train.epochs=2") == "_train.epochs=2"
    long = ",".join(f"key{i}=value{i}" for i in range(20))
    assert len(_subdir_suffix(long)) < 60 and _subdir_suffix(long) != _subdir_suffix(long + "x")
    assert "/" not in _subdir_suffix("dataset.root=/a/b")


@pytest.mark.parametrize(("arguments", "expected"), [
    ([], False), (["+method=ssd", "seeds.train=range(11)"], False), (["-m"], True), (["--multirun"], True),
    (["--cfg", "job"], True), (["--help"], True), (["--info"], True), (["-sc", "install=bash"], True),
    (["hydra.mode=RUN"], True),
])
def test_console_script_adds_multirun_unless_asked_otherwise(arguments, expected):
    assert wants_own_mode(arguments) is expected


@pytest.mark.parametrize("overrides", [["dataset=cifar20", "scenario=sub_class", "model=vit"], ["experiment=foltr"]])
def test_a_job_without_method_reads_each_method_config_as_hydra_composes_it(overrides):
    """A job that runs every method reads their YAMLs and puts each into a copy of its own config (milliseconds)
    instead of composing the whole config per method: the same method configs, resolved the same way."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from unlearnbench.core.components import target_of
    from unlearnbench.core.job import method_config
    from unlearnbench.core.plan import scratch_copy

    with initialize_config_module("unlearnbench.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
        loader = GlobalHydra.instance().config_loader()
        names = loader.get_group_options("method")
        assert len(names) == len(options("method"))
        job = scratch_copy(cfg)
        for name in names:
            fast = method_config(job, loader, name)
            composed = compose("config", overrides=[*overrides, f"+method={name}"]).method
            assert OmegaConf.to_container(fast) == OmegaConf.to_container(composed), name
            if target_of(OmegaConf.to_container(fast), "method").task == cfg.task.name:
                assert OmegaConf.to_container(fast, resolve=True) == OmegaConf.to_container(composed, resolve=True)


def test_a_target_in_a_package_python_cannot_find_says_how_to_make_it_importable(tmp_path, monkeypatch):
    from unlearnbench.core.components import build
    from unlearnbench.runtime.errors import UserError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as raised:
        build({"_target_": "mypkg_not_installed.noisy.NoisyFineTune", "name": "noisy"}, "method")
    message = str(raised.value)
    assert message.startswith("method noisy: cannot import _target_ mypkg_not_installed.noisy.NoisyFineTune: ")
    assert "pip install -e DIR" in message and "PYTHONPATH=." in message and str(tmp_path) in message
    missing = r"cannot import _target_ unlearnbench\.tasks\.image\.methods\.finetune\.Missing "
    with pytest.raises(UserError, match=missing):
        build({"_target_": "unlearnbench.tasks.image.methods.finetune.Missing", "name": "missing"}, "method")


@pytest.mark.parametrize(("overrides", "message"), [
    (["evaluation.sampling.k=4", "evaluation.sampling.n=3"],
     "evaluation.sampling.n=3 is not valid; valid: >= evaluation.sampling.k=4 (or null: k)"),
    (["evaluation.sampling.n=0"], "evaluation.sampling.n=0 is not valid; valid: >= 1"),
    (["evaluation.sampling.threshold=1.5"], "evaluation.sampling.threshold=1.5 is not valid; valid: "),
])
def test_leak_sampling_options_are_refused_in_one_line(overrides, message):
    from unlearnbench.core.config import validate

    with pytest.raises(UserError) as error:
        validate(compose_config(["experiment=tofu", *overrides]))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_as_many_draws_as_leak_at_k_picks_and_more_pass():
    from unlearnbench.core.config import validate

    for n in ("null", "4", "200"):
        validate(compose_config(["experiment=tofu", "evaluation.sampling.k=4", f"evaluation.sampling.n={n}"]))
