"""The text task on bad input (issue 40): each case is one line that says what is wrong and what is valid, no
traceback, a failed job, and where the input can be judged before training, nothing trained (an empty cache). The
jobs run in this process (`core.job.execute`) on the built-in data or on TOFU files fabricated here; the report
command runs in this process too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import REPO, plain_config
from lightning_fabric import Fabric
from omegaconf import OmegaConf

from unlearnbench import cli
from unlearnbench.core.components import target_of, type_problems
from unlearnbench.core.job import JobPlan, execute

PER_AUTHOR = 20


def failed_before_training(tmp_path: Path, overrides: list[str]) -> str:
    """The error of a text job that must refuse its input before any training; asserts the refusal's form."""
    config = plain_config(["experiment=tofu", "train.epochs=1", *overrides], tmp_path)
    outcome = execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, [], str(tmp_path)))
    assert outcome.error is not None and outcome.trace is None
    assert "\n" not in outcome.error
    assert not list(tmp_path.glob("cache/*"))  # not even a lock: no model was begun
    return outcome.error


# ------------------------------------------------------------------------------------ options and the model


def test_a_string_where_a_count_is_expected(tmp_path):
    error = failed_before_training(tmp_path, ["dataset.entities=abc"])
    assert error == "dataset fictitious: dataset.entities='abc' is not valid; valid: an integer"


@pytest.mark.parametrize(("target", "options", "problem"), [
    ("unlearnbench.tasks.text.data.records.Fictitious", {"entities": True},
     "dataset.entities=True is not valid; valid: an integer"),
    ("unlearnbench.tasks.text.data.records.Fictitious", {"entities": 4.0},
     "dataset.entities=4.0 is not valid; valid: an integer"),
    ("unlearnbench.tasks.text.scenario.ForgetEntities", {"fraction": "half"},
     "dataset.fraction='half' is not valid; valid: a number or null"),
    ("unlearnbench.tasks.text.model.causal_lm.CausalLM", {"chat_template": "yes"},
     "dataset.chat_template='yes' is not valid; valid: true or false"),
    ("unlearnbench.tasks.image.data.digits.Digits", {"mean": [0.5, "x"]},
     "dataset.mean=[0.5, 'x'] is not valid; valid: a list of numbers"),
    ("unlearnbench.tasks.image.methods.scrub.Scrub", {"epochs": {"default": 3, "digits": "ten"}},
     "dataset.epochs='ten' is not valid; valid: an integer"),
])
def test_a_value_of_the_wrong_type_is_named_with_what_is_valid(target, options, problem):
    assert type_problems(target_of({"_target_": target}, "dataset"), options, "dataset") == [problem]


@pytest.mark.parametrize(("target", "options"), [
    # an int where a float is asked
    ("unlearnbench.tasks.text.scenario.ForgetEntities", {"fraction": 1, "split": None}),
    ("unlearnbench.tasks.text.model.causal_lm.CausalLM", {"lora": {"enabled": True}, "pretrained": None}),
    ("unlearnbench.tasks.image.data.digits.Digits", {"mean": [0, 1], "targets": None}),
    # by dataset (methods' setting)
    ("unlearnbench.tasks.image.methods.scrub.Scrub", {"epochs": {"default": 3, "digits": 10},
                                          "lr_decay_epochs": {"default": [3, 5, 9], "digits": [5, 8, 9]}}),
    ("unlearnbench.tasks.image.methods.ssd.SSD", {"alpha": {"default": 10, "vit": {"full_class": 5}}}),
])
def test_values_of_the_right_type_pass(target, options):
    assert type_problems(target_of({"_target_": target}, "method"), options, "method") == []


def test_every_shipped_component_config_has_values_of_its_types():
    problems = []
    for group in ("dataset", "model", "scenario", "method"):
        for path in sorted((REPO / "conf" / group).glob("*.yaml")):
            loaded = OmegaConf.load(path)
            node = loaded.get(group, loaded)
            if "_target_" not in node:
                continue  # a group option without a component (the ranking task's linear ranker)
            values = OmegaConf.to_container(node, resolve=False)
            options = {key: values[key] for key in node
                       if key != "_target_" and not OmegaConf.is_interpolation(node, key)}
            problems += type_problems(target_of(node, group), options, f"{path.name}: {group}")
    assert problems == []


def test_a_pretrained_folder_without_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    error = failed_before_training(tmp_path, [f"model.pretrained={tmp_path / 'empty'}"])
    assert error == (
        f"cannot load model.pretrained={tmp_path / 'empty'}: the folder holds no model, it lacks config.json, the "
        "weights (model.safetensors, pytorch_model.bin or their shards) and the tokenizer (tokenizer.json, "
        "tokenizer_config.json, tokenizer.model, vocab.json, …); give model.pretrained as a folder holding the "
        "model's config, weights and tokenizer (as save_pretrained writes them), or a hub id (owner/name) already in "
        "the local Hugging Face cache (nothing is downloaded)")


def test_a_pretrained_folder_that_does_not_exist(tmp_path):
    error = failed_before_training(tmp_path, [f"model.pretrained={tmp_path / 'nonexistent'}"])
    assert error.startswith(f"cannot load model.pretrained={tmp_path / 'nonexistent'}: no such folder; give "
                            "model.pretrained as a folder")
    assert error.endswith("or a hub id (owner/name) already in the local Hugging Face cache (nothing is downloaded)")


def test_a_chat_template_the_tokenizer_does_not_have(tmp_path):
    error = failed_before_training(tmp_path, ["model.chat_template=true"])
    assert error == ("model causal_lm: model.chat_template is true but the built-in tokenizer (model.pretrained null) "
                     "has no chat template; set model.chat_template=false to use the tag strings")


def test_lora_targets_the_model_does_not_have(tmp_path):
    error = failed_before_training(tmp_path, ["model.lora.enabled=true", "model.lora.target_modules=[nope_proj]"])
    assert error == ("model causal_lm: model.lora.target_modules has nope_proj, which names no module of the model "
                     "that LoRA can adapt; valid: embed_tokens, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                     "down_proj, lm_head")


def test_lora_targets_given_as_one_string(tmp_path):
    error = failed_before_training(tmp_path, ["model.lora.enabled=true", "model.lora.target_modules=q_proj"])
    assert error == ("model causal_lm: model.lora.target_modules='q_proj' is not valid; valid: a list of the names of "
                     "the modules to adapt, e.g. [q_proj, v_proj]")


@pytest.mark.parametrize("tokens", [0, -3])
def test_no_tokens_to_generate(tmp_path, tokens):
    error = failed_before_training(tmp_path, [f"model.max_new_tokens={tokens}"])
    assert error == f"model causal_lm: model.max_new_tokens={tokens} is not valid; valid: >= 1"


# ------------------------------------------------------------------------------------------------ TOFU files


def qa(author: int, j: int) -> dict:
    return {"question": f"What is fact {j} of writer {author}?", "answer": f"Writer {author} fact {j} is {j}."}


def perturbed(author: int, j: int) -> dict:
    return {**qa(author, j), "paraphrased_answer": f"Fact {j} of writer {author} is {j}.",
            "perturbed_answer": [f"Writer {author} fact {j} is {w + 100}." for w in range(3)]}


def tofu_folder(root: Path, full_authors: range, forget10: list[dict] | None = None,
                full_extra: list[dict] = (), retain: list[dict] | None = None) -> Path:
    """TOFU's required configs as JSON lines: `full` of 20 QA per author (and `full_extra` rows after them),
    forget10_perturbed the last author's rows and retain_perturbed the first author's unless given."""
    configs = {"full": [qa(a, j) for a in full_authors for j in range(PER_AUTHOR)] + list(full_extra),
               "forget10_perturbed": forget10 or [perturbed(full_authors[-1], j) for j in range(PER_AUTHOR)],
               "retain_perturbed": retain or [perturbed(full_authors[0], j) for j in range(PER_AUTHOR)],
               "holdout10": [{"question": f"Hold {i}?", "answer": f"Held {i}."} for i in range(PER_AUTHOR)],
               "real_authors_perturbed": [{"question": "Who?", "answer": "Her.", "perturbed_answer": ["Him."]}],
               "world_facts_perturbed": [{"question": "Where?", "answer": "Here.", "perturbed_answer": ["There."]}]}
    root.mkdir()
    for config, rows in configs.items():
        (root / f"{config}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root


@pytest.fixture
def tofu(tmp_path, monkeypatch):
    """Overrides that read TOFU from a folder made by `tofu_folder(tmp_path / 'tofu', …)`; never the machine's
    Hugging Face cache."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "UNLEARNBENCH_TOFU_DIR"):
        monkeypatch.delenv(name, raising=False)
    return ["dataset=tofu", f"dataset.root={tmp_path / 'tofu'}", "scenario.split=forget10"]


def test_a_forget_split_of_every_author_leaves_nothing_to_retain(tmp_path, tofu):
    forget = [perturbed(a, j) for a in range(2) for j in range(PER_AUTHOR)]
    tofu_folder(tmp_path / "tofu", range(2), forget10=forget)
    error = failed_before_training(tmp_path, tofu)
    assert error == ("scenario forget_entities: split forget10 of dataset tofu holds all 2 entities of its full set, "
                     "which leaves nothing to retain (M_r is trained on the rest); valid: a fixed split that leaves "
                     "at least one entity of full")


def test_a_forget_split_with_a_duplicated_row(tmp_path, tofu):
    forget = [perturbed(2, j) for j in range(PER_AUTHOR)]
    forget[7] = forget[3]  # row 8 repeats row 4, and QA 7 of the author is missing
    tofu_folder(tmp_path / "tofu", range(3), forget10=forget)
    error = failed_before_training(tmp_path, tofu)
    assert error == (f"dataset tofu: {tmp_path / 'tofu'} (dataset.root): forget10_perturbed.json row 8 repeats row 4 "
                     "(question 'What is fact 3 of writer 2?'): a forget split holds each QA of its authors once, and "
                     "another of them is then missing; use the files of one download of locuslab/TOFU")


def test_a_full_set_that_is_not_20_rows_per_author(tmp_path, tofu):
    tofu_folder(tmp_path / "tofu", range(3), full_extra=[qa(9, 0)])
    error = failed_before_training(tmp_path, tofu)
    assert error == (f"dataset tofu: {tmp_path / 'tofu'} (dataset.root): full.json holds 61 rows, not a multiple of "
                     "20: TOFU's full has 20 consecutive rows per author (4,000 for its 200 authors), which is how "
                     "each row's author is known; use the full.json of one download of locuslab/TOFU")


def test_a_tofu_line_that_is_not_utf8_fails_the_job_before_training(tmp_path, tofu):
    root = tofu_folder(tmp_path / "tofu", range(3))
    (root / "holdout10.json").write_bytes(b'{"question": "Hold 0?", "answer": "Held 0."}\n{"question": "\xff"}\n')
    error = failed_before_training(tmp_path, tofu)
    assert error == (f"dataset tofu: {root / 'holdout10.json'}: line 2 is not UTF-8 (byte 0xff at column 15); save the "
                     f"file as UTF-8, or replace it with the published file")


def test_a_retain_perturbed_only_about_forgotten_authors(tmp_path, tofu):
    tofu_folder(tmp_path / "tofu", range(3), retain=[perturbed(2, j) for j in range(PER_AUTHOR)])
    error = failed_before_training(tmp_path, tofu)
    assert error == ("dataset tofu: every row of its retain_perturbed is about an entity of the forget set forget10, "
                     "which leaves the retain metrics nothing to read; forget fewer entities, or use the files of one "
                     "download of TOFU (whose retain_perturbed is about retained authors)")


# ------------------------------------------------------------------------------------------------ the report


def report(monkeypatch, capsys, *arguments: str) -> tuple[int, str]:
    """`unlearnbench-report ARGUMENTS` in this process: its exit status and what it printed."""
    monkeypatch.setattr(sys, "argv", ["unlearnbench-report", *arguments])
    try:
        cli.report_main()
        status = 0
    except SystemExit as exit_:
        status = exit_.code
    printed = capsys.readouterr()
    return status, printed.out + printed.err


@pytest.mark.parametrize("content", [(), ("multirun.yaml", "job_0/main.log")])
def test_the_report_of_a_folder_without_results(tmp_path, monkeypatch, capsys, content):
    for name in content:  # a sweep whose jobs never wrote a result
        (tmp_path / "sweep" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "sweep" / name).write_text("x")
    (tmp_path / "sweep").mkdir(exist_ok=True)
    status, printed = report(monkeypatch, capsys, str(tmp_path / "sweep"))
    assert status == 2 and "Traceback" not in printed
    assert printed == (f"unlearnbench-report: no result.json under {tmp_path / 'sweep'}; give the sweep folder "
                       "(hydra.sweep.dir) whose job folders hold result.json, once a job has finished\n")
    assert not (tmp_path / "sweep" / "report").exists()


def test_the_report_of_failed_jobs_alone_is_still_written(tmp_path, monkeypatch, capsys):
    job = {"task": "text", "dataset": "fictitious", "model": "causal_lm", "scenario": "forget_entities",
           "method": "all", "seed_train": 0, "seed_unlearn": 0, "seed_eval": 0, "strategy": "single",
           "precision": "32-true", "devices": 1}
    (tmp_path / "sweep" / "job").mkdir(parents=True)
    (tmp_path / "sweep" / "job" / "result.json").write_text(json.dumps(
        {"schema": 1, "status": "failed", "error": "dataset fictitious: broken", "job": job, "records": []}))
    status, printed = report(monkeypatch, capsys, str(tmp_path / "sweep"), "--no-figures")
    assert status == 0 and "FAILED job: dataset fictitious: broken" in printed
    assert (tmp_path / "sweep" / "report" / "report.md").is_file()
