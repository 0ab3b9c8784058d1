"""What each metric is, declared once by the task that records it, and carried by every `result.json`.

A task declares each metric once, beside the function that computes it (a module-level `Metric`): the name its
records carry, the label the report prints, the best value (`ideal`), and which of its splits are a headline column
of the console and the report's short tables, a default leaderboard metric, a figure. Its `catalogue.py` assembles
those declarations into the task's one catalogue, with its split labels, the methods whose M_u is M_r by
construction (gold standards: never marked best), and the metrics the report derives across jobs (`Derived`). A task
of several benchmarks (the text task: TOFU, MUSE, WMDP) leaves the roles to them: each benchmark's bench declares a
`Selection` (its metrics in its tables' order, their roles, its splits). A job writes the catalogue of the metrics it
recorded into result.json (`catalogue`), so that the report reads declarations, never a task, and reads results from
anywhere the same way. Merging the catalogues of several results (`Catalogue.union`) gives the same catalogue in
whatever order they come.

    ideal: a number   the value closest to it is best (deltas and distances 0, forget quality 1, MIA 0.5)
           RETRAINED  the value closest to the retrained model's mean is best (accuracies, utilities)
           None       no best value: shown, never marked, not rankable
    scale: the unit a tuning objective (report/compute/tuning.py) divides the metric's distance to its ideal by,
           so that metrics of different units count alike: 1 for fractions (their distances lie in [0, 1]), 100 for
           privleak's percent (OpenUnlearning's 100·((1 − AUC_u) − (1 − AUC_r))/(1 − AUC_r): its distance / 100
           lies in [0, 1] below the ideal and in [0, ∞) above it, past 1 where 1 − AUC_u > 2·(1 − AUC_r))

The costs every job records and the relearn stage's metrics belong to no task: they are declared here (`CORE`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import pairwise

from scipy import stats

from unlearnbench.core.files import SchemaError
from unlearnbench.runtime.errors import UserError, invalid

RETRAINED = "retrained"
NO_SPLIT = ""  # the split of a model-level metric (records hold None)


@dataclass(frozen=True)
class Metric:
    """One metric's declaration. `headline`, `leaderboard` and `figure` name splits (`NO_SPLIT` for a metric without
    one); a split not named there is still recorded and tabled."""

    name: str
    label: str
    ideal: float | str | None = None
    headline: tuple[str, ...] = ()
    leaderboard: tuple[str, ...] = ()
    figure: tuple[str, ...] = ()
    scale: float = 1.0  # the unit of its distances to the ideal (privleak's percent: 100): tuning divides by it

    def __post_init__(self) -> None:
        if not (self.ideal is None or self.ideal == RETRAINED or isinstance(self.ideal, int | float)):
            raise invalid("ideal", f"metric {self.name}", f"a number, {RETRAINED!r} or None", repr(self.ideal))
        if not (isinstance(self.scale, int | float) and not isinstance(self.scale, bool) and self.scale > 0):
            raise invalid("scale", f"metric {self.name}", "a positive number", repr(self.scale))
        for role in ("headline", "leaderboard", "figure"):
            object.__setattr__(self, role, tuple(getattr(self, role)))
        if self.leaderboard and self.ideal is None:
            raise UserError(f"metric {self.name} is a leaderboard metric without an ideal: the leaderboard ranks by "
                            f"the distance to the ideal")

    def as_dict(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


@dataclass(frozen=True)
class Derived:
    """A metric the report computes across jobs from their per-example tables (examples.parquet): `name` re-scores
    each row of `source` (a recorded metric on `split`) with `statistic` (`STATISTICS`) between the model's
    `column` values and those of one fixed reference: the retrained model of the configuration's first job (smallest
    unlearning seed, then training seed) on the same forget set."""

    name: str
    source: str
    split: str
    column: str
    statistic: str

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise invalid("statistic", f"derived metric {self.name}", f"one of {', '.join(STATISTICS)}",
                          repr(self.statistic))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class PerExample:
    """How the report's per-example scores (ε, F, LiRA, KLOM; docs/forget-quality.md) read a task's jobs: the
    `split` names of examples.parquet that hold D_f, samples of D_r and unseen samples; and, where the task has
    them, the metric whose retain and unseen values scale the competition's score (`accuracy`: its records on the
    `retain` and `unseen` splits) and the MIA shown beside it (`privacy`, on the `forget` split)."""

    forget: str
    retain: str
    unseen: str
    accuracy: str | None = None
    privacy: str | None = None

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Catalogue:
    """A task's declarations (or the union of several: a report over results of several tasks)."""

    metrics: tuple[Metric, ...] = ()
    splits: dict[str, str] = field(default_factory=dict)  # split → its label
    gold_standards: frozenset[str] = frozenset()  # methods whose M_u is M_r by construction
    derived: tuple[Derived, ...] = ()
    per_example: PerExample | None = None  # None: the task writes no examples.parquet the report can score
    plane: tuple[str, str] | None = None  # ("metric:split" of the forgetting axis, of the utility axis; "metric"
    # alone for a metric without a split): the plane the report draws each method's path in; None: no such plane

    def __post_init__(self) -> None:
        if self.plane is not None:
            plane = tuple(self.plane) if isinstance(self.plane, list | tuple) else self.plane
            if not (isinstance(plane, tuple) and len(plane) == 2 and all(isinstance(a, str) and a for a in plane)):
                raise invalid("plane", "a catalogue", "two 'metric:split' names or None", repr(self.plane))
            object.__setattr__(self, "plane", plane)

    def __add__(self, other: Catalogue) -> Catalogue:
        return Catalogue.union((self, other))

    @classmethod
    def union(cls, catalogues: Iterable[Catalogue]) -> Catalogue:
        """The declarations of several catalogues (a sweep's results), the same in whatever order they come.

        The metrics (and derived metrics) come in an order every catalogue agrees with where they agree (`ordered`).
        A metric declared with other roles elsewhere takes the union of its splits in each role, ordered alike. Where
        its facts differ (label, ideal, scale: results of different versions), the results cannot be ranked as one:
        its ideal is None where the ideals differ (shown, never marked, not rankable, no leaderboard metric), and its
        label and scale are those that come first as text (`Catalogue.disagreements` names it). A split labelled
        differently takes the label first as text; differing per-example declarations, likewise the first as text,
        and differing planes, the first as text."""
        catalogues = list(catalogues)
        declarations, labels = defaultdict(set), defaultdict(set)  # name → its declarations; split → its labels
        for catalogue in catalogues:
            for declaration in (*catalogue.metrics, *catalogue.derived):
                declarations[declaration.name].add(declaration)
            for split, label in catalogue.splits.items():
                labels[split].add(label)
        metrics = tuple(agreed(declarations[name]) for name in ordered(tuple(m.name for m in c.metrics)
                                                                     for c in catalogues))
        derived = tuple(min((d for d in declarations[name] if isinstance(d, Derived)), key=as_text)
                        for name in ordered(tuple(d.name for d in c.derived) for c in catalogues))
        per_example = {as_text(c.per_example): c.per_example for c in catalogues if c.per_example}
        planes = {c.plane for c in catalogues if c.plane}
        return cls(metrics, {split: min(labels[split]) for split in ordered(tuple(c.splits) for c in catalogues)},
                   frozenset().union(*(c.gold_standards for c in catalogues)), derived,
                   per_example[min(per_example)] if per_example else None, min(planes) if planes else None)

    @staticmethod
    def disagreements(catalogues: Iterable[Catalogue]) -> list[str]:
        """The metrics whose facts (label, ideal, scale) differ between the catalogues, by name."""
        facts = defaultdict(set)
        for catalogue in catalogues:
            for m in catalogue.metrics:
                facts[m.name].add((m.label, repr(m.ideal), m.scale))
        return sorted(name for name, seen in facts.items() if len(seen) > 1)

    def selected(self, selection: Selection) -> Catalogue:
        """The declarations of one benchmark's jobs: its metrics in its order with its roles, its splits, the derived
        metrics whose source it records, and the per-example reading where it has one."""
        unknown = [roles.name for roles in selection.metrics if self.metric(roles.name) is None]
        if unknown:
            raise invalid("metrics", "a benchmark's selection", "metrics its task declares", ", ".join(unknown))
        metrics = tuple(replace(self.metric(roles.name), headline=roles.headline, leaderboard=roles.leaderboard,
                                figure=roles.figure) for roles in selection.metrics)
        names = {m.name for m in metrics}
        return Catalogue(metrics, {split: self.splits[split] for split in selection.splits}, self.gold_standards,
                         tuple(d for d in self.derived if d.source in names and d.name in names),
                         self.per_example if selection.per_example else None, self.plane_within(names))

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    def label(self, metric: str, split: str | None) -> str:
        declared = self.metric(metric)
        name = declared.label if declared else metric
        return f"{name} {self.splits.get(split or NO_SPLIT, split or NO_SPLIT)}".strip()

    def ideal(self, metric: str) -> float | str | None:
        declared = self.metric(metric)
        return declared.ideal if declared else None

    def roles(self, role: str) -> list[tuple[str, str]]:
        """The (metric, split) pairs a role (`headline`, `leaderboard`, `figure`) names, in declaration order."""
        return [(m.name, split) for m in self.metrics for split in getattr(m, role)]

    def headline(self) -> list[tuple[str, str, str]]:
        """(label, metric, split) of the headline columns."""
        return [(self.label(metric, split), metric, split) for metric, split in self.roles("headline")]

    def leaderboard(self) -> list[str]:
        """The default leaderboard metrics as `metric:split` (`metric` alone for a metric without a split)."""
        return [f"{metric}:{split}" if split else metric for metric, split in self.roles("leaderboard")]

    def holding(self, names: Iterable[str]) -> Catalogue:
        """The declarations of the metrics `names`, and of the derived metrics whose source is among them."""
        names = set(names)
        derived = tuple(d for d in self.derived if d.source in names)
        names |= {d.name for d in derived}
        return Catalogue(tuple(m for m in self.metrics if m.name in names), dict(self.splits), self.gold_standards,
                         derived, self.per_example, self.plane_within(names))

    def plane_within(self, names: Iterable[str]) -> tuple[str, str] | None:
        """The plane where both its axes' metrics are among `names` (a selection, the recorded metrics), else None."""
        names = set(names)
        return self.plane if self.plane and all(axis_of(a)[0] in names for a in self.plane) else None

    def plane_axes(self) -> tuple[tuple[str, str], tuple[str, str]] | None:
        """((metric, split) of the forgetting axis, of the utility axis), or None where no plane is declared."""
        return None if self.plane is None else (axis_of(self.plane[0]), axis_of(self.plane[1]))

    def as_dict(self) -> dict:
        return {"metrics": [m.as_dict() for m in self.metrics], "splits": dict(self.splits),
                "gold_standards": sorted(self.gold_standards), "derived": [d.as_dict() for d in self.derived],
                "per_example": self.per_example.as_dict() if self.per_example else None,
                "plane": list(self.plane) if self.plane else None}

    @classmethod
    def from_dict(cls, content: dict) -> Catalogue:
        """The catalogue result.json carries; a `SchemaError` where it is not one (the reader says which file)."""
        try:
            catalogue = cls(tuple(Metric(**m) for m in content.get("metrics", [])), dict(content.get("splits", {})),
                            frozenset(content.get("gold_standards", [])),
                            tuple(Derived(**d) for d in content.get("derived", [])),
                            PerExample(**content["per_example"]) if content.get("per_example") else None,
                            content.get("plane"))  # absent (a result from before planes): None
        except (TypeError, AttributeError, UserError) as error:
            raise SchemaError(f"not a metric catalogue: {error}") from None
        wrong = [value for value in catalogue.texts() if not isinstance(value, str)]
        if wrong:
            raise SchemaError(f"not a metric catalogue: {str(wrong[0])[:40]!r} where a name or label belongs")
        return catalogue

    def texts(self) -> list:
        """Every value the report uses as text (names, labels, splits, methods, columns): what `from_dict` checks."""
        per_example = [] if self.per_example is None else [
            v for v in self.per_example.as_dict().values() if v is not None]  # accuracy, privacy: where declared
        return [*(v for m in self.metrics for v in (m.name, m.label, *m.headline, *m.leaderboard, *m.figure)),
                *self.splits, *self.splits.values(), *self.gold_standards,
                *(v for d in self.derived for v in (d.name, d.source, d.split, d.column, d.statistic)),
                *per_example, *(self.plane or ())]


@dataclass(frozen=True)
class Roles:
    """The roles one metric takes in a benchmark's jobs: the splits that are a headline column, a default leaderboard
    metric, a figure (as `Metric`'s)."""

    name: str
    headline: tuple[str, ...] = ()
    leaderboard: tuple[str, ...] = ()
    figure: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """What one benchmark of a task shows of the task's catalogue (`Catalogue.selected`): the metrics its jobs
    record, in the order its tables show them, each with its roles; the splits its jobs have; and whether the
    report's per-example scores read its examples.parquet (`per_example`)."""

    metrics: tuple[Roles, ...]
    splits: tuple[str, ...]
    per_example: bool = True


def axis_of(name: str) -> tuple[str, str]:
    """(metric, split) of a plane's axis, "metric:split" or "metric" (`NO_SPLIT`)."""
    metric, _, split = name.partition(":")
    return metric, split


def as_text(declaration) -> str:
    """A declaration as text, the fixed order among differing declarations of one thing."""
    return json.dumps(declaration.as_dict(), sort_keys=True, ensure_ascii=False)


def agreed(declarations: Iterable[Metric | Derived]) -> Metric:
    """One metric's declaration from several (`Catalogue.union`): the union of their roles; on differing facts, the
    facts first as text, and no ideal where the ideals differ."""
    declarations = [d for d in declarations if isinstance(d, Metric)]  # a derived metric's own, where it has one
    first = min(declarations, key=lambda m: (m.label, repr(m.ideal), m.scale))
    roles = {role: ordered(getattr(m, role) for m in declarations) for role in ("headline", "leaderboard", "figure")}
    if len({repr(m.ideal) for m in declarations}) > 1:
        return replace(first, ideal=None, **{**roles, "leaderboard": ()})
    return replace(first, **roles)


def ordered(chains: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """Every name of the chains once, in an order that depends on the set of chains alone: each name after those
    that precede it in any chain. Among the names free to come next, the one that follows the name placed last in a
    chain continues it; else the one that most names come after (a whole catalogue before a metric added to it),
    then the first in alphabetical order. Where the chains disagree (a cycle), the name with the fewest names before
    it not yet placed comes next."""
    chains = set(map(tuple, chains))
    names = sorted({name for chain in chains for name in chain})
    before, after = defaultdict(set), defaultdict(set)
    for chain in chains:
        for first, then in pairwise(chain):
            before[then].add(first)
            after[first].add(then)
    following = {name: reachable(name, after) for name in names}
    placed: list[str] = []
    left = set(names)
    while left:
        waiting = {name: len(before[name] & left) for name in left}
        free = [name for name in left if not waiting[name]] or [min(left, key=lambda n: (waiting[n], n))]
        continuing = [name for name in free if placed and name in after[placed[-1]]]
        placed.append(min(continuing or free, key=lambda n: (-len(following[n]), n)))
        left.discard(placed[-1])
    return tuple(placed)


def reachable(name: str, after: dict[str, set[str]]) -> set[str]:
    """The names that come after `name` in the chains, directly or not."""
    seen, stack = set(), [name]
    while stack:
        for then in after[stack.pop()] - seen:
            seen.add(then)
            stack.append(then)
    return seen - {name}


def ks_p_value(values: Iterable[float], reference: Iterable[float]) -> float:
    """The p-value of the two-sided Kolmogorov–Smirnov test between two samples (TOFU's forget quality)."""
    return float(stats.ks_2samp(list(values), list(reference)).pvalue)


STATISTICS = {"ks_p_value": ks_p_value}  # what a `Derived` metric may compute

CORE = Catalogue(
    (Metric("time_s", "time s", 0.0, headline=(NO_SPLIT,)),
     Metric("memory_gib", "memory GiB", 0.0),
     Metric("utilisation_pct", "util. %"),
     # relearn time (docs/metrics.md): as fast as M_r, no faster
     Metric("relearn_steps", "relearn steps", RETRAINED),
     Metric("relearn_acc", "relearn acc", RETRAINED)),
    {NO_SPLIT: NO_SPLIT})


def declared(task: dict) -> Catalogue:
    """The catalogue of a job's task (`task.catalogue` of its config, a dotted path) as its bench (`task.bench`)
    selects it where it declares a `selection`, the core's metrics after it."""
    from unlearnbench.core.components import locate

    catalogue = locate(task["catalogue"])
    selection = getattr(locate(task["bench"]), "selection", None) if task.get("bench") else None
    return with_core(catalogue if selection is None else catalogue.selected(selection))


def with_core(own: Catalogue) -> Catalogue:
    """A task's declarations with the core's metrics after its own: what every job of the task may record."""
    return Catalogue((*own.metrics, *CORE.metrics), {**CORE.splits, **own.splits}, own.gold_standards, own.derived,
                     own.per_example, own.plane)
