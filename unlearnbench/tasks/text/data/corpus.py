"""Corpus benchmarks of the text task (MUSE, WMDP): a forget corpus and a retain corpus trained on as pretraining
text, and the benchmark's own evaluation sets (`probes`).

M_o trains on forget ∪ retain ∪ extra, M_r on retain ∪ extra, each as pretraining chunks of `model.max_length`
tokens (`pretraining.pretraining_chunks`, as OpenUnlearning cuts MUSE's and WMDP's corpora); the methods unlearn the
forget chunks with the retain chunks as their retain set. MUSE's retain1 is `retain` (OpenUnlearning unlearns with
it) and its retain2 `extra` (MUSE's target and retrained models were trained on both); WMDP has no `extra`.

`scenario=forget_corpus` forgets the whole forget corpus: one target, `forget`, fixed by the data (no seed draws
it). A chunk is also a record of the text task's methods: IdkDPO, made for question–answer records, reads the
chunk's first half as its question and the second as its answer (its preferred answer then an "I don't know").
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.model.pretraining import pretraining_chunks

TARGET = "forget"


@dataclass(frozen=True)
class CorpusData:
    """A corpus benchmark's data: the texts of its corpora, and its evaluation sets by name (rows of the published
    files' fields: MUSE's `prompt`/`gt`, `question`/`answer`, `text`; WMDP's `question`/`choices`/`answer`)."""

    name: str
    forget: list[str]
    retain: list[str]
    extra: list[str] = field(default_factory=list)
    probes: dict[str, list[dict]] = field(default_factory=dict)
    new_tokens: dict[str, int] = field(default_factory=dict)  # the longest generation of each probe that generates
    held_out: tuple[str, ...] = ()  # the probes outside training that probe no corpus (non-members, general questions
    # no model trains on): a tuning's trials score one part of each, its held-out judgement the other (`CorpusBench`)
    files: dict[str, str | list[str]] = field(default_factory=dict, compare=False)  # each part's file(s), or
    # BUILT_IN: recorded in result.json (`TextBench.prepare`); no part of the data's identity (`fingerprint`), so a
    # copy of the same files elsewhere keeps its cached models

    def texts(self) -> list[str]:
        """Every string of the corpora and the evaluation sets: what the CPU tokenizer learns its vocabulary from."""
        strings = [*self.forget, *self.retain, *self.extra]
        for rows in self.probes.values():
            for row in rows:
                strings += [v for value in row.values() for v in (value if isinstance(value, list) else [value])
                            if isinstance(v, str)]
        return strings

    def fingerprint(self) -> str:
        content = [self.name, self.forget, self.retain, self.extra, self.probes, self.new_tokens]
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict:
        """The data's identity and sizes, for result.json's `dataset`."""
        return {"name": self.name, "fingerprint": self.fingerprint(), "forget": len(self.forget),
                "retain": len(self.retain), "extra": len(self.extra),
                "probes": {probe: len(rows) for probe, rows in self.probes.items()}}


@dataclass(frozen=True)
class CorpusSplits:
    """What a corpus job trains and unlearns on, as chunk records (`chunk_records`): the forget chunks (D_f), the
    retain chunks (the methods' retain set) and everything M_r trains on (retain and extra)."""

    forget: list[dict]
    retain: list[dict]
    retrained_on: list[dict]
    entities: tuple[str, ...] = ()  # the text task's entity forget sets: none here


def chunk_records(tokenizer, texts: Sequence[str], max_length: int) -> list[dict]:
    """The corpus's pretraining chunks, each a record: its `text`, and its first and second half of words as the
    `question` and `answer` of a method that reads question–answer records (IdkDPO)."""
    records = []
    for chunk in pretraining_chunks(tokenizer, texts, max_length):
        words = chunk.split()
        half = max(1, len(words) // 2)
        records.append({"text": chunk, "question": " ".join(words[:half]), "answer": " ".join(words[half:])})
    return records


class ForgetCorpus:
    """`scenario=forget_corpus`: forget the data's whole forget corpus (one target, `forget`)."""

    targeted = False  # no method is deterministic per target

    def __init__(self, name: str = "forget_corpus") -> None:
        self.name = name

    def targets(self, data: CorpusData) -> list[str]:
        return [TARGET]

    def split(self, tokenizer, data: CorpusData, max_length: int) -> CorpusSplits:
        retain = chunk_records(tokenizer, data.retain, max_length)
        extra = chunk_records(tokenizer, data.extra, max_length) if data.extra else []
        return CorpusSplits(chunk_records(tokenizer, data.forget, max_length), retain, retain + extra)


def recorded(paths: Sequence[Path]) -> str | list[str]:
    """The files a part was read from, as result.json records them: one file's absolute path, or the list of a
    part's shards (links kept: a hub snapshot's file is named, not the blob it links to)."""
    absolute = [os.path.abspath(path) for path in paths]
    return absolute[0] if len(absolute) == 1 else absolute


@contextmanager
def refusals_of(dataset: str) -> Iterator[None]:
    """Every refusal raised while `dataset`'s files are read names the dataset first ("dataset muse_news: …"), as
    the readers' own checks do not know its name."""
    try:
        yield
    except UserError as error:
        message = str(error)
        if message.startswith("dataset "):
            raise
        raise UserError(f"dataset {dataset}: {message}") from None


def decoded_text(path: Path) -> str:
    """A text file's content, refused unless UTF-8 in one line naming the file and the line (and column) of the
    first byte that is not, where Python's own error names neither."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise UserError(f"{path}: line {line} is not UTF-8 (byte 0x{raw[error.start]:02x} at column {column}); save "
                        f"the file as UTF-8, or replace it with the published file") from None


def table_rows(table, path: Path, first: int = 0) -> list[dict]:
    """An Arrow table's rows; a string that is not UTF-8 is refused naming the file, the row (numbered from
    `first`) and the column."""
    try:
        return table.to_pylist()
    except UnicodeDecodeError:
        for row in range(table.num_rows):
            for column in table.column_names:
                try:
                    table.slice(row, 1).column(column).to_pylist()
                except UnicodeDecodeError:
                    raise UserError(f"{path}: row {row + first} is not UTF-8 (its {column!r}); replace the file with "
                                    f"the published one") from None
        raise


def parquet_rows(path: Path) -> list[dict]:
    """A parquet file's rows; one that cannot be read, holds no rows or a string that is not UTF-8 is a UserError
    naming it."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow's and the OS's many errors: all mean this file is unreadable
        raise UserError(f"{path}: cannot be read as parquet ({str(error).splitlines()[0]})") from None
    if not table.num_rows:
        raise UserError(f"{path}: holds no rows; replace it with the published file")
    return table_rows(table, path)
