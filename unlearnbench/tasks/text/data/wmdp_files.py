"""WMDP's published files, read from local folders (nothing is downloaded).

- Questions: cais/wmdp's layout, `<root>/wmdp-<subset>/test-*.parquet` (subset bio, cyber or chem), one row per
  question with `question` (a string), `choices` (4 strings) and `answer` (0–3); MMLU-format files have the same
  fields.
- Corpora: `<corpora>/<subset>-forget-corpus.jsonl` and `<subset>-retain-corpus.jsonl`, one text a line. As WMDP's own
  loader reads them (centerforaisafety/wmdp, `rmu/utils.py` `get_data`): a line of `bio-forget-corpus.jsonl` is a JSON
  object whose `text` is the text, every other corpus's line is the text itself; an empty text is skipped (its
  `min_len` of 0 keeps texts longer than 0 characters). Unlike that loader, a line's text ends before its line
  break (WMDP's raw lines keep the "\n").

Every file is checked as it is read, before any model trains: a parquet file that cannot be read or holds no rows, a
corpus with no text, a line that is not UTF-8 (named by its line and column) or not JSON is refused naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from unlearnbench.runtime.errors import UserError, invalid
from unlearnbench.tasks.text.data.corpus import decoded_text, parquet_rows
from unlearnbench.tasks.text.evaluate.multiple_choice import LETTERS

SUBSETS = ("bio", "cyber", "chem")
HUB = "cais/wmdp"


def question_files(root: Path, subset: str) -> list[Path]:
    """The subset's parquet files, or one line naming what is missing and how to get it."""
    if subset not in SUBSETS:
        raise invalid("subset", "dataset wmdp", f"one of {', '.join(SUBSETS)}", repr(subset))
    files = sorted((root / f"wmdp-{subset}").glob("test-*.parquet"))
    if not files:
        raise UserError(f"dataset wmdp: no {root / f'wmdp-{subset}'}/test-*.parquet; put {HUB}'s files there "
                        f"(hf download {HUB} --repo-type dataset --local-dir {root})")
    return files


def read_questions(files: list[Path]) -> list[dict]:
    """Every question of `files`, checked: a non-empty question, 4 string choices, an answer index 0–3."""
    questions = []
    for path in files:
        questions += [question(row, f"file {path}, row {number}") for number, row in enumerate(parquet_rows(path))]
    return questions


def question(row: dict, where: str) -> dict:
    missing = [key for key in ("question", "choices", "answer") if key not in row]
    if missing:
        raise UserError(f"{where}: no {', '.join(map(repr, missing))} field; a multiple-choice row has question, "
                        f"choices and answer")
    text, choices, answer = row["question"], row["choices"], row["answer"]
    if not isinstance(text, str) or not text.strip():
        raise invalid("question", where, "a non-empty string", f"{text!r:.80}", "field")
    if not (isinstance(choices, list) and len(choices) == len(LETTERS) and all(isinstance(c, str) for c in choices)):
        raise invalid("choices", where, f"{len(LETTERS)} strings", f"{choices!r:.80}", "field")
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(LETTERS):
        raise invalid("answer", where, f"an index 0-{len(LETTERS) - 1}", repr(answer), "field")
    subject = {"subject": row["subject"]} if isinstance(row.get("subject"), str) else {}  # MMLU's rows name one
    return {"question": text, "choices": list(choices), "answer": answer, **subject}


def corpus_file(corpora: Path, subset: str, part: str) -> Path:
    path = corpora / f"{subset}-{part}-corpus.jsonl"
    if not path.is_file():
        raise UserError(f"dataset wmdp: no {path}; put WMDP's corpora there (the {subset}-forget-corpus.jsonl and "
                        f"{subset}-retain-corpus.jsonl files of its wmdp-corpora release)")
    return path


def read_corpus(path: Path) -> list[str]:
    """The texts of one corpus file, as WMDP's loader reads it: JSON objects' `text` in bio's forget corpus, the
    lines themselves elsewhere; a file of no text is refused."""
    wrapped = path.name == "bio-forget-corpus.jsonl"
    texts = []
    for number, line in enumerate(decoded_text(path).splitlines(), start=1):
        if not wrapped:
            texts += [line] if line else []
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}, line {number}: not JSON ({error.msg}); each line of bio's forget corpus is an "
                            f"object with a 'text' field") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise UserError(f"{path}, line {number}: no 'text' string; each line of bio's forget corpus is an object "
                            f"with a 'text' field")
        texts += [row["text"]] if row["text"] else []
    if not texts:
        raise UserError(f"{path}: holds no text; each line of a WMDP corpus is one text (use the file of WMDP's "
                        f"wmdp-corpora release)")
    return texts
