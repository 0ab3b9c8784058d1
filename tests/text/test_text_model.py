"""The text task's model: seeded initialisation, and per-example answer scores against a loop over single examples."""

from __future__ import annotations

import pytest
import torch

from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.model.causal_lm import answer_scores, tiny_llama
from unlearnbench.tasks.text.model.encoding import IGNORE, Template, collate, encode, train_tokenizer


@pytest.fixture(scope="module")
def setting():
    data = fictitious(entities=6, holdout_entities=1, general=4, seed=0)
    template = Template()
    tokenizer = train_tokenizer(data.texts(), template.tags())
    model = tiny_llama(len(tokenizer), seed=0, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id).eval()
    items = [encode(tokenizer, template, r["question"], r["answer"]) for r in data.full + data.world_facts]
    return tokenizer, model, items


def test_the_weights_are_a_function_of_the_seed_alone():
    before = torch.get_rng_state()
    first, again, other = (tiny_llama(50, seed=seed).state_dict() for seed in (7, 7, 8))
    assert torch.equal(torch.get_rng_state(), before)  # the global RNG is neither read for the weights nor moved
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_answer_scores_equal_a_loop_over_single_unpadded_examples(setting):
    tokenizer, model, items = setting
    scores = answer_scores(model, collate(items[:5], tokenizer.pad_token_id))
    for row, item in enumerate(items[:5]):
        ids = torch.tensor(item["input_ids"])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids[None]).logits[0].float(), dim=-1)
        answer = [t for t in range(1, len(ids)) if item["labels"][t] != IGNORE]
        token_logp = torch.stack([logp[t - 1, ids[t]] for t in answer])
        assert scores.tokens[row] == len(answer)
        torch.testing.assert_close(scores.loss[row], -token_logp.mean(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(scores.logprobs[row], token_logp, rtol=1e-5, atol=1e-6)
        assert scores.labels[row].tolist() == [item["input_ids"][t] for t in answer]
        p = logp[[t - 1 for t in answer]].exp()
        mean = (p * p.log()).sum(-1)
        torch.testing.assert_close(scores.mean[row], mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(scores.variance[row], (p * p.log() ** 2).sum(-1) - mean**2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_scores_do_not_change_with_the_batch_size(setting, batch_size):
    tokenizer, model, items = setting
    whole = answer_scores(model, collate(items, tokenizer.pad_token_id))
    parts = [answer_scores(model, collate(items[i:i + batch_size], tokenizer.pad_token_id))
             for i in range(0, len(items), batch_size)]
    torch.testing.assert_close(torch.cat([p.loss for p in parts]), whole.loss, rtol=1e-5, atol=1e-6)
    predictions = [t.tolist() for p in parts for t in p.predictions]
    assert predictions == [t.tolist() for t in whole.predictions]
