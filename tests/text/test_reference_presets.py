"""The reference presets (`experiment=tofu_reference`, `muse_reference`, `wmdp_reference`): each composes without
loading anything, and every value equals OpenUnlearning's published experiment configs (locuslab/open-unlearning at
d3d7cf9), written below as facts with the reference file each comes from; the methods built under each preset take
its unlearning loop, and RMU steers the references' layer 7."""

from __future__ import annotations

import re
import shlex

import pytest
from helpers import REPO, compose_config
from omegaconf import OmegaConf

from unlearnbench.core.components import build, target_of
from unlearnbench.core.method import keyed
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod
from unlearnbench.tasks.text.methods.rmu import steered_layer

# (config key, value, the reference file that sets it); paths under configs/ of locuslab/open-unlearning.
TOFU = [
    ("dataset.name", "tofu", "experiment/unlearn/tofu/default.yaml: data/datasets TOFU_QA_forget, TOFU_QA_retain"),
    ("scenario.split", "forget10", "experiment/unlearn/tofu/default.yaml: forget_split"),
    ("model.pretrained", "meta-llama/Llama-3.2-1B-Instruct", "model/Llama-3.2-1B-Instruct.yaml: model_args"),
    ("model.chat_template", True, "model/Llama-3.2-1B-Instruct.yaml: template_args.apply_chat_template"),
    ("model.system_prompt", "You are a helpful assistant.", "model/Llama-3.2-1B-Instruct.yaml: system_prompt"),
    ("model.date_string", "10 Apr 2025", "model/Llama-3.2-1B-Instruct.yaml: template_args.date_string"),
    ("model.max_length", 512, "data/datasets/TOFU_QA_forget.yaml, TOFU_QA_retain.yaml: max_length"),
    ("model.max_new_tokens", 200, "generation/default.yaml: max_new_tokens"),
    ("precision.name", "bf16-true", "model/Llama-3.2-1B-Instruct.yaml: torch_dtype bfloat16"),
    ("train.epochs", 5, "experiment/finetune/tofu/default.yaml: num_train_epochs"),
    ("train.lr", 1e-5, "experiment/finetune/tofu/default.yaml: learning_rate"),
    ("train.weight_decay", 0.01, "experiment/finetune/tofu/default.yaml: weight_decay"),
    ("train.warmup_epochs", 1.0, "experiment/finetune/tofu/default.yaml: warmup_epochs"),
    ("train.batch_size", 32, "trainer/finetune.yaml: per_device_train_batch_size 8 × gradient_accumulation_steps 4"),
    ("train.optimizer", "adamw", "trainer/finetune.yaml: optim paged_adamw_32bit"),
    ("train.schedule", "linear", "trainer/finetune.yaml: no lr_scheduler_type (the HF Trainer's linear)"),
    ("train.unlearn.epochs", 10, "experiment/unlearn/tofu/default.yaml: num_train_epochs"),
    ("train.unlearn.max_steps", None, "experiment/unlearn/tofu/default.yaml: no max_steps"),
    ("train.unlearn.lr", 1e-5, "experiment/unlearn/tofu/default.yaml: learning_rate"),
    ("train.unlearn.weight_decay", 0.01, "experiment/unlearn/tofu/default.yaml: weight_decay"),
    ("train.unlearn.warmup_epochs", 1.0, "experiment/unlearn/tofu/default.yaml: warmup_epochs"),
    ("train.unlearn.batch_size", 32, "trainer/finetune.yaml: per_device_train_batch_size 8 × accumulation 4"),
    ("train.unlearn.accumulation", 4, "trainer/finetune.yaml: gradient_accumulation_steps"),
    ("train.unlearn.schedule", "linear", "trainer/finetune.yaml: no lr_scheduler_type (the HF Trainer's linear)"),
]
MUSE = [
    ("dataset.name", "muse_news", "experiment/unlearn/muse/default.yaml: data_split News"),
    ("scenario.name", "forget_corpus", "experiment/unlearn/muse/default.yaml: forget_split forget, retain1"),
    ("model.pretrained", "meta-llama/Llama-2-7b-hf", "model/Llama-2-7b-hf.yaml: model_args"),
    ("model.chat_template", False, "model/Llama-2-7b-hf.yaml: template_args.apply_chat_template"),
    ("model.user_start", "Question: ", "model/Llama-2-7b-hf.yaml: user_start_tag"),
    ("model.user_end", "\n", "model/Llama-2-7b-hf.yaml: user_end_tag"),
    ("model.assistant_start", "Answer: ", "model/Llama-2-7b-hf.yaml: asst_start_tag"),
    ("model.max_length", 2048, "data/datasets/MUSE_forget.yaml, MUSE_retain.yaml: max_length"),
    ("precision.name", "bf16-true", "model/Llama-2-7b-hf.yaml: torch_dtype bfloat16"),
    ("train.epochs", 10, "experiment/finetune/muse/default.yaml: num_train_epochs"),
    ("train.lr", 1e-5, "experiment/finetune/muse/default.yaml: learning_rate"),
    ("train.weight_decay", 0.01, "experiment/finetune/muse/default.yaml: weight_decay"),
    ("train.warmup_epochs", 1.0, "experiment/finetune/muse/default.yaml: warmup_epochs"),
    ("train.batch_size", 32, "trainer/finetune.yaml: per_device_train_batch_size 8 × gradient_accumulation_steps 4"),
    ("train.optimizer", "adamw", "trainer/finetune.yaml: optim paged_adamw_32bit"),
    ("train.schedule", "linear", "trainer/finetune.yaml: no lr_scheduler_type (the HF Trainer's linear)"),
    ("train.unlearn.epochs", 10, "experiment/unlearn/muse/default.yaml: num_train_epochs"),
    ("train.unlearn.max_steps", None, "experiment/unlearn/muse/default.yaml: no max_steps"),
    ("train.unlearn.lr", 1e-5, "experiment/unlearn/muse/default.yaml: learning_rate"),
    ("train.unlearn.batch_size", 32, "experiment/unlearn/muse/default.yaml: per_device 4 × accumulation 8"),
    ("train.unlearn.accumulation", 8, "experiment/unlearn/muse/default.yaml: gradient_accumulation_steps"),
    ("train.unlearn.schedule", "constant", "experiment/unlearn/muse/default.yaml: lr_scheduler_type"),
    ("train.unlearn.warmup_epochs", 0.0, "experiment/unlearn/muse/default.yaml: no warmup_epochs"),
    ("train.unlearn.weight_decay", 0.0, "trainer/finetune.yaml: weight_decay 0.00"),
]
WMDP = [
    ("dataset.name", "wmdp", "experiment/unlearn/wmdp/default.yaml: WMDP_forget, WMDP_retain"),
    ("dataset.subset", "cyber", "experiment/unlearn/wmdp/default.yaml: data_split"),
    ("dataset.corpora", "/data/wmdp/wmdp-corpora", "experiment/unlearn/wmdp/default.yaml: data/wmdp/wmdp-corpora/"),
    ("dataset.general", "/data/wmdp/mmlu", "experiment/unlearn/wmdp/default.yaml: lm_eval tasks wmdp_cyber, mmlu"),
    ("scenario.name", "forget_corpus", "experiment/unlearn/wmdp/default.yaml: the whole forget corpus"),
    ("model.pretrained", "HuggingFaceH4/zephyr-7b-beta", "model/zephyr-7b-beta.yaml: model_args"),
    ("model.chat_template", False, "eval/lm_eval.yaml: simple_evaluate_args.apply_chat_template"),
    ("model.max_length", 512, "data/datasets/WMDP_forget.yaml, WMDP_retain.yaml: max_length"),
    ("precision.name", "bf16-true", "model/zephyr-7b-beta.yaml: torch_dtype bfloat16"),
    ("evaluation.add_bos_token", False, "setup.py: lm-eval==0.4.8, whose HF model adds no BOS by default"),
    ("train.unlearn.lr", 5e-5, "experiment/unlearn/wmdp/default.yaml: learning_rate"),
    ("train.unlearn.max_steps", 80, "experiment/unlearn/wmdp/default.yaml: max_steps"),
    ("train.unlearn.schedule", "constant", "experiment/unlearn/wmdp/default.yaml: lr_scheduler_type"),
    ("train.unlearn.batch_size", 16, "experiment/unlearn/wmdp/default.yaml: per_device 1 × accumulation 16"),
    ("train.unlearn.accumulation", 16, "experiment/unlearn/wmdp/default.yaml: gradient_accumulation_steps"),
    ("train.unlearn.warmup_epochs", 0.0, "experiment/unlearn/wmdp/default.yaml: no warmup_epochs"),
    ("train.unlearn.weight_decay", 0.0, "trainer/finetune.yaml: weight_decay 0.00"),
]
PRESETS = {"tofu_reference": TOFU, "muse_reference": MUSE, "wmdp_reference": WMDP}
# (preset, method, the method's resolved options, reference file): each method's own arguments under each preset.
METHOD_ARGUMENTS = [
    ("tofu_reference", "rmu", {"steering_coeff": 2.0, "alpha": 1.0, "gamma": 1.0, "trainable": "all"},
     "trainer/RMU.yaml: method_args (trainable_params_regex .*)"),
    ("wmdp_reference", "rmu", {"steering_coeff": 2.0, "alpha": 1.0, "gamma": 1.0, "trainable": "wmdp"},
     "experiment/unlearn/wmdp/default.yaml: method_args (model\\.layers\\.(5|6|7)\\.mlp\\.down_proj\\.weight)"),
    ("tofu_reference", "pdu", {"gamma": 1.0, "alpha": 1.0, "dual_step_size": 1.0, "retain_loss_eps": 0.3,
                               "primal_dual": True, "dual_update_upon": "step", "dual_warmup_epochs": 5},
     "trainer/PDU.yaml: method_args; retain_loss_eps (??? there) from community/methods/PDU/run.sh"),
    ("tofu_reference", "satimp", {"beta1": 5.0, "beta2": 1.0, "alpha": 1.0, "gamma": 0.1, "retain_loss": "nll"},
     "trainer/SatImp.yaml: method_args"),
    ("tofu_reference", "altpo", {"beta": 0.1, "alpha": 1.0, "gamma": 1.0, "retain_loss": "nll", "repeats": 5,
                                 "temperature": 1.0},
     "trainer/DPO.yaml: method_args; community/methods/AltPO/generate.yaml: repeats, temperature"),
    ("tofu_reference", "npo", {"beta": 0.1, "alpha": 1.0, "gamma": 1.0}, "trainer/NPO.yaml: method_args"),
]
# The decoder layers of each preset's model (its config.json): RMU's `layer: null` resolves on these.
LAYERS = {"tofu_reference": 16, "muse_reference": 32, "wmdp_reference": 32}
PATHS = ["paths.data_dir=/data", "paths.cache_dir=/cache"]


def composed(preset: str, *overrides: str) -> dict:
    return OmegaConf.to_container(compose_config([f"experiment={preset}", *PATHS, *overrides]), resolve=True)


def at(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def built(config: dict, method: dict):
    """The method as the text job builds it: options by model, dataset or scenario resolved; then, for a
    forget–retain method, the job's loop as its `unlearn` takes it."""
    names = (config["model"]["name"], config["dataset"]["name"], config["scenario"]["name"])
    chosen = build({k: keyed(v, names) for k, v in method.items() if k != "tune"}, "method")
    if isinstance(chosen, ForgetRetainMethod):
        chosen.take_loop(config["train"]["unlearn"])
    return chosen


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_sets_every_value_of_the_references_experiment(preset):
    config = composed(preset)
    got = {key: at(config, key) for key, _, _ in PRESETS[preset]}
    assert got == {key: value for key, value, _ in PRESETS[preset]}
    assert config["method"] is None  # every method of the task, as the other presets
    model = build(config["model"], "model")  # composing and building load nothing: a hub id is only a name
    assert model.pretrained == config["model"]["pretrained"]


@pytest.mark.parametrize(("preset", "name", "options", "source"), METHOD_ARGUMENTS,
                         ids=[f"{preset}-{name}" for preset, name, *_ in METHOD_ARGUMENTS])
def test_each_methods_arguments_under_a_preset_are_the_references(preset, name, options, source):
    config = composed(preset, f"+method={name}")
    chosen = built(config, config["method"])
    assert {option: getattr(chosen, option) for option in options} == options, source


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_forget_retain_method_runs_the_presets_loop_and_rmu_steers_layer_7(preset):
    """Every text method's YAML builds under the preset; each forget–retain method takes the preset's loop over its
    own options; RMU's `layer: null` is 7 on the preset's model (16 or 32 decoder layers), as the references'."""
    config = composed(preset)
    loop = {k: v for k, v in config["train"]["unlearn"].items() if v is not None}
    methods = sorted((REPO / "conf" / "method").glob("*.yaml"))
    looped = []
    for path in methods:
        method = OmegaConf.to_container(OmegaConf.load(path))  # another task's may interpolate its job's options
        if target_of(method, "method").task != "text":
            continue
        chosen = built(config, method)
        if isinstance(chosen, ForgetRetainMethod):
            looped.append(chosen.name)
            assert {k: getattr(chosen, k) for k in loop} == loop, chosen.name
        if chosen.name == "rmu":
            assert steered_layer(chosen.layer, LAYERS[preset]) == 7
    assert {"rmu", "pdu", "satimp", "altpo", "npo", "grad_diff"} <= set(looped)


def test_the_loop_left_null_keeps_each_methods_own_options():
    """Outside the presets `train.unlearn` is all null: every method keeps its YAML's loop (its records unchanged)."""
    config = composed("tofu", "+method=npo")
    assert set(config["train"]["unlearn"].values()) == {None}
    chosen = built(config, config["method"])
    assert (chosen.epochs, chosen.max_steps, chosen.batch_size, chosen.accumulation, chosen.schedule) == (
        10, None, 32, 1, "linear")


def test_the_unlearning_loop_is_no_part_of_a_trained_models_cache_key():
    """`train.unlearn` trains no cached model: M_o and M_r keep their keys (those of before the option existed),
    shared by jobs that unlearn differently; a fine-tuning option still moves them."""
    from unlearnbench.tasks.text.options import TextTrain

    plain, looped = composed("tofu")["train"], composed("tofu", "train.unlearn.max_steps=80")["train"]
    assert TextTrain.identity(plain) == TextTrain.identity(looped)
    assert set(TextTrain.identity(plain)) == set(plain) - {"unlearn"}
    assert TextTrain.identity(composed("tofu", "train.epochs=3")["train"]) != TextTrain.identity(plain)


GPU_SECTIONS = {"text.md": "## On a GPU", "text-benchmarks.md": "## On a GPU"}


def preset_commands() -> list[list[str]]:
    """The `unlearnbench experiment=*_reference …` commands of the docs' GPU sections, as override lists."""
    commands = []
    for page, heading in GPU_SECTIONS.items():
        text = (REPO / "docs" / page).read_text()
        section = text[text.index(heading):]
        section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
        for block in re.findall(r"```bash\n(.*?)```", section, re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            commands += [shlex.split(line, comments=True)[1:] for line in joined.splitlines()
                         if line.startswith("unlearnbench experiment=") and "_reference" in line.split()[1]]
    return commands


def first_job(override: str) -> str:
    """A sweep's first job: `seeds.train=range(3)` → `seeds.train=0`."""
    key, _, value = override.partition("=")
    swept = re.fullmatch(r"range\((\d+)(?:,\s*\d+)*\)", value)
    return f"{key}={0 if swept and ',' not in value else swept.group(1)}" if swept else override


def test_the_docs_gpu_commands_of_the_presets_compose():
    """Every preset command of the docs' GPU sections composes and passes the config checks (the launcher, a Hydra
    option, left out; a sweep as its first job)."""
    from unlearnbench.core.config import validate

    commands = preset_commands()
    assert {c[0] for c in commands} == {f"experiment={p}" for p in PRESETS}
    for overrides in commands:
        config = compose_config([first_job(o) for o in overrides if not o.startswith("hydra/")] + PATHS)
        validate(config)
        assert OmegaConf.to_container(config, resolve=True)["model"]["pretrained"], overrides
