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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from unlearnbench.runtime.errors import UserError

IGNORE = -100  # the label of a position the loss skips (the prompt, the padding)
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
        if unknown:
            raise ValueError(f"unknown forget entities {sorted(unknown)}: valid are the entities of the full set")
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
    if entities < 2 or holdout_entities < 1 or general < 1:
        raise ValueError(f"fictitious needs entities ≥ 2, holdout_entities ≥ 1 and general ≥ 1, got {entities}, "
                         f"{holdout_entities} and {general}")
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
    """`whole` with eos appended where it does not end with one, labelled IGNORE over `prompt`; a ValueError
    (`not_a_prefix`) where the prompt's ids do not begin the whole's, or where the record exceeds `max_length`."""
    if whole[-1] != tokenizer.eos_token_id:
        whole = [*whole, tokenizer.eos_token_id]
    if whole[:len(prompt)] != prompt or len(whole) == len(prompt):
        raise ValueError(not_a_prefix)
    if len(whole) > max_length:
        raise ValueError(f"the record {question!r} is {len(whole)} tokens long, above max_length={max_length}")
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
