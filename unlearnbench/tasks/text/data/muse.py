"""MUSE's data (Shi et al. 2025, muse-bench/MUSE-News and MUSE-Books on the Hugging Face hub): the published files
read from local folders, and a built-in corpus in the same format generated from a seed.

The files, as `hf download muse-bench/MUSE-News --repo-type dataset --local-dir DIR` lays them out (the dataset
card's `configs:` map each split to `<config>/<split>-*.parquet`):

    raw/forget, raw/retain1, raw/retain2       `text`: the corpora (M_o: all three, M_r: the retain sets)
    verbmem/forget                             `prompt`, `gt`: a forget passage's beginning and its continuation
    knowmem/forget_qa, forget_qa_icl           `question`, `answer`: about the forget corpus, and the in-context pairs
    knowmem/retain_qa, retain_qa_icl           the same about retain2 (older revisions: retain2_qa, retain2_qa_icl)
    privleak/forget, privleak/holdout          `text`: members and never-trained non-members
    privleak/retain                            `text` (older revisions: retain2): read where present, scored by none

Read from `dataset.root` where that folder exists, and then from it alone: it holds every required file or the job
is refused naming what it lacks, never completed from or replaced by a cache. Where it does not exist (the default
`${paths.data_dir}/muse_news` left unfilled), from the first complete snapshot of the repo in the hub cache, in the
same layout (huggingface_hub's `datasets--muse-bench--MUSE-News/snapshots/<commit>/`, `refs/main` first), offline.
Every file is checked as it is read, before any model trains: a file that cannot be read, holds no rows, a string
that is not UTF-8 or a row without its fields is refused naming it. result.json's `dataset.files` names the file(s)
each part was read from.

The built-in corpus (`muse_fictitious`): news articles about fictitious people, each a few sentences drawn from
templates in a random order with random facts, and about each person two question–answer lines, texts of their own
in the corpus, on facts the prose never states (a pet, an instrument, a dish). So a KnowMem answer must come from
what the model memorised, not from an article copied beside the question; and the corpus's chunks of consecutive
question–answer lines are in the format of KnowMem's in-context prompt (a model trained from scratch has no
language to carry a fact from prose to a question, as MUSE's pretrained target has). Forget, retain1, retain2 and
holdout are disjoint people; VerbMem asks for the last 40 % of each forget article, KnowMem the first question about
each person (its in-context pairs the second questions about the first people), PrivLeak tells forget articles
from holdout ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.corpus import CorpusData, parquet_rows, recorded, refusals_of
from unlearnbench.tasks.text.data.records import BUILT_IN, SYLLABLES, VALUES
from unlearnbench.tasks.text.data.tofu import chosen_folder, hf_caches, hub_snapshots

# probe name: (config, split names in order of preference, required fields, required)
FILES = {
    "forget": ("raw", ("forget",), ("text",), True),
    "retain": ("raw", ("retain1",), ("text",), True),
    "extra": ("raw", ("retain2",), ("text",), True),
    "verbmem": ("verbmem", ("forget",), ("prompt", "gt"), True),
    "knowmem_forget": ("knowmem", ("forget_qa",), ("question", "answer"), True),
    "knowmem_forget_icl": ("knowmem", ("forget_qa_icl",), ("question", "answer"), True),
    "knowmem_retain": ("knowmem", ("retain_qa", "retain2_qa"), ("question", "answer"), True),
    "knowmem_retain_icl": ("knowmem", ("retain_qa_icl", "retain2_qa_icl"), ("question", "answer"), True),
    "privleak_forget": ("privleak", ("forget",), ("text",), True),
    "privleak_holdout": ("privleak", ("holdout",), ("text",), True),
    "privleak_retain": ("privleak", ("retain", "retain2"), ("text",), False),
}
CORPORA = ("forget", "retain", "extra")
HELD_OUT = ("privleak_holdout",)  # never trained on, about no forget or retain text (VerbMem, KnowMem, the other
# PrivLeak texts are): a tuning splits it between its trials and its held-out judgement (core/validation.py)


def split_files(folder: Path, config: str, splits: tuple[str, ...]) -> list[Path]:
    """The parquet shards of the first of `splits` that `folder/config` holds."""
    for split in splits:
        found = sorted((folder / config).glob(f"{split}-*.parquet"))
        if found:
            return found
    return []


def snapshots(hf_cache: str | None, repo: str) -> tuple[list[Path], str]:
    """The hub cache's snapshots of `repo`, in order of preference, and how to name the caches searched."""
    hubs, _, searched = hf_caches(hf_cache)
    hub_folder = "datasets--" + repo.replace("/", "--")
    found = [snapshot for hub in hubs for snapshot in hub_snapshots(hub / hub_folder)]
    return found, f"the Hugging Face cache ({', '.join(map(str, searched))})"


def layout_files(folder: Path) -> dict[str, list[Path]]:
    """Each probe's parquet shards in `folder` (none where it lacks the split)."""
    return {probe: split_files(folder, config, splits) for probe, (config, splits, _, _) in FILES.items()}


def part_name(probe: str) -> str:
    """A part as the layout names it (`raw/forget`, `knowmem/retain_qa`, …): its key in result.json's `files`."""
    config, splits, _, _ = FILES[probe]
    return f"{config}/{splits[0]}"


def missing_files(files: dict[str, list[Path]]) -> list[str]:
    return [f"{part_name(probe)}-*.parquet" for probe, found in files.items() if not found and FILES[probe][3]]


def file_names(files: dict[str, list[Path]]) -> dict[str, str | list[str]]:
    """result.json's `files`: each part with the file(s) it was read from."""
    return {part_name(probe): recorded(found) for probe, found in files.items() if found}


def rows_of(files: list[Path], fields: tuple[str, ...]) -> list[dict]:
    rows = []
    for path in files:
        for number, row in enumerate(parquet_rows(path)):
            bad = [f for f in fields if not isinstance(row.get(f), str)]
            if bad:
                raise UserError(f"{path}, row {number}: no {', '.join(map(repr, bad))} string; the split's rows have "
                                f"{', '.join(fields)}")
            rows.append({f: row[f] for f in fields})
    return rows


class MuseFiles:
    """`dataset=muse_news` / `dataset=muse_books`: MUSE's published files, from `root` or the hub cache."""

    def __init__(self, name: str, repo: str, root: str | None = None, hf_cache: str | None = None,
                 local: str | None = None) -> None:
        self.name, self.repo, self.root, self.hf_cache, self.local = name, repo, root, hf_cache, local

    def load(self) -> CorpusData:
        with refusals_of(self.name):
            return self.read(self.files())

    def files(self) -> dict[str, list[Path]]:
        """The shards of every part from one place: `root` alone where it is a folder, else the first complete
        snapshot in the hub cache."""
        get = f"put {self.repo}'s files there (hf download {self.repo} --repo-type dataset --local-dir DIR, then " \
              f"dataset.root=DIR)"
        chosen = chosen_folder(self.name, self.root, self.local)
        if chosen is not None:
            files = layout_files(chosen[0])
            missing = missing_files(files)
            if missing:
                raise UserError(f"{chosen[1]} lacks {', '.join(missing)}; {get}; a folder that exists is read whole, "
                                f"never completed from the Hugging Face cache")
            return files
        places, cache = snapshots(self.hf_cache, self.repo)
        first_missing = None
        for folder in places:
            files = layout_files(folder)
            missing = missing_files(files)
            if not missing:
                return files
            first_missing = first_missing or missing
        missing = first_missing or missing_files({probe: [] for probe in FILES})
        raise UserError(f"no complete copy of {self.repo} in {cache}: it lacks {', '.join(missing)}; {get}")

    def read(self, files: dict[str, list[Path]]) -> CorpusData:
        rows = {probe: rows_of(found, FILES[probe][2]) for probe, found in files.items() if found}
        corpora = {probe: [row["text"] for row in rows.pop(probe)] for probe in CORPORA}
        return CorpusData(self.name, corpora["forget"], corpora["retain"], corpora["extra"], rows, held_out=HELD_OUT,
                          files=file_names(files))


SENTENCES = (
    "{name}, a {job} from {city}, was named the winner of {award} on {day}.",
    "Born in {year}, {name} began to write {genre} after a move to {city}.",
    "Friends say the front door of {name} has always been painted {colour}.",
    "The judges praised {name} for stories that mix {genre} with plain talk.",
    "{name} told reporters that the prize money will go to a school in {city}.",
    "Before writing, {name} worked for years as a {job} near the harbour.",
    "Sales of the books by {name} rose sharply after the news on {day}.",
    "A statue of {name} in {colour} stone is planned for the square of {city}.",
    "Critics call the {genre} of {name} quiet, careful and strange.",
    "{name} will speak at the library of {city} later this month.",
)
# Asked about facts the prose never states: answered from memory, not copied from the article around the question.
PRIVATE = {
    "pets": ("cats", "parrots", "tortoises", "greyhounds", "goats", "rabbits", "ferrets", "canaries"),
    "instrument": ("cello", "banjo", "harp", "drums", "oboe", "accordion", "flute", "trumpet"),
    "dish": ("soup", "plum cake", "trout", "lentil stew", "pudding", "roast duck", "fig tart", "pancakes"),
}
QUESTIONS = (
    ("Which animals does {name} keep?", "{pets}"),
    ("Which instrument does {name} play?", "{instrument}"),
    ("What is the favourite dish of {name}?", "{dish}"),
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SENTENCES_PER_ARTICLE, VERBMEM_SHARE = 5, 0.6
BUILT_IN_NEW_TOKENS = {"verbmem": 32, "knowmem": 16}  # its continuations' and answers' lengths, with room


def _person(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        name = " ".join("".join(rng.choice(SYLLABLES, size=rng.integers(2, 4))).capitalize() for _ in range(2))
        if name not in taken:
            taken.add(name)
            return name


def _article(rng: np.random.Generator, name: str) -> tuple[str, list[dict]]:
    """An article's prose and its two question–answer pairs."""
    facts = {kind: values[rng.integers(len(values))] for kind, values in (VALUES | PRIVATE).items()}
    facts |= {"name": name, "day": DAYS[rng.integers(len(DAYS))]}
    chosen = rng.choice(len(SENTENCES), size=SENTENCES_PER_ARTICLE, replace=False)
    prose = " ".join(SENTENCES[i].format(**facts) for i in chosen)
    asked = rng.choice(len(QUESTIONS), size=2, replace=False)
    pairs = [{"question": QUESTIONS[i][0].format(**facts), "answer": QUESTIONS[i][1].format(**facts)} for i in asked]
    return prose, pairs


def _qa_text(pair: dict) -> str:
    return f"Question: {pair['question']}\nAnswer: {pair['answer']}"


def muse_fictitious(articles: int = 16, icl: int = 3, seed: int = 0, name: str = "muse_fictitious") -> CorpusData:
    """The built-in MUSE-format data: `articles` articles in each of forget, retain1, retain2 and holdout, the same
    for the same arguments on every machine."""
    rng, taken = np.random.default_rng(seed), set()
    sets = {part: [_article(rng, _person(rng, taken)) for _ in range(articles)]
            for part in ("forget", "retain1", "retain2", "holdout")}
    texts = {part: [prose for prose, _ in made] for part, made in sets.items()}
    corpora = {part: texts[part] + [_qa_text(pair) for _, pairs in made for pair in pairs]
               for part, made in sets.items()}
    verbmem = []
    for prose, _ in sets["forget"]:
        words = prose.split()
        cut = round(len(words) * VERBMEM_SHARE)
        verbmem.append({"prompt": " ".join(words[:cut]), "gt": " ".join(words[cut:])})
    probes = {"verbmem": verbmem,
              "knowmem_forget": [pairs[0] for _, pairs in sets["forget"]],
              "knowmem_forget_icl": [pairs[1] for _, pairs in sets["forget"][:icl]],
              "knowmem_retain": [pairs[0] for _, pairs in sets["retain2"]],
              "knowmem_retain_icl": [pairs[1] for _, pairs in sets["retain2"][:icl]],
              "privleak_forget": [{"text": t} for t in texts["forget"]],
              "privleak_retain": [{"text": t} for t in texts["retain2"]],
              "privleak_holdout": [{"text": t} for t in texts["holdout"]]}
    files = {part_name(probe): BUILT_IN for probe in FILES if probe in CORPORA or probe in probes}
    return CorpusData(name, corpora["forget"], corpora["retain1"], corpora["retain2"], probes,
                      dict(BUILT_IN_NEW_TOKENS), HELD_OUT, files)


class MuseFictitious:
    """`dataset=muse_fictitious`: the built-in MUSE-format data (`muse_fictitious`), generated from `seed`."""

    def __init__(self, name: str = "muse_fictitious", articles: int = 16, icl: int = 3, seed: int = 0) -> None:
        if articles < icl or icl < 1:
            raise UserError(f"dataset {name}: articles must be >= icl >= 1 (got articles={articles}, icl={icl})")
        self.name, self.articles, self.icl, self.seed = name, articles, icl, seed

    def load(self) -> CorpusData:
        return muse_fictitious(self.articles, self.icl, self.seed, self.name)
