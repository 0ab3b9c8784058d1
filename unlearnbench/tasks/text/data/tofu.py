"""TOFU (the Hugging Face hub dataset locuslab/TOFU) read from local files only: nothing is ever downloaded.

Layouts read, in this order (the first that holds every required config is used, and only it; a `dataset.root`
that exists is the only place read: it holds every required config or the job is refused naming what it lacks, never
completed from or replaced by a cache):

1. `dataset.root`, a folder of TOFU's files by config name, as the hub repo names them: `full.json`,
   `forget10_perturbed.json`, `holdout10.json`, … at its top. The dataset card's `configs:` map each config to
   `<config>.json` at the repo's top (seen in the card's history at huggingface.co/datasets/locuslab/TOFU, up to the
   January 2024 `perturbed` commit; the holdout configs came later: their names are OpenUnlearning's
   `hf_args.name: holdout10` in configs/data/datasets/TOFU_MIA.yaml, their `.json` file names inferred from the
   others). The files are JSON lines, one object per line, as in locuslab/tofu's `data/*_perturbed.json`; a JSON
   array is read too, and so are `<config>.jsonl`, `<config>.parquet` and a folder `<config>/` of parquet shards
   (read in name order, e.g. the hub's parquet conversion).
2. The hub cache's snapshot of the repo, in the same layout: `HUB/datasets--locuslab--TOFU/snapshots/<commit>/`,
   the snapshot that `refs/main` names first, then the others, newest first (huggingface_hub's `repo_folder_name`,
   REPO_ID_SEPARATOR "--", and the refs/snapshots folders of `hf_hub_download`, in huggingface_hub/file_download.py).
   HUB is `hf_cache` (or its `hub/`), else `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, or `HF_HOME/hub` with HF_HOME
   defaulting to `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface` (huggingface_hub/constants.py).
3. The `datasets` library's cache of `load_dataset("locuslab/TOFU", config)`:
   `DS/locuslab___tofu/<config>/<version>/<hash>/tofu-train.arrow`, or its shards `tofu-train-NNNNN-of-NNNNN.arrow`
   (`Builder._relative_data_dir` `namespace___dataset_name/config_id/version/hash`, the dataset name snake-cased,
   and `naming.filenames_for_dataset_split`, in huggingface/datasets src/datasets/builder.py and naming.py); the
   `<config>-<hash>` folders of datasets 2.14/2.15 (`_check_legacy_cache2`) are read too. The files are Arrow IPC
   streams (`ArrowWriter` writes with `pa.RecordBatchStreamWriter`), read here with pyarrow alone. DS is
   `hf_cache` (or its `datasets/`), else `HF_DATASETS_CACHE` or `HF_HOME/datasets` (datasets/config.py).

Every file is checked as it is read, before any model trains: one that cannot be parsed, holds no rows, has a line
that is not UTF-8 (named by its line and column) or a row without TOFU's fields is refused naming it. result.json's
`dataset.files` names the file(s) each config was read from.

Required configs: `full`, `retain_perturbed`, `real_authors_perturbed`, `world_facts_perturbed`, and at least one
fixed split, the pair `forgetXX_perturbed` + `holdoutXX` (XX = 01, 05, 10); the plain forget/retain configs are
subsets of `full` and are not read.

TOFU names no author. Its 200 authors have 20 consecutive QA each in `full` (4,000 rows; third-party code recovers
authors as `index // 20` and checks the 20-row blocks), so row i of `full` is about `author_{i // 20:03d}`. A row of
another config is about the author of the `full` row with the same question and answer (the question alone where
the answers differ); holdout rows, about authors absent from `full`, get `holdout_author_{i // 20:03d}` within their
config.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.corpus import decoded_text, recorded, refusals_of, table_rows
from unlearnbench.tasks.text.data.records import TextData

REPO = "locuslab/TOFU"
HUB_FOLDER = "datasets--locuslab--TOFU"  # huggingface_hub: f"{repo_type}s--{owner}--{name}"
DATASETS_FOLDER = "locuslab___tofu"  # datasets: f"{namespace}___{snake_case(name)}"
ARROW_STEM = "tofu-train"  # datasets: f"{dataset_name}-{split}" (TOFU's configs have the one split `train`)
PER_AUTHOR = 20
PERCENTS = ("01", "05", "10")
GENERAL = {"real_authors_perturbed": "real_authors", "world_facts_perturbed": "world_facts"}
REQUIRED = ("full", "retain_perturbed", *GENERAL)
FIELDS = ("question", "answer", "paraphrased_answer", "perturbed_answer", "paraphrased_question")
EXTRA = ("paraphrased_answer", "perturbed_answer", "paraphrased_question")  # what `full` lacks and gets merged in
NEEDS = {"retain_perturbed": ("paraphrased_answer", "perturbed_answer"), **{g: ("perturbed_answer",) for g in GENERAL},
         **{f"forget{p}_perturbed": ("paraphrased_answer", "perturbed_answer") for p in PERCENTS}}


def _pairs(has) -> list[str]:
    """The percents whose fixed split is complete: forgetXX_perturbed and holdoutXX both present."""
    return [p for p in PERCENTS if has(f"forget{p}_perturbed") and has(f"holdout{p}")]


@dataclass(frozen=True)
class Folder:
    """A folder of TOFU's files named by config: `dataset.root`, or a hub snapshot (the repo's own layout)."""

    path: Path
    label: str

    def files(self, config: str) -> list[Path]:
        for name in (f"{config}.json", f"{config}.jsonl", f"{config}.parquet"):
            if (self.path / name).is_file():
                return [self.path / name]
        return sorted(p for p in (self.path / config).glob("**/*.parquet") if p.is_file())

    def shown(self, config: str) -> str:
        return f"{config}.json"


@dataclass(frozen=True)
class ArrowCache:
    """The `datasets` cache of locuslab/TOFU: one folder per config, one build (version/hash) or more in each."""

    path: Path
    label: str

    def files(self, config: str) -> list[Path]:
        """The shards of the most recently written build of `config`."""
        name = re.compile(rf"{re.escape(config)}(-[0-9a-f]+)?")  # the config id, with 2.14/2.15's hash suffix
        folders = [d for d in self.path.iterdir() if d.is_dir() and name.fullmatch(d.name)]
        builds: dict[Path, list[Path]] = {}
        for folder in folders:
            for shard in folder.glob(f"*/*/{ARROW_STEM}*.arrow"):
                builds.setdefault(shard.parent, []).append(shard)
        if not builds:
            return []
        newest = max(builds, key=lambda build: max(shard.stat().st_mtime for shard in builds[build]))
        return sorted(builds[newest])

    def shown(self, config: str) -> str:
        return config


def _home() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(os.path.expandvars(os.environ.get("HF_HOME") or str(default))).expanduser()


def hf_caches(hf_cache: str | None) -> tuple[list[Path], list[Path], list[Path]]:
    """The hub caches and the `datasets` caches to look in, and the folders to name when neither holds TOFU:
    `hf_cache` as any of HF_HOME, a hub cache or a datasets cache (so that whichever folder a user names works),
    else where the two libraries put them by default."""
    if hf_cache:
        base = Path(os.path.expandvars(hf_cache)).expanduser()
        return [base, base / "hub"], [base, base / "datasets"], [base]
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or str(_home() / "hub")
    datasets = os.environ.get("HF_DATASETS_CACHE") or str(_home() / "datasets")
    hubs, caches = [Path(os.path.expandvars(hub)).expanduser()], [Path(os.path.expandvars(datasets)).expanduser()]
    return hubs, caches, [*hubs, *caches]


def hub_snapshots(repo: Path) -> list[Path]:
    """A hub repo folder's snapshots: the one `refs/main` names first, then the others, newest first."""
    folder = repo / "snapshots"
    found = [d for d in folder.iterdir() if d.is_dir()] if folder.is_dir() else []
    found.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    main = repo / "refs" / "main"
    commit = main.read_text().strip() if main.is_file() else ""
    return sorted(found, key=lambda d: d.name != commit)  # stable: the rest keep their order


def chosen_folder(name: str, root: str | None, local: str | None) -> tuple[Path, str] | None:
    """The one folder a dataset is read from, whole, with its label: `dataset.root` where one is given (its
    `UNLEARNBENCH_*_DIR` variable or the option), refused where it is no folder; else `dataset.local` (the project's
    data folder) where it is a folder; else None: the Hugging Face caches are searched. A given root is never
    replaced by a cache: a mistyped path would otherwise read other files in silence."""
    if root:
        folder = Path(os.path.expandvars(root)).expanduser()
        if not folder.is_dir():
            raise UserError(f"dataset {name}: dataset.root {root} is no folder; a given dataset.root is read "
                            f"whole, never replaced by the Hugging Face cache: give a folder of the files, or unset "
                            f"dataset.root to read {local or 'the data folder'} or the cache")
        return folder, f"{root} (dataset.root)"
    folder = Path(os.path.expandvars(local)).expanduser() if local else None
    return (folder, f"{local} (dataset.local)") if folder is not None and folder.is_dir() else None


def _caches(hf_cache: str | None) -> tuple[list[Folder | ArrowCache], list[Path]]:
    """Where in the Hugging Face caches TOFU may lie, in order of preference, and the cache folders searched."""
    hubs, caches, searched = hf_caches(hf_cache)
    sources: list[Folder | ArrowCache] = []
    for hub in hubs:
        sources += [Folder(s, f"hub snapshot {s}") for s in hub_snapshots(hub / HUB_FOLDER)]
    for cache in caches:
        if (cache / DATASETS_FOLDER).is_dir():
            sources.append(ArrowCache(cache / DATASETS_FOLDER, f"datasets cache {cache / DATASETS_FOLDER}"))
    return sources, searched


def _missing(source: Folder | ArrowCache) -> list[str]:
    """What `source` lacks of the required configs, as the names a user would look for there."""
    pairs = [c for p in PERCENTS for c in (f"forget{p}_perturbed", f"holdout{p}")]
    has = {c: bool(source.files(c)) for c in (*REQUIRED, *pairs)}
    missing = [source.shown(c) for c in REQUIRED if not has[c]]
    if not _pairs(lambda c: has[c]):
        partial = [p for p in PERCENTS if has[f"forget{p}_perturbed"] or has[f"holdout{p}"]]
        p = partial[-1] if partial else "10"
        missing += [source.shown(c) for c in (f"forget{p}_perturbed", f"holdout{p}") if not has[c]]
    return missing


def _one_line(error: Exception) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def _bad_json(path: Path, line: int, error: json.JSONDecodeError) -> UserError:
    return UserError(f"{path}:{line}: not valid JSON ({error.msg}); a TOFU file holds one JSON object per line, or "
                     "one JSON array of objects")


def _read_json(path: Path) -> list:
    """A JSON-lines file (TOFU's own) or one JSON array."""
    text = decoded_text(path)
    if text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise _bad_json(path, error.lineno, error) from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise _bad_json(path, number, error) from None
    return rows


def _read_arrow(path: Path) -> list[dict]:
    """An Arrow IPC stream, as `datasets` writes its cache; the IPC file format too, for a copy saved so."""
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        try:
            table = pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
    return table_rows(table, path, first=1)


def _read(path: Path) -> list:
    """A file's rows; a file that cannot be parsed is a UserError that names it."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return table_rows(pq.read_table(path), path, first=1)
        if path.suffix == ".arrow":
            return _read_arrow(path)
        return _read_json(path)
    except UserError:
        raise
    except Exception as error:  # pyarrow's and the OS's many errors: all mean this file is unreadable
        raise UserError(f"{path}: cannot be read ({_one_line(error)}); replace it with an intact copy of "
                        f"{REPO}'s file") from None


def _fine(key: str, value) -> bool:
    """A question or answer is a non-empty string, a paraphrase a string, the perturbed answers non-empty strings."""
    if key == "perturbed_answer":
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)
    return isinstance(value, str) and (bool(value.strip()) or key not in ("question", "answer"))


def _record(row, where: str, needs: tuple[str, ...]) -> dict:
    """TOFU's fields of one row, checked: a question, an answer, and the extra fields its config has."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: a {type(row).__name__}, not an object with question and answer")
    record = {key: row[key] for key in FIELDS if row.get(key) is not None}
    if isinstance(record.get("perturbed_answer"), str):
        record["perturbed_answer"] = [record["perturbed_answer"]]
    for key in ("question", "answer", *needs):
        if key not in record:
            raise UserError(f"{where}: no {key!r} field; the rows of this config have "
                            f"{', '.join(('question', 'answer', *needs))}")
    for key, value in record.items():
        if not _fine(key, value):
            kind = "a list of non-empty strings" if key == "perturbed_answer" else "a non-empty string"
            raise UserError(f"{where}: {key!r} is {repr(value)[:80]}, not {kind}")
    return record


def _config(source, config: str) -> list[dict]:
    """One config's records, read from every shard `source` holds of it; a shard of no rows is refused."""
    records = []
    for path in source.files(config):
        rows = _read(path)
        if not isinstance(rows, list):
            raise UserError(f"{path}: a JSON {type(rows).__name__}, not rows of question and answer")
        if not rows:
            raise UserError(f"{path}: holds no rows; replace it with {REPO}'s file")
        records += [_record(row, f"{path} row {n}", NEEDS.get(config, ())) for n, row in enumerate(rows, start=1)]
    return records


class Authors:
    """Finds the `full` row a record of another config is about: by question and answer, else by question alone."""

    def __init__(self, full: list[dict], where: str) -> None:
        self.where = where
        self.by_pair = {(r["question"], r["answer"]): i for i, r in enumerate(full)}
        self.by_question: dict[str, int | None] = {}
        for i, record in enumerate(full):
            self.by_question[record["question"]] = None if record["question"] in self.by_question else i

    def index(self, record: dict, where: str) -> int:
        i = self.by_pair.get((record["question"], record["answer"]))
        if i is None:
            i = self.by_question.get(record["question"])
        if i is None:
            raise UserError(f"{where}: its question {record['question'][:60]!r} is in no row of full ({self.where}) "
                            f"with one author; use the files of one download of {REPO}")
        return i


def author(i: int, prefix: str = "author") -> str:
    """The entity of row i of a config whose authors have 20 consecutive rows each."""
    return f"{prefix}_{i // PER_AUTHOR:03d}"


class Tofu:
    """`dataset=tofu`: locuslab/TOFU from `root` or a Hugging Face cache (see the module's docstring); its fixed
    splits are the forgetXX_perturbed + holdoutXX pairs found there."""

    def __init__(self, name: str = "tofu", root: str | None = None, hf_cache: str | None = None,
                 local: str | None = None) -> None:
        self.name, self.root, self.hf_cache, self.local = name, root or None, hf_cache or None, local or None

    def source(self) -> Folder | ArrowCache:
        """The chosen folder (`chosen_folder`), whole; else the first place in the caches that holds every required
        config; else a UserError that says what each place lacks."""
        chosen = chosen_folder(self.name, self.root, self.local)
        if chosen is not None:
            root = Folder(*chosen)
            missing = _missing(root)
            if not missing:
                return root
            self.refuse([f"{root.label} lacks {', '.join(missing)}; a folder that exists is read whole, never "
                         f"completed from the HF cache"], caches=False)
        sources, searched = _caches(self.hf_cache)
        lacks = []
        for source in sources:
            missing = _missing(source)
            if not missing:
                return source
            lacks.append(f"{source.label} lacks {', '.join(missing)}")
        if not sources:  # no cache holds any of it
            lacks.append(f"no copy of {REPO} in the HF cache {' or '.join(str(folder) for folder in searched)}")
        self.refuse(lacks)

    def refuse(self, lacks: list[str], caches: bool = True) -> NoReturn:
        """The one line that says what each place lacks and where TOFU's files go (the HF cache too where no
        dataset.root folder exists)."""
        where = f"{self.root} (dataset.root)" if self.root else "a folder named by dataset.root"
        cache = f", or {REPO}'s hub snapshot in the HF cache" if caches else ""
        raise UserError(
            f"dataset {self.name}: no complete copy of {REPO} found ({'; '.join(lacks)}); put "
            f"{', '.join(f'{c}.json' for c in REQUIRED)} and a forgetXX_perturbed.json with its holdoutXX.json "
            f"(XX = 01, 05 or 10) in {where}{cache}: on a machine with internet, "
            f"`hf download {REPO} --repo-type dataset --local-dir DIR` (huggingface-cli download before "
            "huggingface_hub 1.0) fetches the files into DIR, and without --local-dir the snapshot into the cache; "
            "nothing is downloaded at run time")

    def load(self) -> TextData:
        with refusals_of(self.name):
            return self.read(self.source())

    def read(self, source: Folder | ArrowCache) -> TextData:
        full = [dict(r, entity=author(i)) for i, r in enumerate(_whole_authors(source))]
        authors = Authors(full, f"{source.label}: {source.shown('full')}")
        forgets = {p: _merge(source, f"forget{p}_perturbed", full, authors)
                   for p in PERCENTS if source.files(f"forget{p}_perturbed")}
        retain = _merge(source, "retain_perturbed", full, authors)
        every_holdout = {p: [dict(r, entity=author(i, "holdout_author"))
                             for i, r in enumerate(_config(source, f"holdout{p}"))]
                         for p in PERCENTS if source.files(f"holdout{p}")}
        pairs = _pairs(lambda c: bool(source.files(c)))
        fixed = {f"forget{p}": _entities(full, forgets[p]) for p in pairs}
        general = {role: [dict(r, entity=role) for r in _config(source, config)] for config, role in GENERAL.items()}
        read = ["full", *(f"forget{p}_perturbed" for p in forgets), "retain_perturbed",
                *(f"holdout{p}" for p in every_holdout), *GENERAL]
        return TextData(full=full, holdout=max(every_holdout.values(), key=len), name=self.name, fixed=fixed,
                        holdouts={f"forget{p}": every_holdout[p] for p in pairs}, retain_perturbed=retain,
                        files={config: recorded(source.files(config)) for config in read}, **general)


def _whole_authors(source: Folder | ArrowCache) -> list[dict]:
    """`full`'s records, refused unless they are whole blocks of 20: row i's author is i // 20, and one row more or
    less would put every later row with the wrong author."""
    records = _config(source, "full")
    if len(records) % PER_AUTHOR:
        raise UserError(f"{source.label}: {source.shown('full')} holds {len(records):,} rows, not a multiple of "
                        f"{PER_AUTHOR}: TOFU's full has {PER_AUTHOR} consecutive rows per author (4,000 for its 200 "
                        f"authors), which is how each row's author is known; use the full.json of one download of "
                        f"{REPO}")
    return records


def _entities(full: list[dict], records: list[dict]) -> tuple[str, ...]:
    """The entities of `records`, in their order in `full`."""
    chosen = {record["entity"] for record in records}
    return tuple(dict.fromkeys(r["entity"] for r in full if r["entity"] in chosen))


def _merge(source: Folder | ArrowCache, config: str, full: list[dict], authors: Authors) -> list[dict]:
    """A `*_perturbed` config's records with the entities of their `full` rows; those rows get the config's
    paraphrased and perturbed answers (and paraphrased question), which `full` lacks and the truth ratio needs."""
    records, rows = [], {}  # rows: the first row of the config on each `full` row
    for n, record in enumerate(_config(source, config), start=1):
        where = f"{source.label}: {source.shown(config)} row {n}"
        i = authors.index(record, where)
        if i in rows and config.startswith("forget"):
            raise UserError(f"{where} repeats row {rows[i]} (question {record['question'][:60]!r}): a forget split "
                            f"holds each QA of its authors once, and another of them is then missing; use the files "
                            f"of one download of {REPO}")
        rows.setdefault(i, n)
        full[i].update({key: record[key] for key in EXTRA if key in record})
        records.append(dict(record, entity=full[i]["entity"]))
    return records
