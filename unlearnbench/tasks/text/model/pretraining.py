"""MUSE's and WMDP's corpora cut into pretraining items as OpenUnlearning cuts them (locuslab/open-unlearning at
d3d7cf9):

- **Pretraining chunks** (`src/data/pretraining.py` `PretrainingDataset`, `src/data/utils.py`
  `preprocess_pretraining_instance`): a corpus's texts joined with "\\n\\n", encoded once without special tokens,
  cut into pieces of `max_length` ids, each decoded back to text and encoded again with the tokenizer's special
  tokens; every token is labelled but the first (a chunk has no prefix: "never give loss on index 0"), and a
  chunk is cut at `max_length` ids after the special tokens the tokenizer puts first. OpenUnlearning makes
  ⌊N / max_length⌋ + 1 pieces, so where N is a multiple of `max_length` its last piece is empty, an item with no
  label (a NaN loss); here it is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from unlearnbench.tasks.text.model.encoding import IGNORE


def pretraining_chunks(tokenizer, texts: Sequence[str], max_length: int) -> list[str]:
    """The corpus as OpenUnlearning's `PretrainingDataset` cuts it: joined, encoded, cut into `max_length` ids,
    decoded; an empty last piece is left out."""
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(ids[start:start + max_length]) for start in range(0, len(ids), max_length)]


def chunk_item(tokenizer, chunk: str, max_length: int) -> dict[str, list[int]]:
    """A pretraining item: the chunk encoded with special tokens, cut `max_length` ids after what the tokenizer puts
    before any text (BOS, or nothing), every id labelled but those and the first."""
    return completion_item(tokenizer, "", chunk, max_length)


def completion_item(tokenizer, prefix: str, text: str, max_length: int, insert_space: bool = False) -> dict:
    """OpenUnlearning's `CompletionDataset` item (`preprocess_pretraining_instance`): prefix, a space where
    `insert_space` (VerbMem's), and the text, encoded with special tokens and cut `max_length` ids after the
    prefix's own encoding; labelled beyond the prefix's length in ids (beyond the first id where the prefix
    encodes to nothing). Its `prompt` is the prefix's ids, what a generation starts from."""
    prompt = tokenizer(prefix, add_special_tokens=True)["input_ids"]
    ids = tokenizer(prefix + (" " if insert_space else "") + text, add_special_tokens=True)["input_ids"]
    ids = ids[:len(prompt) + max_length]
    unlabelled = max(len(prompt), 1)
    return {"input_ids": ids, "labels": [IGNORE] * unlabelled + ids[unlabelled:], "prompt": prompt}
