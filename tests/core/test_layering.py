"""The floors of the house, read from the code's own import lines (DESIGN.md, "The direction of imports"): tasks →
core → runtime, the report and the trackers beside the tasks reading the core's contracts, no task importing another
and no circle between the floors. Every `import` and `from … import` counts, those inside functions too (a lazy
import is still an arrow), and a failure names the file, the line and what it imports."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import unlearnbench

PACKAGE = Path(unlearnbench.__file__).resolve().parent
ROOT = PACKAGE.parent
TASKS = ("tasks.image", "tasks.text", "tasks.ranking")
FLOORS = ("runtime", "core", "report", "track", *TASKS)  # the packages the arrows are drawn between


@dataclass(frozen=True)
class Arrow:
    """One import line: the file (from the repository root), its line, and the module or name it imports, dotted."""

    file: str
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.imported}"


def module_name(path: Path) -> str:
    """The dotted module of a file under the package (`unlearnbench/core/job.py` → `unlearnbench.core.job`)."""
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def arrows_of(path: Path, source: str | None = None) -> list[Arrow]:
    """Every import in the file, at any depth, as absolute dotted names: `from a.b import c` is `a.b.c` (c may be
    a module, `from unlearnbench import report`), and a relative import is resolved against the file's package."""
    source = path.read_text(encoding="utf-8") if source is None else source
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    file = path.resolve().relative_to(ROOT).as_posix()
    arrows = []
    for node in ast.walk(ast.parse(source, filename=file)):
        if isinstance(node, ast.Import):
            arrows += [Arrow(file, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            arrows += [Arrow(file, node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return arrows


def floor_of(dotted: str) -> str | None:
    """The floor a dotted name lies on (`unlearnbench.tasks.image.data.base` → `tasks.image`), or None outside them
    (the standard library, torch, `unlearnbench.cli`)."""
    if not dotted.startswith("unlearnbench."):
        return None
    inside = dotted.removeprefix("unlearnbench.")
    return max((f for f in FLOORS if inside == f or inside.startswith(f"{f}.")), key=len, default=None)


def package_files() -> dict[str, list[Path]]:
    """The package's Python files by floor (the files on no floor, `cli.py`, `api.py`, `tasks/__init__.py`, left
    out: they sit on top)."""
    floors = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        floor = floor_of(module_name(path))
        if floor is not None:
            floors[floor].append(path)
    return floors


@pytest.fixture(scope="module")
def arrows() -> dict[str, list[Arrow]]:
    """Every import of every file of each floor, by the floor of the importing file."""
    return {floor: [a for path in paths for a in arrows_of(path)] for floor, paths in package_files().items()}


def assert_none_crosses(arrows: list[Arrow], forbidden: set[str], named: list[str] = ()) -> None:
    """No arrow lands on a forbidden floor; the failure lists every one that does, a line each."""
    wrong = [str(a) for a in arrows if floor_of(a.imported) in forbidden] + list(named)
    assert not wrong, "imports across the floors:\n" + "\n".join(wrong)


def test_layering_every_floor_has_files_and_its_imports_are_read():
    """The rules below would pass vacuously on a floor with no file, or on a reader that found no import."""
    files = package_files()
    assert set(files) == set(FLOORS)
    found = {floor: {module_name(p) for p in paths} for floor, paths in files.items()}
    assert {"unlearnbench.core.job", "unlearnbench.runtime.ranks", "unlearnbench.report.build"} <= (
        found["core"] | found["runtime"] | found["report"])
    job = arrows_of(PACKAGE / "core" / "job.py")
    assert any(a.imported == "unlearnbench.runtime.ranks.supervise" for a in job)


def test_layering_reads_imports_inside_functions_and_relative_ones(tmp_path):
    """The reader against a fabricated module: lazy imports, relative imports, and a floor named as a module."""
    source = ("import os\n"
              "from . import sibling\n"
              "def later():\n"
              "    from ..report.render.console import job_table\n"
              "    import unlearnbench.tasks.text.bench\n"
              "    from unlearnbench import report\n")
    path = PACKAGE / "core" / "made_up.py"  # never written: its name places it in the core
    found = [(a.line, a.imported) for a in arrows_of(path, source)]
    assert found == [(1, "os"), (2, "unlearnbench.core.sibling"), (4, "unlearnbench.report.render.console.job_table"),
                     (5, "unlearnbench.tasks.text.bench"), (6, "unlearnbench.report")]
    assert [floor_of(name) for _, name in found] == [None, "core", "report", "tasks.text", "report"]
    assert str(arrows_of(path, source)[2]) == "unlearnbench/core/made_up.py:4 imports " \
                                             "unlearnbench.report.render.console.job_table"


def test_layering_runtime_imports_nothing_above_it(arrows):
    assert_none_crosses(arrows["runtime"], {"core", "report", "track", *TASKS})


def test_layering_core_imports_no_report_and_no_task(arrows):
    assert_none_crosses(arrows["core"], {"report", "track", *TASKS})


def test_layering_the_report_imports_no_task_even_by_name(arrows):
    """The report reads the metric declarations result.json carries, never a task: not by an import, nor by a
    dotted name handed to importlib."""
    by_name = []
    for path in package_files()["report"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and floor_of(node.value) in TASKS:
                by_name.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} names {node.value}")
    assert_none_crosses(arrows["report"], set(TASKS), by_name)


def test_layering_the_trackers_read_the_core_alone(arrows):
    """The trackers log what a job's result document holds (unlearnbench/track/): they import no task and no report,
    and neither a task nor the report imports them (the sweep's callback, registered in conf/config.yaml, calls
    them)."""
    assert_none_crosses(arrows["track"], {"report", *TASKS})
    assert_none_crosses([a for floor in ("report", *TASKS) for a in arrows[floor]], {"track"})
    assert any(floor_of(a.imported) == "core" for a in arrows["track"])  # the reader sees its arrows


@pytest.mark.parametrize("task", TASKS)
def test_layering_no_task_imports_another(arrows, task):
    assert_none_crosses(arrows[task], set(TASKS) - {task})


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of nodes that reach each other (strongly connected components of two or more), each sorted."""
    reach = {node: set(targets) for node, targets in edges.items()}
    changed = True
    while changed:  # the transitive closure: six floors, a handful of rounds
        changed = False
        for node, reached in reach.items():
            wider = reached.union(*(reach.get(r, set()) for r in reached))
            if wider != reached:
                reach[node], changed = wider, True
    groups = {tuple(sorted({n} | {m for m in reach[n] if n in reach.get(m, set())})) for n in reach}
    return sorted(list(g) for g in groups if len(g) > 1)


def test_layering_finds_a_circle_and_only_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_layering_no_circle_between_floors(arrows):
    edges, behind = defaultdict(set), defaultdict(list)
    for floor, found in arrows.items():
        for arrow in found:
            target = floor_of(arrow.imported)
            if target is not None and target != floor:
                edges[floor].add(target)
                behind[floor, target].append(str(arrow))
    found = circles({floor: edges[floor] for floor in FLOORS})
    explained = [f"{a} → {b}: {behind[a, b][0]}" for group in found for a in group for b in group if behind[a, b]]
    assert found == [], "\n".join(explained)


TEXT = "unlearnbench.tasks.text"
TEXT_ROOMS = ("data", "model", "evaluate", "benchmarks")  # bench.py, the task's bench, sits above them


def text_room(dotted: str) -> str | None:
    """The room of the text task a dotted name lies in (`unlearnbench.tasks.text.data.tofu.Tofu` → `data`, the
    bench module → `bench`), or None outside the text task and in its top modules (catalogue, scenario, methods)."""
    head = dotted.removeprefix(f"{TEXT}.").split(".")[0] if dotted.startswith(f"{TEXT}.") else None
    return head if head in (*TEXT_ROOMS, "bench") else None


def test_layering_the_text_tasks_rooms_point_one_way():
    """data/ and model/ import neither benchmarks/ nor bench.py, evaluate/ imports neither, the four rooms draw no
    circle, and no module of the text task reaches itself through its imports (those inside functions too)."""
    files = {module_name(path): path for path in package_files()["tasks.text"]}
    rooms = defaultdict(list)
    for module, path in files.items():
        if text_room(module) is not None:
            rooms[text_room(module)] += arrows_of(path)
    assert set(rooms) == {*TEXT_ROOMS, "bench"}
    upward = [str(a) for room in ("data", "model", "evaluate") for a in rooms[room]
              if text_room(a.imported) in {"benchmarks", "bench"}]
    assert not upward, "imports up the text task's rooms:\n" + "\n".join(upward)
    between = {room: {text_room(a.imported) for a in rooms[room]} & set(TEXT_ROOMS) - {room} for room in TEXT_ROOMS}
    assert between["benchmarks"] >= {"data", "model", "evaluate"}  # the reader sees the rooms' arrows
    assert circles(between) == []
    modules = {module: {name if name in files else name.rpartition(".")[0] for name in
                        (a.imported for a in arrows_of(path))} & set(files) - {module}
               for module, path in files.items()}
    assert circles(modules) == []
