"""MUSE's text handling as OpenUnlearning runs it (locuslab/open-unlearning at d3d7cf9): corpora cut into
pretraining chunks, the KnowMem prompt with its in-context examples, and the stop strings a KnowMem answer is cut at.

- **Pretraining chunks** (`src/data/pretraining.py` `PretrainingDataset`, `src/data/utils.py`
  `preprocess_pretraining_instance`): a corpus's texts joined with "\\n\\n", encoded once without special tokens,
  cut into pieces of `max_length` ids, each decoded back to text and encoded again with the tokenizer's special
  tokens; every token is labelled but the first (a chunk has no prefix: "never give loss on index 0"), and a
  chunk is cut at `max_length` ids after the special tokens the tokenizer puts first. OpenUnlearning makes
  ⌊N / max_length⌋ + 1 pieces, so where N is a multiple of `max_length` its last piece is empty, an item with no
  label (a NaN loss); here it is left out.
- **KnowMem prompt** (`src/data/qa.py` with `few_shot_dataset_hf_args`, the `Question: ` / `\\n` / `Answer: ` tags,
  and MUSE's own `metrics/knowmem.py`, character for character): every in-context pair in file order as
  "Question: {q}\\nAnswer: {a}\\n\\n", then "Question: {q}\\nAnswer: ".
- **Stop strings** (`configs/eval/muse_metrics/forget_knowmem_ROUGE.yaml`, `src/evals/metrics/utils.py`
  `eval_text_similarity`; MUSE's `metrics/knowmem.py` the same three): generation stops at "\\n\\n", "\\nQuestion" or
  "Question:", and the decoded text is cut before the first of them (and of the end-of-sequence token's text), then
  stripped; only a tokenizer that cannot write a stop is cut where it writes it instead (`decoded_stops`).
"""

from __future__ import annotations

from collections.abc import Sequence

from unlearnbench.tasks.text.data import IGNORE

KNOWMEM_STOPS = ("\n\n", "\nQuestion", "Question:")


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


def knowmem_prompt(examples: Sequence[dict], question: str) -> str:
    """The in-context pairs (`question`, `answer`) in order, then the question, as MUSE and OpenUnlearning write
    it."""
    shots = "".join(f"Question: {pair['question']}\nAnswer: {pair['answer']}\n\n" for pair in examples)
    return f"{shots}Question: {question}\nAnswer: "


def decoded_stops(tokenizer, stops: Sequence[str] = KNOWMEM_STOPS) -> tuple[str, ...]:
    """The stop strings, and, for each that the tokenizer cannot write, the form it writes instead.

    MUSE (swj0419/muse_bench `metrics/knowmem.py`, `get_prefix_before_words_occur`) and OpenUnlearning
    (`eval_text_similarity`) cut the decoded text at the stop strings themselves, so a tokenizer that writes them
    (Llama's, GPT-2's) is cut at them alone: at "\\nQuestion", never at a bare "Question" inside an answer. A
    tokenizer that reads a stop back as another string holding it (" \\nQuestion") needs nothing more. One that
    cannot write it at all (the built-in word-level tokenizer has no line break: "\\nQuestion" comes back as
    "Question", "Question:" as "Question :") gets its own reading of the stop, unstripped, the only form a
    generated stop takes in its text."""
    read_back = (tokenizer.decode(tokenizer(stop, add_special_tokens=False)["input_ids"]) for stop in stops)
    unwritable = (text for stop, text in zip(stops, read_back, strict=True) if text.strip() and stop not in text)
    return tuple(dict.fromkeys([*stops, *unwritable]))


def cut_at_stops(text: str, stops: Sequence[str] = KNOWMEM_STOPS) -> str:
    """The text before the earliest of `stops`, stripped."""
    end = min((text.find(stop) for stop in stops if stop and stop in text), default=len(text))
    return text[:end].strip()
