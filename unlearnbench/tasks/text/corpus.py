"""Corpus benchmarks of the text task (MUSE, WMDP): a forget corpus and a retain corpus trained on as pretraining
text, and the benchmark's own evaluation sets (`probes`).

M_o trains on forget ∪ retain ∪ extra, M_r on retain ∪ extra, each as pretraining chunks of `model.max_length`
tokens (`muse.pretraining_chunks`, as OpenUnlearning cuts MUSE's and WMDP's corpora); the methods unlearn the
forget chunks with the retain chunks as their retain set. MUSE's retain1 is `retain` (OpenUnlearning unlearns with
it) and its retain2 `extra` (MUSE's target and retrained models were trained on both); WMDP has no `extra`.

`scenario=forget_corpus` forgets the whole forget corpus: one target, `forget`, fixed by the data (no seed draws
it). A chunk is also a record of the text task's methods: IdkDPO, made for question–answer records, reads the
chunk's first half as its question and the second as its answer (its preferred answer then an "I don't know").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from unlearnbench.core.errors import UserError
from unlearnbench.tasks.text.muse import pretraining_chunks

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


def parquet_rows(path: Path) -> list[dict]:
    """A parquet file's rows; one that cannot be read is a UserError naming it."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as error:  # pyarrow's and the OS's many errors: all mean this file is unreadable
        raise UserError(f"{path}: cannot be read as parquet ({str(error).splitlines()[0]})") from None
