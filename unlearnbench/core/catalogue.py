"""What each metric is, declared once by the task that records it, and carried by every `result.json`.

A task declares its metrics in its own package (`tasks/<task>/catalogue.py`, beside the functions that compute them):
the name its records carry, the label the report prints, the best value (`ideal`), and which of its splits are a
headline column of the console and the report's short tables, a default leaderboard metric, a figure. It declares
its split labels, the methods whose M_u is M_r by construction (gold standards: never marked best), and the metrics
the report derives across jobs (`Derived`). A job writes the catalogue of the metrics it recorded into result.json
(`catalogue`), so that the report reads declarations, never a task, and reads results from anywhere the same way.

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

from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from scipy import stats

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
            raise ValueError(f"the 'ideal' of metric {self.name} must be a number, {RETRAINED!r} or None; got "
                             f"{self.ideal!r} instead")
        if not (isinstance(self.scale, int | float) and not isinstance(self.scale, bool) and self.scale > 0):
            raise ValueError(f"the 'scale' of metric {self.name} must be a positive number; got {self.scale!r} "
                             f"instead")
        for role in ("headline", "leaderboard", "figure"):
            object.__setattr__(self, role, tuple(getattr(self, role)))
        if self.leaderboard and self.ideal is None:
            raise ValueError(f"metric {self.name} is a leaderboard metric without an ideal: the leaderboard ranks by "
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
            raise ValueError(f"the 'statistic' of derived metric {self.name} must be one of {', '.join(STATISTICS)}; "
                             f"got {self.statistic!r} instead")

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

    def __add__(self, other: Catalogue) -> Catalogue:
        """The union; a metric declared by both keeps the first declaration."""
        known = {m.name for m in self.metrics}
        return Catalogue((*self.metrics, *(m for m in other.metrics if m.name not in known)),
                         {**other.splits, **self.splits}, self.gold_standards | other.gold_standards,
                         (*self.derived, *(d for d in other.derived if d.name not in {x.name for x in self.derived})),
                         self.per_example or other.per_example)

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
                         derived, self.per_example)

    def as_dict(self) -> dict:
        return {"metrics": [m.as_dict() for m in self.metrics], "splits": dict(self.splits),
                "gold_standards": sorted(self.gold_standards), "derived": [d.as_dict() for d in self.derived],
                "per_example": self.per_example.as_dict() if self.per_example else None}

    @classmethod
    def from_dict(cls, content: dict) -> Catalogue:
        """The catalogue result.json carries; `ValueError` where it is not one (the reader says which file)."""
        try:
            catalogue = cls(tuple(Metric(**m) for m in content.get("metrics", [])), dict(content.get("splits", {})),
                            frozenset(content.get("gold_standards", [])),
                            tuple(Derived(**d) for d in content.get("derived", [])),
                            PerExample(**content["per_example"]) if content.get("per_example") else None)
        except (TypeError, AttributeError) as error:
            raise ValueError(f"not a metric catalogue: {error}") from None
        wrong = [value for value in catalogue.texts() if not isinstance(value, str)]
        if wrong:
            raise ValueError(f"not a metric catalogue: {str(wrong[0])[:40]!r} where a name or label belongs")
        return catalogue

    def texts(self) -> list:
        """Every value the report uses as text (names, labels, splits, methods, columns): what `from_dict` checks."""
        per_example = [] if self.per_example is None else [
            v for v in self.per_example.as_dict().values() if v is not None]  # accuracy, privacy: where declared
        return [*(v for m in self.metrics for v in (m.name, m.label, *m.headline, *m.leaderboard, *m.figure)),
                *self.splits, *self.splits.values(), *self.gold_standards,
                *(v for d in self.derived for v in (d.name, d.source, d.split, d.column, d.statistic)),
                *per_example]


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
    """The catalogue of a job's task (`task.catalogue` of its config, a dotted path) with the core's metrics."""
    from unlearnbench.core.components import locate

    return locate(task["catalogue"]) + CORE
