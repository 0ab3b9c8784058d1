"""TOFU-format question–answer records: the built-in generator, the CPU tokenizer, and the answer-only encoding.

A record has TOFU's fields (locuslab/TOFU on the Hugging Face hub): `question`, `answer`, `paraphrased_answer` (the
same fact, other words: the true side of the truth ratio), `perturbed_answer` (the same words, wrong facts: its
false side) and `paraphrased_question`; the general-knowledge sets, like TOFU's `real_authors_perturbed` and
`world_facts_perturbed`, have three perturbed answers and no paraphrase. Records here also name their `entity`,
so that a forget set is made of whole entities, as TOFU's forget01/05/10 are made of whole authors.

`fictitious` writes such records from a seed alone: entities with templated facts, holdout entities no model trains
on (the non-members of the membership attacks), and two general sets that every model trains on, because a
randomly initialised model knows nothing that unlearning should leave intact. Each fact is a record in each of its
two wordings, the other wording its paraphrase: a small model trained from scratch has no language to carry a fact
from one wording to another (a pretrained one fine-tuned on TOFU does), so without this the truth ratio would
measure whether a wording was seen, not whether the fact is known.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from unlearnbench.runtime.errors import UserError

BUILT_IN = "built-in"  # what a dataset's `files` says of a part generated from a seed, read from no file

SYLLABLES = ("ka", "lo", "mi", "ren", "so", "ta", "vel", "dor", "an", "is", "ul", "bra", "ne", "zo", "fi", "gar")
VALUES = {
    "city": ("Avenport", "Belmora", "Caskadia", "Dunmere", "Elswick", "Farrowby", "Glenholt", "Harlow Bay",
             "Ilford Marsh", "Jarrow", "Kestrel Point", "Lindqvist", "Morrowind", "Northam", "Oakhollow"),
    "year": tuple(str(year) for year in range(1931, 1999, 4)),
    "job": ("baker", "surgeon", "pilot", "librarian", "carpenter", "chemist", "sailor", "painter", "farmer",
            "teacher", "jeweller", "architect", "botanist", "tailor", "astronomer"),
    "genre": ("mystery", "poetry", "science fiction", "romance", "history", "fantasy", "horror", "biography",
              "satire", "travel writing", "thriller", "folk tales"),
    "award": ("the Silver Quill", "the Amber Medal", "the Lantern Prize", "the Cobalt Ribbon", "the Heron Award",
              "the Granite Cup", "the Meridian Prize", "the Willow Star", "the Tidewater Honour"),
    "colour": ("red", "blue", "green", "yellow", "violet", "orange", "black", "white", "grey", "brown"),
}
# fact: (value kind, question, answer, paraphrased answer, paraphrased question)
FACTS = (
    ("city", "Where was {name} born?", "{name} was born in {value}.", "The birthplace of {name} is {value}.",
     "In which city was {name} born?"),
    ("year", "In which year was {name} born?", "{name} was born in {value}.",
     "The year of birth of {name} is {value}.", "What is the birth year of {name}?"),
    ("job", "What did the father of {name} do?", "The father of {name} was a {value}.",
     "A {value} by trade was the father of {name}.", "What was the job of the father of {name}?"),
    ("genre", "Which genre does {name} write?", "{name} writes {value}.",
     "The books of {name} are {value}.", "What kind of books does {name} write?"),
    ("award", "Which award did {name} win?", "{name} won {value}.", "The prize won by {name} was {value}.",
     "What prize did {name} receive?"),
)
PERTURBED, GENERAL_PERTURBED = 5, 3  # TOFU's counts: 5 per forget/retain question, 3 for the general sets


def _name(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        parts = ["".join(rng.choice(SYLLABLES, size=rng.integers(2, 4))).capitalize() for _ in range(2)]
        name = " ".join(parts)
        if name not in taken:
            taken.add(name)
            return name


def _wrong(rng: np.random.Generator, kind: str, value: str, count: int) -> list[str]:
    others = [v for v in VALUES[kind] if v != value]
    return [others[i] for i in rng.choice(len(others), size=count, replace=False)]


def _entity_records(rng: np.random.Generator, name: str) -> list[dict]:
    """Each fact twice, once in each wording, the other wording its paraphrase (module docstring)."""
    records = []
    for kind, question, answer, paraphrase, other_question in FACTS:
        value = VALUES[kind][rng.integers(len(VALUES[kind]))]
        wrong = _wrong(rng, kind, value, PERTURBED)
        for said, other in ((answer, paraphrase), (paraphrase, answer)):
            records.append({
                "question": question.format(name=name), "answer": said.format(name=name, value=value),
                "paraphrased_answer": other.format(name=name, value=value),
                "perturbed_answer": [said.format(name=name, value=w) for w in wrong],
                "paraphrased_question": other_question.format(name=name), "entity": name})
    return records


def _sums(rng: np.random.Generator, count: int) -> list[dict]:
    """General knowledge in the role of TOFU's world facts: sums of two numbers."""
    records = []
    for _ in range(count):
        a, b = (int(x) for x in rng.integers(1, 50, size=2))
        wrong = rng.choice([v for v in range(2, 100) if v != a + b], GENERAL_PERTURBED, replace=False)
        records.append({"question": f"What is {a} plus {b}?", "answer": f"{a} plus {b} is {a + b}.",
                        "perturbed_answer": [f"{a} plus {b} is {w}." for w in wrong], "entity": "sums"})
    return records


def _colours(rng: np.random.Generator, count: int) -> list[dict]:
    """General knowledge in the role of TOFU's real authors: the colours of named things."""
    records = []
    for i in range(count):
        thing = f"the {SYLLABLES[i % len(SYLLABLES)]}{SYLLABLES[(i * 7 + 3) % len(SYLLABLES)]} stone {i}"
        colour = VALUES["colour"][rng.integers(len(VALUES["colour"]))]
        records.append({"question": f"What colour is {thing}?", "answer": f"{thing} is {colour}.".capitalize(),
                        "perturbed_answer": [f"{thing} is {w}.".capitalize()
                                             for w in _wrong(rng, "colour", colour, GENERAL_PERTURBED)],
                        "entity": "colours"})
    return records


# IdkDPO's preferred answers: the project's own wording (OpenUnlearning ships its own list, data/idk.jsonl).
IDK_ANSWERS = (
    "I don't know.", "I am not sure.", "I have no idea.", "I cannot say.", "I do not have that information.",
    "That is not something I know.", "I can't answer that.", "I have no record of that.",
    "I am unable to tell you.", "Nothing I know answers that.", "I would only be guessing.",
    "That is beyond what I know.", "I never learnt that.", "I could not tell you.", "I lack that knowledge.",
    "Sorry, I do not know.", "I have nothing on that.", "No answer comes to mind.", "I am not aware of that.",
    "That I cannot recall.",
)
FIXED_SPLITS = {"forget01": 1, "forget05": 5, "forget10": 10}  # TOFU's: the last 1, 5, 10 % of the entities


@dataclass(frozen=True)
class TextData:
    """A TOFU-format dataset: `full` (forget ∪ retain, by entity), `holdout` (never trained on), and the two
    general sets in the roles of TOFU's real authors and world facts.

    `fixed` names the entities of each fixed forget split (TOFU's forget01/05/10); `holdouts` the holdout set of a
    fixed split where the data has one per split (TOFU's holdout01/05/10); `retain_perturbed` the retain records
    the retain-side metrics read where the data fixes them (TOFU's 400-row `retain_perturbed`; otherwise every
    retain record)."""

    full: list[dict]
    holdout: list[dict]
    real_authors: list[dict]
    world_facts: list[dict]
    name: str = "fictitious"
    fixed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    holdouts: dict[str, list[dict]] = field(default_factory=dict)
    retain_perturbed: list[dict] | None = None
    files: dict[str, str | list[str]] = field(default_factory=dict, compare=False)  # each part's file(s), or
    # BUILT_IN: recorded in result.json (`TextBench.prepare`); no part of the data's identity (`fingerprint`), so a
    # copy of the same files elsewhere keeps its cached models

    def entities(self) -> list[str]:
        """The entities of `full`, in order of first appearance."""
        return list(dict.fromkeys(record["entity"] for record in self.full))

    def split(self, forget: Iterable[str]) -> tuple[list[dict], list[dict]]:
        """`full` cut into the records of the `forget` entities and the rest, each in its order in `full`."""
        forget = set(forget)
        unknown = forget - set(self.entities())
        assert not unknown, f"unknown forget entities {sorted(unknown)}: valid are the entities of the full set"
        return ([r for r in self.full if r["entity"] in forget], [r for r in self.full if r["entity"] not in forget])

    def texts(self) -> list[str]:
        """Every string of every record: the corpus the CPU tokenizer learns its vocabulary from."""
        texts = []
        for record in self.full + self.holdout + self.real_authors + self.world_facts:
            for field_name in ("question", "answer", "paraphrased_answer", "paraphrased_question"):
                if record.get(field_name):
                    texts.append(record[field_name])
            texts.extend(record.get("perturbed_answer") or [])
        return texts

    def fingerprint(self) -> str:
        """sha256 of every record and split: the data's identity in the model cache's keys."""
        content = [self.name, self.full, self.holdout, self.real_authors, self.world_facts,
                   {k: list(v) for k, v in self.fixed.items()}, self.holdouts, self.retain_perturbed]
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict:
        """The data's identity and sizes, for result.json's `dataset`."""
        return {"name": self.name, "fingerprint": self.fingerprint(), "full": len(self.full),
                "entities": len(self.entities()), "holdout": len(self.holdout),
                "real_authors": len(self.real_authors), "world_facts": len(self.world_facts)}


def last_entities(entities: Sequence[str], percent: int) -> tuple[str, ...]:
    """TOFU's fixed forget split of `percent` %: the last entities, at least one."""
    return tuple(entities[len(entities) - max(1, round(len(entities) * percent / 100)):])


def fictitious(entities: int = 20, holdout_entities: int = 2, general: int = 20, seed: int = 0) -> TextData:
    """The built-in TOFU-format data, the same for the same arguments on every machine: `entities` × 5 facts,
    `holdout_entities` × 5 facts about entities that are never trained on, and `general` records in each general
    set."""
    assert entities >= 2 and holdout_entities >= 1 and general >= 1, (  # `Fictitious` refuses them first
        f"fictitious needs entities ≥ 2, holdout_entities ≥ 1 and general ≥ 1, got {entities}, {holdout_entities} "
        f"and {general}")
    rng, taken = np.random.default_rng(seed), set()
    names = [_name(rng, taken) for _ in range(entities + holdout_entities)]
    records = [_entity_records(rng, name) for name in names]
    return TextData(full=[r for group in records[:entities] for r in group],
                    holdout=[r for group in records[entities:] for r in group],
                    real_authors=_colours(rng, general), world_facts=_sums(rng, general),
                    fixed={split: last_entities(names[:entities], pct) for split, pct in FIXED_SPLITS.items()},
                    files=dict.fromkeys(("full", "holdout", "real_authors", "world_facts"), BUILT_IN))


class Fictitious:
    """`dataset=fictitious`: the built-in data (`fictitious`), generated from `seed` when a job loads it."""

    def __init__(self, name: str = "fictitious", entities: int = 20, holdout_entities: int = 2, general: int = 20,
                 seed: int = 0) -> None:
        if entities < 2 or holdout_entities < 1 or general < 1:
            raise UserError(f"dataset {name}: entities must be >= 2, holdout_entities and general >= 1 (got "
                            f"{entities}, {holdout_entities}, {general})")
        self.name, self.entities, self.holdout_entities, self.general, self.seed = (
            name, entities, holdout_entities, general, seed)

    def load(self) -> TextData:
        data = fictitious(self.entities, self.holdout_entities, self.general, self.seed)
        return replace(data, name=self.name)
