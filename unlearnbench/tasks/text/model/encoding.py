"""The text task's encodings: a record's question and answer as a causal LM's ids and labels, through the tag
template (`Template`) or the tokenizer's chat template, the answer-only labels (IGNORE over the prompt), the
batches of padded records (`collate`), and the word-level tokenizer a model trained from scratch learns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from unlearnbench.runtime.errors import UserError, invalid

IGNORE = -100  # the label of a position the loss skips (the prompt, the padding)
SPECIAL = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}


def train_tokenizer(texts: Sequence[str], tags: Sequence[str] = ()):
    """A word-level tokenizer learnt from `texts` (and the template's `tags`), with distinct pad, unk, bos and eos:
    pad ≠ eos, so that a real end of answer is never masked as padding (open-unlearning #128). Word-level, so that
    a prompt's tokens are always a prefix of the prompt-and-answer's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                       pre_tokenizers.Punctuation()])
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values()), min_frequency=1)
    tokenizer.train_from_iterator([*texts, *tags], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL)


@dataclass(frozen=True)
class Template:
    """The tag strings around a question and before its answer (OpenUnlearning's tag branch, e.g. phi-1.5's
    'Question: ' / '\\n' / 'Answer: ')."""

    user_start: str = "Question: "
    user_end: str = "\n"
    assistant_start: str = "Answer: "

    def prompt(self, question: str) -> str:
        return f"{self.user_start}{question}{self.user_end}{self.assistant_start}"

    def tags(self) -> list[str]:
        return [self.user_start, self.user_end, self.assistant_start]


def bos(tokenizer) -> list[int]:
    return [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]


def prompt_ids(tokenizer, template: Template, question: str) -> list[int]:
    """bos (where the tokenizer has one) and the prompt's tokens: what a generation starts from."""
    return [*bos(tokenizer), *tokenizer.encode(template.prompt(question), add_special_tokens=False)]


def encode(tokenizer, template: Template, question: str, answer: str, max_length: int = 512) -> dict[str, list[int]]:
    """One record's `input_ids` and `labels` for an answer-only loss: bos + the prompt's tokens, then the answer's
    and eos; the labels are IGNORE over bos and the prompt and the ids elsewhere, so that the loss falls on the
    answer and its end (OpenUnlearning's `preprocess_chat_instance`). Raises if the prompt's tokens are not a
    prefix of the whole's, where the labels would be wrong."""
    prompt = prompt_ids(tokenizer, template, question)
    whole = [*bos(tokenizer), *tokenizer.encode(template.prompt(question) + answer, add_special_tokens=False)]
    return answer_only(tokenizer, prompt, whole, max_length, question, f"the prompt of {question!r} does not "
                       f"tokenize as a prefix of prompt and answer {answer!r}: choose tags that end at a token "
                       f"boundary")


def answer_only(tokenizer, prompt: list[int], whole: list[int], max_length: int, question: str,
                not_a_prefix: str) -> dict[str, list[int]]:
    """`whole` with eos appended where it does not end with one, labelled IGNORE over `prompt`; a UserError
    (`not_a_prefix`) where the prompt's ids do not begin the whole's, or where the record exceeds `max_length`."""
    if whole[-1] != tokenizer.eos_token_id:
        whole = [*whole, tokenizer.eos_token_id]
    if whole[:len(prompt)] != prompt or len(whole) == len(prompt):
        raise UserError(not_a_prefix)
    if len(whole) > max_length:
        raise invalid("max_length", "model", f"at least {len(whole)}, the tokens of the record {question!r}",
                      max_length)
    return {"input_ids": whole, "labels": [IGNORE] * len(prompt) + whole[len(prompt):]}


def collate(items: Sequence[dict[str, list[int]]], pad_id: int, left: bool = False) -> dict[str, torch.Tensor]:
    """A batch of encoded records: ids padded with `pad_id` (right for training and likelihoods, left for
    generation), labels with IGNORE, attention 0 exactly on the padding."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        span = slice(width - n, width) if left else slice(0, n)
        ids[row, span] = torch.tensor(item["input_ids"])
        labels[row, span] = torch.tensor(item["labels"])
        attention[row, span] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": attention}


def chat_messages(question: str, answer: str | None, system_prompt: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": question})
    return messages + ([{"role": "assistant", "content": answer}] if answer is not None else [])


def chat_ids(tokenizer, messages: list[dict[str, str]], generation_prompt: bool,
             date_string: str | None = None) -> list[int]:
    """The template's ids; `date_string` fixes the date a template would otherwise take from the clock (Llama 3's),
    so that the same record gives the same ids every day."""
    options = {"date_string": date_string} if date_string is not None else {}
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt, **options)
    return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)  # a dict in newer transformers


def chat_prompt(tokenizer, question: str, system_prompt: str | None = None,
                date_string: str | None = None) -> list[int]:
    """The chat template over the system and user turns, with the generation prompt: the assistant's header
    belongs to the prompt."""
    return chat_ids(tokenizer, chat_messages(question, None, system_prompt), True, date_string)


def encode_chat(tokenizer, question: str, answer: str, system_prompt: str | None = None,
                max_length: int = 512, date_string: str | None = None) -> dict[str, list[int]]:
    """`encode` through the tokenizer's chat template (OpenUnlearning's chat branch): the whole conversation without
    the generation prompt, eos appended where it does not end with one, labels IGNORE over the prompt's ids."""
    prompt = chat_prompt(tokenizer, question, system_prompt, date_string)
    whole = chat_ids(tokenizer, chat_messages(question, answer, system_prompt), False, date_string)
    return answer_only(tokenizer, prompt, whole, max_length, question, f"the chat prompt of {question!r} is not a "
                       f"prefix of the whole conversation with answer {answer!r}: the tokenizer's chat template does "
                       f"not fit the answer-only loss")
