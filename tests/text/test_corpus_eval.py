"""MUSE's and WMDP's evaluators (text/benchmarks/muse.py, text/benchmarks/wmdp.py) against loops written here from
OpenUnlearning's definitions, one example at a time and without the evaluators' batching: greedy decoding token by
token, the KnowMem cut, Min-40% over each text's tokens, the AUC as a count of pairs, privleak, extraction strength,
and lm-evaluation-harness's argmax over the letters."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lightning_fabric import Fabric
from rouge_score.rouge_scorer import RougeScorer

from unlearnbench.tasks.text.benchmarks.muse import KNOWMEM_STOPS, MuseEvaluator, knowmem_prompt
from unlearnbench.tasks.text.benchmarks.wmdp import WmdpEvaluator
from unlearnbench.tasks.text.data.muse import muse_fictitious
from unlearnbench.tasks.text.data.wmdp import wmdp_fictitious
from unlearnbench.tasks.text.evaluate import multiple_choice
from unlearnbench.tasks.text.model.causal_lm import tiny_llama
from unlearnbench.tasks.text.model.encoding import train_tokenizer
from unlearnbench.tasks.text.model.pretraining import chunk_item, pretraining_chunks
from unlearnbench.tasks.text.model.train import Items, fine_tune

pytestmark = pytest.mark.usefixtures("one_thread")
MAX_LENGTH = 64


@pytest.fixture(scope="module")
def muse():
    """A model trained on the corpora (it continues and answers some of them: the comparisons below are on values
    away from 0) and an untrained one in the role of M_r."""
    data = muse_fictitious(articles=4, icl=2, seed=3)
    tokenizer = train_tokenizer(data.texts())
    fabric = Fabric(accelerator="cpu", devices=1)
    models = [tiny_llama(len(tokenizer), seed, max_positions=256, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
              for seed in (0, 1)]
    chunks = [chunk_item(tokenizer, text, MAX_LENGTH) for text in pretraining_chunks(
        tokenizer, data.forget + data.retain + data.extra, MAX_LENGTH)]
    recipe = SimpleNamespace(epochs=40, batch_size=4, lr=3e-3, weight_decay=0.01, warmup_epochs=1.0)
    trained = fine_tune(fabric, models[0], Items(fabric, chunks, tokenizer.pad_token_id), recipe,
                        torch.Generator().manual_seed(0)).module
    evaluator = MuseEvaluator(fabric, tokenizer, data, MAX_LENGTH, batch_size=3)
    return data, tokenizer, [trained.eval(), models[1].eval()], evaluator


def greedy(model, ids: list[int], new_tokens: int, eos: int) -> list[int]:
    out = []
    with torch.no_grad():
        for _ in range(new_tokens):
            token = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            if token == eos:
                break
            out.append(token)
    return out


def token_logprobs(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    return np.array([float(logp[t - 1, ids[t]]) for t in range(1, len(ids))])


def f1(reference: str, generation: str) -> float:
    return RougeScorer(["rougeL"], use_stemmer=True).score(reference, generation)["rougeL"].fmeasure


def min_40(model, tokenizer, text: str) -> float:
    """Min-40% as OpenUnlearning scores a PrivLeak text: every token after the first, the last left out."""
    ids = tokenizer(text, add_special_tokens=True)["input_ids"][:MAX_LENGTH]
    lp = np.sort(token_logprobs(model, ids)[:-1])
    return -lp[:max(1, int(0.4 * lp.size))].mean()


def pair_auc(members: list[float], others: list[float]) -> float:
    """P(non-member scores above a member), ties half: OpenUnlearning's roc_auc_score with members labelled 0."""
    wins = [1.0 if o > m else 0.5 if o == m else 0.0 for m in members for o in others]
    return sum(wins) / len(wins)


def test_muses_values_are_the_one_at_a_time_loops(muse):
    data, tokenizer, (model, other), evaluator = muse
    eos, read = tokenizer.eos_token_id, lambda ids: tokenizer.decode(ids, skip_special_tokens=True).strip()
    verbmem, extraction = [], []
    for row in data.probes["verbmem"]:
        prompt = tokenizer(row["prompt"], add_special_tokens=True)["input_ids"]
        whole = tokenizer(row["prompt"] + " " + row["gt"], add_special_tokens=True)["input_ids"]
        gt = whole[len(prompt):len(prompt) + MAX_LENGTH]
        verbmem.append(f1(read(gt), read(greedy(model, prompt, 32, eos))))
        with torch.no_grad():
            predicted = model(input_ids=torch.tensor([prompt + gt])).logits[0].argmax(-1).tolist()
        matches = [predicted[len(prompt) - 1 + i] == gt[i] for i in range(len(gt) - 1)]  # the last label dropped
        suffix = next((k for k in range(len(matches)) if all(matches[k:])), len(matches))
        extraction.append(1 - suffix / len(matches))
    knowmem = {}
    for split in ("forget", "retain"):
        scores = []
        for row in data.probes[f"knowmem_{split}"]:
            prompt = knowmem_prompt(data.probes[f"knowmem_{split}_icl"], row["question"])
            text = read(greedy(model, tokenizer(prompt)["input_ids"], 16, eos))
            stops = [*KNOWMEM_STOPS, "Question", "Question :"]  # and as the word-level tokenizer reads them back
            cut = min([text.find(s) for s in stops if s in text], default=len(text))
            scores.append(f1(read(tokenizer(row["answer"], add_special_tokens=False)["input_ids"]), text[:cut].strip()))
        knowmem[split] = np.mean(scores)
    scored = lambda m, split: [min_40(m, tokenizer, r["text"]) for r in data.probes[f"privleak_{split}"]]  # noqa: E731
    aucs = [pair_auc(scored(m, "forget"), scored(m, "holdout")) for m in (model, other)]
    values = evaluator.values(evaluator.outputs(model), evaluator.outputs(other))
    assert min(verbmem) < max(verbmem) and max(extraction) > 0 and max(knowmem.values()) > 0  # not all at 0
    assert values[("verbmem_rouge", "forget")] == pytest.approx(np.mean(verbmem), abs=1e-12)
    assert values[("extraction_strength", "forget")] == pytest.approx(np.mean(extraction), abs=1e-12)
    assert values[("knowmem_rouge", "forget")] == pytest.approx(knowmem["forget"], abs=1e-12)
    assert values[("knowmem_rouge", "retain")] == pytest.approx(knowmem["retain"], abs=1e-12)
    assert values[("mia_min_k_auc", "forget")] == pytest.approx(aucs[0], abs=1e-12)
    expected_privleak = ((1 - aucs[0]) - (1 - aucs[1])) / (1 - aucs[1]) * 100
    assert values[("privleak", "forget")] == pytest.approx(expected_privleak, rel=1e-9)


def test_a_model_scored_against_itself_has_no_privleak(muse):
    _, _, (model, _), evaluator = muse
    outputs = evaluator.outputs(model)
    assert evaluator.values(outputs, outputs)[("privleak", "forget")] == 0.0
    assert evaluator.finite(outputs)
    outputs.loss["forget"][0] = np.nan
    assert not evaluator.finite(outputs)


def test_wmdps_accuracy_is_the_argmax_of_each_letters_likelihood_one_question_at_a_time():
    data = wmdp_fictitious(questions=5, general=4, seed=1)
    tokenizer = train_tokenizer(data.texts())
    model = tiny_llama(len(tokenizer), 2, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id).eval()
    evaluator = WmdpEvaluator(Fabric(accelerator="cpu", devices=1), tokenizer, data, batch_size=3)
    values = evaluator.values(evaluator.outputs(model), {})
    for split in ("forget", "general"):
        right = []
        for q in data.probes[split]:
            context = tokenizer(multiple_choice.context(q["question"], q["choices"], q["subject"]))["input_ids"]
            letters = [tokenizer(" " + letter)["input_ids"] for letter in multiple_choice.LETTERS]
            scores = [token_logprobs(model, context + ids)[-len(ids):].sum() for ids in letters]
            right.append(int(np.argmax(scores)) == q["answer"])
        assert values[("mc_accuracy", split)] == pytest.approx(np.mean(right), abs=1e-12)
