"""LETOR data for federated online learning to rank: MQ2007 folds and a seeded synthetic stand-in, in one format.

Lines read `REL qid:QID 1:v 2:v … 46:v #docid = … inc = … prob = …`, grouped by query. A query set is held padded
to its longest query, so scoring and NDCG run over all queries at once.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unlearnbench.runtime.errors import UserError, bad_file
from unlearnbench.runtime.files import write_atomically

FEATURES = 46


@dataclass(frozen=True)
class Queries:
    """A query set: features (Q × D × F, zero-padded), labels (Q × D, −1 = padding), document counts (Q)."""

    features: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray
    qids: np.ndarray

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def valid(self) -> np.ndarray:
        """Q × D mask of real documents."""
        return self.labels >= 0


def group(features: np.ndarray, labels: np.ndarray, qids: np.ndarray) -> Queries:
    """Rows grouped into queries in order of first appearance (a document's id is its row within its query)."""
    unique, first, inverse, sizes = np.unique(qids, return_index=True, return_inverse=True, return_counts=True)
    rank = np.empty(len(unique), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(unique))  # query order: order of first appearance
    query = rank[inverse]
    rows = np.argsort(query, kind="stable")  # rows of query 0, then of query 1, … each in file order
    offsets = np.concatenate([[0], np.cumsum(sizes[np.argsort(first, kind="stable")])])
    position = np.arange(len(rows)) - offsets[query[rows]]
    width = int(sizes.max()) if len(sizes) else 0
    padded = np.zeros((len(unique), width, features.shape[1]))
    padded_labels = np.full((len(unique), width), -1, dtype=np.int64)
    padded[query[rows], position] = features[rows]
    padded_labels[query[rows], position] = labels[rows]
    return Queries(padded, padded_labels, np.diff(offsets), unique[np.argsort(first, kind="stable")])


LINE_FORM = "a LETOR line reads 'REL qid:QID 1:v 2:v … #comment'"


def parse_line(tokens: list[str], features: int) -> tuple[int, int, list[float]]:
    """Relevance, qid and the dense feature row of one line's tokens (its comment removed); a `UserError` says what
    is wrong. Relevance must be a whole number ≥ 0 (−1 marks padding), feature indices increase within 1…features,
    values are finite numbers."""
    if not tokens[0].isdigit():
        raise UserError(f"relevance '{tokens[0]}' is not a whole number ≥ 0")
    if len(tokens) < 2:
        raise UserError("missing qid: the line ends where qid:QID belongs")
    if not tokens[1].startswith("qid:") or not tokens[1][4:].isdigit():
        raise UserError(f"missing qid: '{tokens[1]}' stands where qid:QID (a whole number) belongs")
    row, last = [0.0] * features, 0
    for token in tokens[2:]:
        index, colon, value = token.partition(":")
        if not colon or not index.isdigit():
            raise UserError(f"token '{token}' is not INDEX:VALUE")
        if not 1 <= int(index) <= features:
            raise UserError(f"feature index {index} is outside 1…{features}")
        if int(index) <= last:
            raise UserError(f"feature index {index} follows {last}; indices must increase along a line")
        last = int(index)
        row[last - 1] = feature_value(index, value)
    return int(tokens[0]), int(tokens[1][4:]), row


def feature_value(index: str, value: str) -> float:
    """A finite float: a NaN or an infinity would spread through every score of its query."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise UserError(f"feature {index} has the value '{value}', not a finite number")
    return number


def read_letor(path: Path, features: int = FEATURES, remedy: str = "") -> Queries:
    """A LETOR text file (svmlight with `qid:` and a `#` comment tail), every line checked: a damaged line is a
    `UserError` naming the file, the line and what is wrong, followed by `remedy` (where to get a good copy)."""
    suffix = f"; {remedy}" if remedy else ""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")  # stray bytes are reported by line, below
    except OSError as error:
        raise bad_file(path, f"cannot be read ({type(error).__name__}: {error}){suffix}") from error
    rows, labels, qids = [], [], []
    for number, line in enumerate(text.split("\n"), start=1):
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        try:
            label, qid, row = parse_line(tokens, features)
        except UserError as error:
            raise bad_file(f"{path}:{number}", f"{error}; {LINE_FORM}{suffix}") from None
        rows.append(row)
        labels.append(label)
        qids.append(qid)
    if not rows:
        raise bad_file(path, f"no documents; {LINE_FORM}{suffix}")
    return group(np.array(rows, dtype=np.float64), np.array(labels, dtype=np.int64), np.array(qids, dtype=np.int64))


def format_letor(queries: Queries) -> str:
    lines = []
    for q in range(len(queries)):
        for d in range(queries.sizes[q]):
            values = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(queries.features[q, d]))
            lines.append(f"{queries.labels[q, d]} qid:{queries.qids[q]} {values} #docid = GX{q:04d}-{d:03d} "
                         f"inc = 1 prob = 0.5")
    return "\n".join(lines) + "\n"


def write_letor(path: Path, queries: Queries) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, format_letor(queries))


@dataclass(frozen=True)
class LetorData:
    name: str
    train: Queries
    test: Queries

    @property
    def features(self) -> int:
        return self.train.features.shape[2]

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.name.encode())
        for queries in (self.train, self.test):
            for array in (queries.features, queries.labels, queries.qids):
                digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


class LetorSource:
    """A dataset component of the ranking task: its config holds the constructor's arguments, `load()` the data."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        self.root = Path(root)


class Mq2007(LetorSource):
    """LETOR 4.0 MQ2007: `ROOT/MQ2007/Fold{k}/{train,test}.txt` (vali.txt unused); features already min–max
    normalised per query."""

    def __init__(self, fold: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        if fold not in range(1, 6):
            raise UserError(f"dataset {self.name}: fold {fold} does not exist; valid folds: 1, 2, 3, 4, 5")
        self.fold = fold

    def load(self) -> LetorData:
        folder = self.root / "MQ2007" / f"Fold{self.fold}"
        missing = [f for f in (folder / "train.txt", folder / "test.txt") if not f.is_file()]
        if missing:
            raise UserError(f"dataset {self.name}: missing {missing[0]}; get MQ2007.rar (LETOR 4.0) from Microsoft "
                            f"Research and unpack it so that {self.root}/MQ2007/Fold1..5 exist (or set "
                            f"dataset.root); nothing is downloaded at run time")
        remedy = "get a good copy of MQ2007.rar (LETOR 4.0) from Microsoft Research and unpack it again"
        return LetorData(self.name, read_letor(folder / "train.txt", remedy=remedy),
                         read_letor(folder / "test.txt", remedy=remedy))


def synthetic_queries(rng: np.random.Generator, count: int, weights: np.ndarray, zero_columns: np.ndarray,
                      first_qid: int) -> Queries:
    """Queries of the synthetic LETOR data (docs/ranking.md): lognormal document counts, uniform features with some
    columns zeroed, graded relevance from a hidden linear model, about 15% of queries without a relevant document,
    per-query min–max normalisation."""
    sizes = np.clip(rng.lognormal(3.5, 0.5, count), 6, 147).astype(np.int64)
    width, features = int(sizes.max()), len(weights)
    padded = np.zeros((count, width, features))
    labels = np.full((count, width), -1, dtype=np.int64)
    for q, n in enumerate(sizes):
        x = rng.uniform(0, 1, (n, features))
        x[:, zero_columns] = 0
        z = x @ weights + rng.normal(0, 1, n)
        relevance = (z > np.quantile(z, 0.74)).astype(np.int64) + (z > np.quantile(z, 0.93))
        if rng.uniform() < 0.15:
            relevance[:] = 0
        low, high = x.min(0), x.max(0)
        padded[q, :n] = np.where(high > low, (x - low) / np.where(high > low, high - low, 1), 0)
        labels[q, :n] = relevance
    return Queries(np.round(padded, 6), labels, sizes, np.arange(first_qid, first_qid + count))


class SyntheticLetor(LetorSource):
    """Seeded synthetic LETOR data of MQ2007's shape, written once as `ROOT/seed<k>/Fold1/{train,test}.txt` in the
    exact LETOR format and read back by the same loader as MQ2007 (so the format is exercised end to end)."""

    def __init__(self, seed: int = 0, train_queries: int = 1017, test_queries: int = 339, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seed, self.train_queries, self.test_queries = seed, train_queries, test_queries

    def folder(self) -> Path:
        return self.root / f"seed{self.seed}_q{self.train_queries}-{self.test_queries}" / "Fold1"

    def generate(self, folder: Path) -> None:
        rng = np.random.default_rng(np.random.SeedSequence([0x1E70, self.seed]))
        weights = rng.normal(0, 1, FEATURES) * (rng.uniform(0, 1, FEATURES) < 0.4)
        zero_columns = np.flatnonzero(rng.uniform(0, 1, FEATURES) < 0.1)
        train = synthetic_queries(rng, self.train_queries, weights, zero_columns, first_qid=1)
        test = synthetic_queries(rng, self.test_queries, weights, zero_columns, first_qid=self.train_queries + 1)
        write_letor(folder / "test.txt", test)
        write_letor(folder / "train.txt", train)  # written last: its presence means the fold is complete

    def load(self) -> LetorData:
        folder = self.folder()
        if not (folder / "train.txt").is_file():
            self.generate(folder)
        remedy = f"delete {folder} and it is written again"
        return LetorData(self.name, read_letor(folder / "train.txt", remedy=remedy),
                         read_letor(folder / "test.txt", remedy=remedy))
