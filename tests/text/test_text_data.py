"""The text task's data: the built-in generator's records, the CPU tokenizer, answer-only labels and padding."""

from __future__ import annotations

import pytest
import torch

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.model.encoding import IGNORE, Template, collate, encode, train_tokenizer

TEMPLATE = Template()


@pytest.fixture(scope="module")
def data():
    return fictitious(entities=6, holdout_entities=2, general=8, seed=3)


def test_the_generator_is_a_function_of_its_seed(data):
    assert fictitious(entities=6, holdout_entities=2, general=8, seed=3) == data
    assert fictitious(entities=6, holdout_entities=2, general=8, seed=4).full != data.full


def test_records_have_tofus_fields_and_wrong_answers_that_are_wrong(data):
    assert len(data.full) == 6 * 5 * 2 and len(data.holdout) == 2 * 5 * 2
    for record in data.full + data.holdout:
        assert set(record) == {"question", "answer", "paraphrased_answer", "perturbed_answer",
                               "paraphrased_question", "entity"}
        perturbed = record["perturbed_answer"]
        assert len(perturbed) == 5 and len(set(perturbed)) == 5 and record["answer"] not in perturbed
        assert record["paraphrased_answer"] != record["answer"]
        assert record["paraphrased_question"] != record["question"]
    for record in data.real_authors + data.world_facts:
        assert len(record["perturbed_answer"]) == 3 and record["answer"] not in record["perturbed_answer"]
        assert "paraphrased_answer" not in record
    for first, second in zip(data.full[::2], data.full[1::2], strict=True):  # each fact in both wordings
        assert first["question"] == second["question"]
        assert (first["answer"], first["paraphrased_answer"]) == (second["paraphrased_answer"], second["answer"])
    a_sum = data.world_facts[0]
    a, b = (int(word) for word in a_sum["question"].rstrip("?").split()[2::2])
    assert a_sum["answer"] == f"{a} plus {b} is {a + b}."
    assert not {r["entity"] for r in data.holdout} & set(data.entities())


def test_a_forget_set_is_whole_entities_and_the_rest_is_the_retain_set(data):
    chosen = data.entities()[1:3]
    forget, retain = data.split(chosen)
    assert {r["entity"] for r in forget} == set(chosen) and len(forget) == 20
    assert not {r["entity"] for r in retain} & set(chosen)
    assert sorted(map(str, forget + retain)) == sorted(map(str, data.full))
    with pytest.raises(AssertionError, match=r"unknown forget entities \['Nobody'\]"):  # no input reaches it
        data.split(["Nobody"])
    with pytest.raises(AssertionError, match="entities ≥ 2"):  # `Fictitious` refuses them first
        fictitious(entities=1)


def test_labels_mask_the_prompt_and_keep_the_answer_and_its_end_by_hand():
    tokenizer = train_tokenizer(["Who is Ann?", "Ann is a cat."], TEMPLATE.tags())
    special = [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id]
    assert len(set(special)) == 4  # pad ≠ eos
    encoded = encode(tokenizer, TEMPLATE, "Who is Ann?", "Ann is a cat.")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens == ["<s>", "Question", ":", "Who", "is", "Ann", "?", "Answer", ":",
                      "Ann", "is", "a", "cat", ".", "</s>"]
    ids = encoded["input_ids"]
    assert encoded["labels"] == [IGNORE] * 9 + ids[9:]
    assert encoded["labels"][-1] == tokenizer.eos_token_id


def test_a_prompt_that_is_no_token_prefix_is_refused():
    tokenizer = train_tokenizer(["Who is Ann?", "Answer yes"], ["Question: ", "\n"])
    with pytest.raises(UserError, match="does not tokenize as a prefix"):
        encode(tokenizer, Template(assistant_start="Ans"), "Who is Ann?", "wer yes")
    with pytest.raises(UserError, match=r"^the 'max_length' option of model must be at least 11, the tokens of the "
                       r"record 'Who is Ann\?'; got 5 instead$"):
        encode(tokenizer, TEMPLATE, "Who is Ann?", "yes", max_length=5)


def test_padding_right_for_likelihoods_left_for_generation():
    items = [{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    right, left = collate(items, pad_id=0), collate(items, pad_id=0, left=True)
    assert right["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert right["labels"].tolist() == [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]
    assert right["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert left["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert right["input_ids"].dtype == torch.long


def test_every_built_in_record_encodes_with_its_answer_labelled(data):
    tokenizer = train_tokenizer(data.texts(), TEMPLATE.tags())
    for record in data.full + data.real_authors:
        encoded = encode(tokenizer, TEMPLATE, record["question"], record["answer"])
        labelled = [i for i in encoded["labels"] if i != IGNORE]
        answer = tokenizer.encode(record["answer"], add_special_tokens=False)
        assert labelled == [*answer, tokenizer.eos_token_id]
        assert tokenizer.unk_token_id not in encoded["input_ids"]


def test_the_built_in_data_says_built_in_where_files_would_be_named_and_its_identity_is_unchanged(tmp_path):
    """result.json's `dataset.files` (`TextBench.prepare`): "built-in" for each part of generated data; which files
    a part came from is no part of the data's identity, so the built-in presets' cache keys and records stay."""
    from dataclasses import replace

    from helpers import plain_config
    from lightning_fabric import Fabric

    from unlearnbench.core.outcome import Outcome
    from unlearnbench.core.plan import JobPlan
    from unlearnbench.tasks.text.bench import TextBench

    data = fictitious(entities=4, holdout_entities=1, general=2)
    assert data.files == dict.fromkeys(("full", "holdout", "real_authors", "world_facts"), "built-in")
    assert replace(data, files={"full": "/elsewhere/full.json"}).fingerprint() == data.fingerprint()
    outcome = Outcome()
    config = plain_config(["experiment=tofu", "dataset.entities=4", "dataset.general=2"], tmp_path)
    TextBench(Fabric(accelerator="cpu", devices=1), JobPlan(config, [], str(tmp_path)), outcome)
    assert outcome.dataset["files"] == data.files
    assert outcome.dataset["fingerprint"] == fictitious(entities=4, holdout_entities=2, general=2).fingerprint()
