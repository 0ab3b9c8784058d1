"""The metric declarations a report reads (`core/catalogue.py`): each result's own, merged over the results.

A result of schema 2 carries the catalogue of the metrics it recorded (`catalogue`). A result written before
results carried one (schema 1: no `catalogue`) is read with the frozen legacy catalogue of its task (`job.task`),
from `legacy_catalogue.json`: what each task declared when schema 2 began, the core's metrics with it (and each
metric's `scale` and each task's forgetting–utility `plane`, declared later, which held for those metrics all
along), so an old sweep is reported as it always was. The tasks' declarations differ (the splits their
per-example scores read, for one: `per_example`), so the file holds one catalogue per task; a result that names no
task the file knows is read with the union of them all. A damaged catalogue costs its result nothing but its
declarations: the legacy catalogue of its task stands in, and the report says which file.
The report imports no task: declarations reach it through the files alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable
from pathlib import Path

from unlearnbench.core.catalogue import Catalogue

LEGACY_FILE = Path(__file__).with_name("legacy_catalogue.json")


@functools.cache
def legacy_catalogues() -> dict[str, Catalogue]:
    """{task name as schema-1 results spell it (`job.task`): its declarations at schema 2's start, the core's with
    them}, in the file's order (image, text, ranking)."""
    content = json.loads(LEGACY_FILE.read_text(encoding="utf-8"))
    return {task: Catalogue.from_dict(declared) for task, declared in content.items()}


@functools.cache
def legacy_catalogue(task: str | None = None) -> Catalogue:
    """The legacy declarations of `task`; the union of every task's where it is unknown or missing (a result that
    does not say its task may hold any task's metrics): the tasks' metrics in the file's order, the core's last, as
    every task's own has them."""
    catalogues = legacy_catalogues()
    if task in catalogues:
        return catalogues[task]
    shared = set.intersection(*({m.name for m in c.metrics} for c in catalogues.values()))  # the core's
    position = {name: i for i, name in enumerate(dict.fromkeys(m.name for c in catalogues.values() for m in c.metrics))}
    union = merged(catalogues.values())
    return dataclasses.replace(union, metrics=tuple(sorted(union.metrics,
                                                           key=lambda m: (m.name in shared, position[m.name]))))


def result_legacy(result: dict) -> Catalogue:
    """The legacy catalogue of the result's task (`job.task`), for a result without declarations of its own."""
    task = result["job"].get("task") if isinstance(result.get("job"), dict) else None
    return legacy_catalogue(task if isinstance(task, str) else None)


def result_catalogue(result: dict) -> Catalogue:
    """The declarations a checked result is read with: its own, or the legacy catalogue where it has none; a
    `SchemaError` (the reason in one line) where its own is damaged."""
    if "catalogue" not in result:
        return result_legacy(result)
    return Catalogue.from_dict(result["catalogue"])


def merged(catalogues: Iterable[Catalogue]) -> Catalogue:
    """The union of the results' declarations, the same in whatever order the results are read (`Catalogue.union`:
    a metric declared with other roles takes the union of its splits; one declared with other facts, see
    `disagreement_warning`)."""
    return Catalogue.union(catalogues)


def disagreement_warning(catalogues: Iterable[Catalogue]) -> str | None:
    """One line where the results declare a metric with different facts (label, ideal, scale: results of different
    versions), naming the metrics: the report reads each with one of its labels and scales, and with no best value
    where the ideals differ (`Catalogue.union`)."""
    names = Catalogue.disagreements(catalogues)
    if not names:
        return None
    return (f"metric{'s' if len(names) > 1 else ''} declared differently by the results: {', '.join(names)}; each is "
            f"read with one label and scale, and where the ideals differ with none (never marked best, not ranked)")
