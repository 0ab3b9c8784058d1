"""The causal language model of the text task and what an evaluation reads from it, per example.

`tiny_llama` is the CPU default: a small randomly initialised Llama whose every weight is drawn from a generator
seeded by the caller (the training seed for M_o, the unlearning seed for M_r), never from the global RNG.
`answer_scores` runs a right-padded batch once and returns, per example, what every metric of `metrics` needs:
the mean NLL of the answer tokens, their log-probabilities, the mean and variance of log p under the model's own
next-token distribution (Min-K%++) and the argmax predictions (exact memorisation, extraction strength).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from unlearnbench.errors import UserError
from unlearnbench.runtime.seeding import global_seed
from unlearnbench.text.data import IGNORE, Template, chat_prompt, encode, encode_chat, prompt_ids, train_tokenizer
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


class CausalLM:
    """`model=causal_lm`: a Hugging Face causal language model with its tokenizer, and how a record becomes ids.

    With `pretrained` null (the CPU default) the model is `tiny_llama` of `layers` × `hidden`, initialised from the
    seed of the model it becomes, and the tokenizer is learnt from the data's own text (`data.train_tokenizer`).
    With `pretrained` a folder, or a hub id already in the local Hugging Face cache, both are read from there,
    never downloaded. Prompts use the tokenizer's chat template (`chat_template: true`, OpenUnlearning's chat
    branch, with `system_prompt`) or the tag strings (its tag branch)."""

    def __init__(self, name: str = "causal_lm", pretrained: str | None = None, layers: int = 2, hidden: int = 64,
                 heads: int = 4, max_length: int = 128, chat_template: bool = False, system_prompt: str | None = None,
                 user_start: str = "Question: ", user_end: str = "\n", assistant_start: str = "Answer: ",
                 max_new_tokens: int = 32) -> None:
        self.name, self.pretrained = name, pretrained
        self.layers, self.hidden, self.heads, self.max_length = layers, hidden, heads, max_length
        self.chat_template, self.system_prompt = chat_template, system_prompt
        self.template = Template(user_start, user_end, assistant_start)
        self.max_new_tokens = max_new_tokens

    def tokenizer(self, texts: list[str]):
        """The tokenizer: the pretrained one, or one learnt from `texts` and the tag strings."""
        if self.pretrained is None:
            return train_tokenizer(texts, self.template.tags())
        from transformers import AutoTokenizer

        tokenizer = local_pretrained(AutoTokenizer, self.pretrained)
        if tokenizer.pad_token_id is None:  # as OpenUnlearning's get_tokenizer: pad := eos
            tokenizer.pad_token = tokenizer.eos_token
        if self.chat_template and not getattr(tokenizer, "chat_template", None):
            raise UserError(f"model {self.name}: model.chat_template is true but the tokenizer of {self.pretrained} "
                            f"has no chat template; set model.chat_template=false to use the tag strings")
        return tokenizer

    def new(self, tokenizer, seed: int) -> nn.Module:
        """A fresh model: the pretrained weights, or a tiny Llama initialised from `seed`."""
        if self.pretrained is not None:
            from transformers import AutoModelForCausalLM

            with global_seed(seed):  # weights the checkpoint lacks are initialised from the global RNG
                return local_pretrained(AutoModelForCausalLM, self.pretrained, torch_dtype=torch.float32)
        return tiny_llama(len(tokenizer), seed, self.layers, self.hidden, self.heads, self.max_length,
                          tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)

    def identity(self, tokenizer) -> dict:
        """What names the base model and its tokenizer in the cache's keys."""
        vocab = json.dumps(sorted(tokenizer.get_vocab().items()))
        base = {"pretrained": self.pretrained} if self.pretrained is not None else {
            "layers": self.layers, "hidden": self.hidden, "heads": self.heads}
        return {**base, "max_length": self.max_length, "tokenizer": hashlib.sha256(vocab.encode()).hexdigest(),
                "chat_template": self.chat_template, "system_prompt": self.system_prompt,
                "template": self.template.tags()}

    def encoder(self, tokenizer) -> Encoder:
        return Encoder(tokenizer, self.template, self.max_length,
                       self.system_prompt if self.chat_template else None, self.chat_template)


def local_pretrained(loader, source: str, **options):
    """`loader.from_pretrained(source)` from local files only: a folder, or a hub id in the local HF cache."""
    try:
        return loader.from_pretrained(source, local_files_only=True, **options)
    except OSError as error:
        raise UserError(f"cannot load {source} from local files ({str(error).splitlines()[0]}): give model.pretrained "
                        f"as a folder holding the model's config, weights and tokenizer, or a hub id already in the "
                        f"local Hugging Face cache (nothing is downloaded)") from None


@dataclass
class Encoder:
    """Records to ids: training and likelihood items (answer-only labels), and generation prompts."""

    tokenizer: object
    template: Template
    max_length: int
    system_prompt: str | None = None
    chat: bool = False

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def item(self, question: str, answer: str) -> dict[str, list[int]]:
        if not self.chat:
            return encode(self.tokenizer, self.template, question, answer, self.max_length)
        return encode_chat(self.tokenizer, question, answer, self.system_prompt, self.max_length)

    def prompt(self, question: str) -> list[int]:
        """The ids a generation starts from: the prompt part of every item of `question`."""
        if self.chat:
            return chat_prompt(self.tokenizer, question, self.system_prompt)
        return prompt_ids(self.tokenizer, self.template, question)

    def answer_text(self, item: dict[str, list[int]]) -> str:
        """The answer as the tokenizer reads it back (the ROUGE reference, as OpenUnlearning decodes its labels)."""
        return self.tokenizer.decode([t for t in item["labels"] if t != IGNORE], skip_special_tokens=True).strip()
