"""The causal language model of the text task and what an evaluation reads from it, per example.

`tiny_llama` is the CPU default: a small randomly initialised Llama whose every weight is drawn from a generator
seeded by the caller (the training seed for M_o, the unlearning seed for M_r), never from the global RNG.
`answer_scores` runs a right-padded batch once and returns, per example, what every metric of `metrics` needs:
the mean NLL of the answer tokens, their log-probabilities, the mean and variance of log p under the model's own
next-token distribution (Min-K%++) and the argmax predictions (exact memorisation, extraction strength).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from unlearnbench.text.losses import shifted


def tiny_llama(vocab_size: int, seed: int, layers: int = 2, hidden: int = 64, heads: int = 4,
               max_positions: int = 128, pad_token_id: int = 0, bos_token_id: int = 2, eos_token_id: int = 3):
    """A randomly initialised `LlamaForCausalLM`, its weights N(0, 0.02²) (the config's initializer_range, as
    Hugging Face initialises Llama) drawn from `torch.Generator().manual_seed(seed)`; norms at 1."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max_positions, pad_token_id=pad_token_id,
                         bos_token_id=bos_token_id, eos_token_id=eos_token_id, tie_word_embeddings=False,
                         attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):  # Hugging Face's own initialisation draws from the global RNG
        model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                module.weight.normal_(0.0, config.initializer_range, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif hasattr(module, "weight") and module.weight is not None and module.weight.dim() == 1:
                module.weight.fill_(1.0)
    return model


@dataclass
class AnswerScores:
    """Per example of a batch: `loss` (n,), the mean NLL over its labelled tokens; `tokens` (n,), their count; and
    per labelled position (a list of n tensors): `logprobs`, `mean` and `variance` of log p under the model's
    distribution there, `predictions` (argmax) and `labels`."""

    loss: Tensor
    tokens: Tensor
    logprobs: list[Tensor]
    mean: list[Tensor]
    variance: list[Tensor]
    predictions: list[Tensor]
    labels: list[Tensor]


@torch.no_grad()
def answer_scores(model, batch: dict[str, Tensor]) -> AnswerScores:
    """One forward pass over a right-padded batch (`data.collate`); position t predicts label t + 1."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits, labels, labelled = shifted(logits, batch["labels"])
    logp = torch.log_softmax(logits, dim=-1)
    token_logp = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    mean = (p * logp).sum(-1)
    variance = (p * logp.square()).sum(-1) - mean.square()
    predictions = logits.argmax(-1)
    tokens = labelled.sum(1)
    loss = -(token_logp * labelled).sum(1) / tokens.clamp(min=1)
    rows = range(labels.shape[0])
    return AnswerScores(loss=loss, tokens=tokens,
                        logprobs=[token_logp[i][labelled[i]] for i in rows],
                        mean=[mean[i][labelled[i]] for i in rows],
                        variance=[variance[i][labelled[i]] for i in rows],
                        predictions=[predictions[i][labelled[i]] for i in rows],
                        labels=[labels[i][labelled[i]] for i in rows])
