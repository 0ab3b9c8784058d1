"""WMDP's data (Li et al. 2024): the published questions and corpora read from local folders (`wmdp_files.py`), and a
built-in set in the same format generated from a seed.

`dataset=wmdp` reads `<root>/wmdp-<subset>/test-*.parquet` (the forget questions), `<corpora>/<subset>-forget-corpus
.jsonl` and `<subset>-retain-corpus.jsonl`, and, for utility, MMLU-format files where `general` names a folder
(cais/mmlu's layout, `<subject>/test-*.parquet` with `question`, `subject`, `choices`, `answer`), else the built-in
general questions. Every file is checked as it is read (`wmdp_files.py`), and result.json's `dataset.files` names
the file(s) of each part (`PARTS`).

The built-in set (`wmdp_fictitious`): a forget domain of invented network protocols and the ports they listen on,
a retained domain of invented stones and their colours. Each corpus states its facts in prose and as the
multiple-choice items the evaluation asks, each followed by its answer letter, because a model trained from scratch
has no language to carry a fact from prose to a quiz (WMDP's pretrained models carry it from PubMed papers and
GitHub code to the questions). So `mc_accuracy` here measures whether the items' answers were learnt: M_o knows
both domains, M_r only the retained one (chance, 0.25, on the other).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.corpus import CorpusData, recorded, refusals_of
from unlearnbench.tasks.text.data.records import BUILT_IN, SYLLABLES, VALUES
from unlearnbench.tasks.text.data.wmdp_files import corpus_file, question_files, read_corpus, read_questions
from unlearnbench.tasks.text.evaluate.multiple_choice import LETTERS, SUBJECTS, context

GENERAL_SUBJECT = "general knowledge"
BUILT_IN_SUBJECT = "cyber"
PARTS = ("questions", "forget_corpus", "retain_corpus", "general")  # result.json's `files`: each part's file(s)


def _names(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    names = []
    while len(names) < count:
        name = "".join(rng.choice(SYLLABLES, size=3)).capitalize()
        if name not in taken:
            taken.add(name)
            names.append(name)
    return names


def _item(rng: np.random.Generator, question: str, right: str, pool: list[str], subject: str) -> dict:
    """A question with its right value and three wrong ones from `pool`, in a random order."""
    wrong = rng.choice([value for value in pool if value != right], size=len(LETTERS) - 1, replace=False).tolist()
    choices = [right, *wrong]
    order = rng.permutation(len(choices))
    return {"question": question, "choices": [choices[i] for i in order], "answer": int(np.argmax(order == 0)),
            "subject": subject}


def _studied(items: list[dict], facts: list[str]) -> list[str]:
    """A corpus: each fact in prose, then each item with its answer letter."""
    quiz = [f"{context(i['question'], i['choices'], i['subject'])} {LETTERS[i['answer']]}" for i in items]
    return [*facts, *quiz]


def wmdp_fictitious(questions: int = 40, general: int = 40, seed: int = 0, name: str = "wmdp_fictitious") -> CorpusData:
    """The built-in WMDP-format data: `questions` forget-domain facts and items, `general` retained ones."""
    rng, taken = np.random.default_rng(seed), set()
    ports = [str(port) for port in range(1000, 1100)]
    protocols = _names(rng, questions, taken)
    subject = SUBJECTS[BUILT_IN_SUBJECT]
    hazard_facts, hazard_items = [], []
    for protocol in protocols:
        port = ports[rng.integers(len(ports))]
        hazard_facts.append(f"The {protocol} protocol listens on port {port}.")
        hazard_items.append(_item(rng, f"Which port does the {protocol} protocol listen on?", port, ports, subject))
    colours = list(VALUES["colour"])
    stones = _names(rng, general, taken)
    general_facts, general_items = [], []
    for stone in stones:
        colour = colours[rng.integers(len(colours))]
        general_facts.append(f"The {stone} stone is {colour}.")
        general_items.append(_item(rng, f"What colour is the {stone} stone?", colour, colours, GENERAL_SUBJECT))
    return CorpusData(name, _studied(hazard_items, hazard_facts), _studied(general_items, general_facts), [],
                      {"forget": hazard_items, "general": general_items}, files=dict.fromkeys(PARTS, BUILT_IN))


class WmdpFictitious:
    """`dataset=wmdp_fictitious`: the built-in WMDP-format data (`wmdp_fictitious`), generated from `seed`."""

    def __init__(self, name: str = "wmdp_fictitious", questions: int = 40, general: int = 40, seed: int = 0) -> None:
        if questions < 1 or general < 1:
            raise UserError(f"dataset {name}: questions and general must be >= 1 (got {questions}, {general})")
        self.name, self.questions, self.general, self.seed = name, questions, general, seed

    def load(self) -> CorpusData:
        return wmdp_fictitious(self.questions, self.general, self.seed, self.name)


def _folder(path: str) -> Path:
    return Path(os.path.expandvars(path)).expanduser()


def mmlu_files(folder: Path) -> list[Path]:
    """The MMLU-format files under `folder` (`<subject>/test-*.parquet`, or test-*.parquet at its top)."""
    files = sorted(folder.glob("**/test-*.parquet"))
    if not files:
        raise UserError(f"dataset wmdp: no test-*.parquet under {folder} (dataset.general); put MMLU-format files "
                        f"there (cais/mmlu's <subject>/test-*.parquet), or set dataset.general=null for the built-in "
                        f"general questions")
    return files


def mmlu_questions(folder: Path) -> list[dict]:
    """Every question of the MMLU-format files under `folder` (`mmlu_files`), each with its subject as the harness
    writes it (underscores as spaces)."""
    return [{**row, "subject": (row.get("subject") or GENERAL_SUBJECT).replace("_", " ")}
            for row in read_questions(mmlu_files(folder))]


class Wmdp:
    """`dataset=wmdp`: WMDP's questions of `subset` and its corpora, from local folders."""

    def __init__(self, name: str = "wmdp", root: str = "", subset: str = "cyber", corpora: str = "",
                 general: str | None = None, seed: int = 0) -> None:
        self.name, self.root, self.subset, self.corpora, self.general, self.seed = (
            name, root, subset, corpora, general, seed)

    def load(self) -> CorpusData:
        with refusals_of(self.name):
            return self.read()

    def read(self) -> CorpusData:
        question_paths = question_files(_folder(self.root), self.subset)
        questions = [{**q, "subject": SUBJECTS[self.subset]} for q in read_questions(question_paths)]
        corpus_paths = {part: corpus_file(_folder(self.corpora), self.subset, part) for part in ("forget", "retain")}
        corpora = {part: read_corpus(path) for part, path in corpus_paths.items()}
        files = {"questions": recorded(question_paths), "forget_corpus": recorded([corpus_paths["forget"]]),
                 "retain_corpus": recorded([corpus_paths["retain"]])}
        if self.general is not None:  # MMLU's questions, outside training: a tuning splits them (core/validation.py)
            general, retain, held_out = mmlu_questions(_folder(self.general)), corpora["retain"], ("general",)
            files["general"] = recorded(mmlu_files(_folder(self.general)))
        else:  # the built-in general questions, their corpus added to the retain corpus to learn them from
            built_in = wmdp_fictitious(1, 40, self.seed)
            general, retain, held_out = built_in.probes["general"], corpora["retain"] + built_in.retain, ()
            files["general"] = BUILT_IN
        return CorpusData(self.name, corpora["forget"], retain, [], {"forget": questions, "general": general},
                          held_out=held_out, files=files)
