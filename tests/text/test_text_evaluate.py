"""The text task's evaluation, scenario and model loading, in process: metrics that do not move with the evaluation
batch size, forget sets drawn by the forget seed, a chat template's answer-only labels, a local pretrained model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning_fabric import Fabric

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.benchmarks.tofu import TextEvaluator, model_scores
from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.model.causal_lm import CausalLM, tiny_llama
from unlearnbench.tasks.text.model.encoding import IGNORE, encode_chat
from unlearnbench.tasks.text.scenario import ForgetEntities

CHAT = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<assistant> {% endif %}")


@pytest.fixture(scope="module")
def data():
    return fictitious(entities=6, holdout_entities=1, general=3, seed=2)


@pytest.fixture(scope="module")
def lm():
    return CausalLM(hidden=16, heads=2, max_new_tokens=8)


def test_metrics_do_not_change_with_the_evaluation_batch_size(data, lm):
    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    model = tiny_llama(len(tokenizer), 3, hidden=16, heads=2).eval()
    fabric = Fabric(accelerator="cpu", devices=1)
    outputs = [TextEvaluator(fabric, lm.encoder(tokenizer), splits, size, 8).outputs(model) for size in (1, 3, 32)]
    for other in outputs[1:]:
        for split, out in outputs[0].items():
            np.testing.assert_allclose(other[split].loss, out.loss, rtol=1e-5)
            np.testing.assert_allclose(other[split].loss_perturbed, out.loss_perturbed, rtol=1e-5)
            np.testing.assert_array_equal(other[split].rouge, out.rouge)
            for score in out.mia:
                np.testing.assert_allclose(other[split].mia[score], out.mia[score], rtol=1e-5)
    scores = [model_scores(out, outputs[0]) for out in outputs]
    assert all(s.keys() == scores[0].keys() for s in scores)
    # the reference attack's scores of a model against (the same model at another batch size) are float noise
    assert all(s[k] == pytest.approx(scores[0][k], rel=1e-5) for s in scores for k in s
               if s[k] is not None and k[0] != "mia_reference_auc")
    assert scores[0][("mia_reference_auc", "forget")] == 0.5  # every score exactly 0: all ties
    assert scores[0][("forget_quality", "forget")] == 1.0  # a model against itself


def test_a_drawn_forget_set_is_whole_entities_from_the_forget_seed(data):
    draw = ForgetEntities(split=None, count=2)
    first = draw.split(data, torch.Generator().manual_seed(0))
    assert len(first.entities) == 2 and {r["entity"] for r in first.forget} == set(first.entities)
    assert draw.split(data, torch.Generator().manual_seed(0)).entities == first.entities
    assert {draw.split(data, torch.Generator().manual_seed(s)).entities for s in range(6)} != {first.entities}
    assert len(ForgetEntities(split=None, fraction=0.5).split(data, torch.Generator()).entities) == 3
    fixed = ForgetEntities(split="forget05").split(data, torch.Generator())
    assert fixed.entities == tuple(data.entities()[-1:])  # at least one entity, the last
    assert not set(fixed.entities) & {r["entity"] for r in fixed.retain + fixed.retain_eval}
    assert ForgetEntities(split=None, count=1).targets(data) == ["1_entities"]
    with pytest.raises(UserError, match=r"fraction=1.5 is not valid; valid: in \(0, 1\)"):
        ForgetEntities(split=None, fraction=1.5)


def test_a_chat_template_puts_the_assistant_header_in_the_prompt(data, lm):
    tokenizer = lm.tokenizer([*data.texts(), "<system> <user> <assistant> Be brief."])
    tokenizer.chat_template = CHAT
    item = encode_chat(tokenizer, "Where was X born?", "In Avenport.", "Be brief.")
    words = tokenizer.convert_ids_to_tokens(item["input_ids"])
    cut = sum(label == IGNORE for label in item["labels"])
    assert words[:7] == ["<", "system", ">", "Be", "brief", ".", "</s>"]
    assert words[cut - 4:cut] == ["</s>", "<", "assistant", ">"]  # the generation prompt closes the prompt
    answer = tokenizer.convert_ids_to_tokens([t for t in item["labels"] if t != IGNORE])
    assert answer[:4] == ["In", "Avenport", ".", "</s>"]
    assert item["input_ids"][:cut] == CausalLM(chat_template=True, system_prompt="Be brief.").encoder(
        tokenizer).prompt("Where was X born?")


def test_a_local_pretrained_model_and_tokenizer_load_without_a_download(data, lm, tmp_path):
    tokenizer = lm.tokenizer(data.texts())
    tokenizer.chat_template = CHAT
    model = tiny_llama(len(tokenizer), 5, hidden=16, heads=2)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    loaded = CausalLM(pretrained=str(tmp_path / "tiny"), chat_template=True)
    again = loaded.new(loaded.tokenizer([]), seed=0)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values(),
                                                 strict=True))
    assert loaded.identity(tokenizer)["pretrained"] == str(tmp_path / "tiny")
    with pytest.raises(UserError, match=r"cannot load .*nothing is downloaded"):
        CausalLM(pretrained=str(tmp_path / "absent")).tokenizer([])


def test_a_record_longer_than_the_model_takes_is_one_line(data):
    lm = CausalLM(hidden=16, heads=2, max_length=12)
    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    with pytest.raises(UserError, match=r"'max_length' option of model must be at least \d+, the tokens of the "
                       r"record .*; got 12 instead"):
        TextEvaluator(Fabric(accelerator="cpu", devices=1), lm.encoder(tokenizer), splits, 4, 4)


def test_generation_stops_at_every_end_id_of_the_models_generation_config(data, lm):
    """Llama 3.x Instruct ends a turn with any of three ids: a generation stops at the first of the model's
    `generation_config.eos_token_id` (one or a list) or the tokenizer's eos, and is cut there."""
    from unlearnbench.tasks.text.evaluate.generation import end_ids, generate

    tokenizer = lm.tokenizer(data.texts())
    model = tiny_llama(len(tokenizer), 5, hidden=16, heads=2, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id).eval()
    prompt = lm.encoder(tokenizer).prompt(data.full[0]["question"])
    with torch.no_grad():
        ids = list(prompt)
        for _ in range(3):  # the greedy continuation, token by token
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    first, second = ids[len(prompt):len(prompt) + 2]
    assert first != second and tokenizer.eos_token_id not in (first, second)
    fabric = Fabric(accelerator="cpu", devices=1)
    assert end_ids(model, tokenizer) == [tokenizer.eos_token_id]
    model.generation_config.eos_token_id = [second, tokenizer.eos_token_id]
    assert end_ids(model, tokenizer) == [second, tokenizer.eos_token_id]
    assert generate(fabric, model, tokenizer, [prompt], 1, 3) == [tokenizer.decode([first]).strip()]
    model.generation_config.eos_token_id = first
    assert generate(fabric, model, tokenizer, [prompt], 1, 3) == [""]
    wrapped = fabric.setup_module(model)  # read through Fabric's wrapper
    assert end_ids(wrapped, tokenizer) == [first, tokenizer.eos_token_id]


def test_the_true_side_of_the_truth_ratio_is_the_answer_on_the_general_sets_whatever_the_records_carry(data, lm):
    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    carrying = [{**r, "paraphrased_answer": data.full[0]["answer"]} for r in splits.general_authors]
    splits = type(splits)(**{**vars(splits), "general_authors": carrying})
    model = tiny_llama(len(tokenizer), 3, hidden=16, heads=2).eval()
    outputs = TextEvaluator(Fabric(accelerator="cpu", devices=1), lm.encoder(tokenizer), splits, 4, 2).outputs(model)
    np.testing.assert_array_equal(outputs["general_authors"].loss_true, outputs["general_authors"].loss)
    forget = outputs["forget"]
    assert not np.array_equal(forget.loss_true, forget.loss)  # the paraphrase on forget


def test_the_reference_attack_scores_each_answer_by_its_loss_minus_the_retrained_models(data, lm):
    """OpenUnlearning's `mia_reference` with this job's M_r as the reference: s = L̄_model − L̄_ref per example,
    the AUC of forget (members) against holdout, higher scores for non-members; per example in examples.parquet."""
    from unlearnbench.tasks.text.evaluate.examples import TextExamples

    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    fabric = Fabric(accelerator="cpu", devices=1)
    evaluator = TextEvaluator(fabric, lm.encoder(tokenizer), splits, 4, 2)
    model, reference = (evaluator.outputs(tiny_llama(len(tokenizer), seed, hidden=16, heads=2).eval())
                        for seed in (3, 4))
    members = model["forget"].loss - reference["forget"].loss
    others = model["holdout"].loss - reference["holdout"].loss
    pairs = [1.0 if o > m else 0.5 if o == m else 0.0 for m in members for o in others]
    assert model_scores(model, reference)[("mia_reference_auc", "forget")] == pytest.approx(np.mean(pairs))
    table = TextExamples()
    positions = {split: (np.arange(len(model[split].loss)), np.zeros(len(model[split].loss), dtype=np.int64))
                 for split in ("forget", "retain", "holdout")}
    table.add_model("forget10", "original", None, model, positions, reference)
    frame = table.frame()
    np.testing.assert_allclose(frame[frame["split"] == "forget"]["mia_reference"], members)


def test_the_gradnorm_attack_is_the_mean_of_each_parameter_tensors_gradient_norm_per_example(data, lm):
    """OpenUnlearning's `mia_gradnorm` (p = 2, batch 1), written out: per example, the mean answer NLL without the
    last label, one backward pass, the mean over parameter tensors of ‖grad‖₂; frozen parameters count too, and
    their flags come back."""
    from unlearnbench.tasks.text.benchmarks.tofu import gradient_norms

    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    model = tiny_llama(len(tokenizer), 3, hidden=16, heads=2).eval()
    evaluator = TextEvaluator(Fabric(accelerator="cpu", devices=1), lm.encoder(tokenizer), splits, 4, 2,
                              gradnorm=True)
    items = evaluator.items["forget"].answers
    expected = []
    for row in range(3):
        one = {k: v[row:row + 1] for k, v in items.batch.items()}
        width = int(one["attention_mask"].sum())
        ids, labels = one["input_ids"][:, :width], one["labels"][:, :width]
        model.zero_grad()
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        targets = labels[0, 1:]
        positions = (targets != IGNORE).nonzero()[:-1, 0]  # the last label left out
        (-logp[positions, targets[positions]].mean()).backward()
        expected.append(torch.stack([p.grad.double().norm() for p in model.parameters()]).mean().item())
    model.zero_grad()
    model.model.embed_tokens.weight.requires_grad_(False)  # a frozen tensor still takes part
    scores = gradient_norms(model, items)
    np.testing.assert_allclose(scores[:3], expected, rtol=1e-6)
    assert not model.model.embed_tokens.weight.requires_grad and model.model.norm.weight.requires_grad
    assert all(p.grad is None for p in model.parameters())
    outputs = evaluator.outputs(model)
    auc = model_scores(outputs, outputs)[("mia_gradnorm_auc", "forget")]
    pairs = [1.0 if o > m else 0.5 if o == m else 0.0 for m in outputs["forget"].mia["gradnorm"]
             for o in outputs["holdout"].mia["gradnorm"]]
    assert auc == pytest.approx(np.mean(pairs))
    off = TextEvaluator(Fabric(accelerator="cpu", devices=1), lm.encoder(tokenizer), splits, 4, 2).outputs(model)
    assert ("mia_gradnorm_auc", "forget") not in model_scores(off, off)
