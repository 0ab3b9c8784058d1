"""One reader per contract: `result.json` and `examples.parquet` are opened by `core/result.py` alone, and what
those readers refuse.

The AST check follows a path built from a file's name constant (`RESULT`, `EXAMPLES`) or its literal (through
assignments, loops and comprehensions in the same function) to a raw read of it: `open()` for reading,
`.read_text()`, `.read_bytes()`, `.open()`, `json.load(s)`, `read_parquet`, `read_table`. Writers (`publish`,
`write_json`, `open(..., "w")`, `to_parquet`) and globs or `stat()` for existence are not reads."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import unlearnbench
from unlearnbench.core.result import SCHEMA, SchemaError, finished, read_examples, read_result, stored_result

ROOT = Path(unlearnbench.__file__).resolve().parent.parent
READER = "unlearnbench/core/result.py"
RAW_READS = {"read_text", "read_bytes", "open"}
JSON_READS = {"load", "loads", "read_parquet", "read_table", "ParquetFile"}  # readers given the path or file
CONTRACTS = {"result.json": "RESULT", "examples.parquet": "EXAMPLES"}  # a job folder's file: its name's constant


def names_file(node: ast.AST, tainted: set[str], file: str = "result.json") -> bool:
    """Whether the expression mentions the contract's `file`: its name's constant, the literal, or a name holding a
    path built from them."""
    constant = CONTRACTS[file]
    for part in ast.walk(node):
        if isinstance(part, ast.Constant) and isinstance(part.value, str) and file in part.value:
            return True
        if isinstance(part, ast.Name) and (part.id == constant or part.id in tainted):
            return True
        if isinstance(part, ast.Attribute) and part.attr == constant:
            return True
    return False


def bound_names(target: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(target) if isinstance(node, ast.Name)}


def tainted_names(scope: ast.AST, file: str) -> set[str]:
    """The names in `scope` that hold a result path, to a fixed point (`path = folder / RESULT`, `for p in
    sweep.glob("*/result.json")`, `(path,) = …`)."""
    tainted: set[str] = set()
    while True:
        before = len(tainted)
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                if names_file(node.value, tainted, file):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    tainted |= set().union(*(bound_names(t) for t in targets))
            elif isinstance(node, ast.For | ast.comprehension) and names_file(node.iter, tainted, file):
                tainted |= bound_names(node.target)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None and names_file(
                    node.context_expr, tainted, file):
                tainted |= bound_names(node.optional_vars)
        if len(tainted) == before:
            return tainted


def writes(call: ast.Call) -> bool:
    """`open(path, "w")`, `path.open("w")` and their kin: a writer, not a reader."""
    position = 0 if isinstance(call.func, ast.Attribute) else 1
    modes = [*call.args[position:position + 1], *(k.value for k in call.keywords if k.arg == "mode")]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax") for m in modes)


def raw_reads(call: ast.Call, tainted: set[str], file: str) -> bool:
    function = call.func
    if isinstance(function, ast.Attribute) and function.attr in RAW_READS and names_file(function.value, tainted,
                                                                                          file):
        return not writes(call)
    if isinstance(function, ast.Name) and function.id == "open" and call.args:
        return names_file(call.args[0], tainted, file) and not writes(call)
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    return name in JSON_READS and any(names_file(argument, tainted, file) for argument in call.args)


def result_reads(source: str, file: str = "result.json") -> list[int]:
    """Line numbers of the raw reads of the contract's `file` in `source`, scope by scope (each function, and the
    module's own statements)."""
    if file not in source and CONTRACTS[file] not in source:
        return []
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)]
    module = ast.Module(body=[s for s in tree.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef
                                                                     | ast.ClassDef)], type_ignores=[])
    lines = set()
    for scope in [module, *functions]:
        tainted = tainted_names(scope, file)
        lines |= {n.lineno for n in ast.walk(scope) if isinstance(n, ast.Call) and raw_reads(n, tainted, file)}
    return sorted(lines)


def product_modules() -> list[Path]:
    return sorted([*(ROOT / "unlearnbench").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")])


@pytest.mark.parametrize("source", [
    "def f(folder):\n    return json.loads((folder / RESULT).read_text())\n",
    "def f(folder):\n    path = folder / 'result.json'\n    with open(path) as file:\n        return json.load(file)\n",
    "def f(sweep):\n    return [json.loads(p.read_bytes()) for p in sweep.glob('*/result.json')]\n",
    "def f(sweep):\n    for path in sorted(sweep.rglob(files.RESULT)):\n        with path.open() as file:\n"
    "            yield file\n",
    "def f(sweep):\n    (path,) = sweep.glob('*/result.json')\n    return json.loads(path.read_text())\n",
])
def test_the_check_finds_a_raw_read_of_a_result_file(source):
    assert result_reads(source) != []
    assert result_reads(source, "examples.parquet") == []


@pytest.mark.parametrize("source", [
    "def f(folder):\n    return pd.read_parquet(Path(folder) / EXAMPLES, columns=['conf'])\n",
    "def f(folder):\n    path = folder / 'examples.parquet'\n    return pq.read_table(path)\n",
    "def f(result):\n    return read_parquet(result.with_name(files.EXAMPLES))\n",
])
def test_the_check_finds_a_raw_read_of_an_examples_file(source):
    assert result_reads(source, "examples.parquet") != [] and result_reads(source) == []


@pytest.mark.parametrize("source", [
    "def f(folder, result):\n    publish(folder / RESULT, result)\n    write_json(folder / 'result.json', result)\n",
    "def f(folder, text):\n    path = folder / RESULT\n    with open(path, 'w') as file:\n        file.write(text)\n",
    "def f(folder, text):\n    with (folder / RESULT).open('w') as file:\n        file.write(text)\n",
    "def f(sweep):\n    return [read_result(p) for p in sweep.glob('*/result.json')]\n",
    "def f(sweep):\n    return any(sweep.glob('*/result.json')) and (sweep / RESULT).stat().st_size\n",
    "def f(folder):\n    path = folder / RESULT\n\ndef g(path):\n    return path.read_text()\n",
    "def f(folder, frame):\n    frame.to_parquet(folder / EXAMPLES)\n    return read_examples(folder / EXAMPLES)\n",
])
def test_the_check_leaves_writers_globs_and_the_reader_alone(source):
    assert result_reads(source) == [] and result_reads(source, "examples.parquet") == []


@pytest.mark.parametrize("file", CONTRACTS)
def test_each_contract_file_is_opened_by_core_result_alone(file):
    scanned = {path.relative_to(ROOT).as_posix(): path for path in product_modules()}
    assert {READER, "unlearnbench/report/read/collect.py", "unlearnbench/report/compute/derived.py",
            "hydra_plugins/unlearnbench_launcher/resume.py", "hydra_plugins/unlearnbench_launcher/tune.py",
            "unlearnbench/core/job.py"} <= set(scanned)
    readers = {name: lines for name, path in scanned.items()
               if (lines := result_reads(path.read_text(encoding="utf-8"), file))}
    assert set(readers) == {READER}  # the reader itself is found: the check is not blind to this tree's forms


def test_a_re_added_reader_elsewhere_is_caught():
    source = (ROOT / "hydra_plugins/unlearnbench_launcher/resume.py").read_text(encoding="utf-8")
    assert result_reads(source) == []
    added = source + "\n\ndef peek(folder):\n    return json.loads((folder / RESULT).read_text())\n"
    assert result_reads(added) == [len(added.splitlines())]
    added = source + "\n\ndef peek(folder):\n    return pd.read_parquet(Path(folder) / EXAMPLES)\n"
    assert result_reads(added, "examples.parquet") == [len(added.splitlines())]


def job_result(**changes) -> dict:
    result = {"schema": SCHEMA, "status": "complete", "error": None, "job": {"task": "image", "seed_train": 0},
              "records": [{"target": "3", "method": None, "role": "original", "metric": "acc",
                           "split": "forget_test", "value": 0.9}]}
    return {**result, **changes}


def test_the_reader_takes_a_folder_or_its_file_and_checks_the_schema(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps(job_result()))
    assert read_result(tmp_path) == read_result(tmp_path / "result.json") == job_result()
    assert finished(tmp_path) and stored_result(tmp_path)["records"][0]["value"] == 0.9
    (tmp_path / "result.json").write_text(json.dumps(job_result(schema=SCHEMA + 1)))
    with pytest.raises(SchemaError, match=rf"^schema: {SCHEMA + 1} is not one this version reads \(1 to {SCHEMA}\)$"):
        read_result(tmp_path)
    (tmp_path / "result.json").write_text(json.dumps(job_result(schema=1)))
    assert read_result(tmp_path)["schema"] == 1  # written before metric catalogues: still read


@pytest.mark.parametrize(("content", "reason"), [
    (json.dumps(job_result())[:40], "Unterminated string|Expecting"),  # a file cut short
    (json.dumps(job_result(status="done")), "^status: 'done' is not complete or failed$"),
    (json.dumps(job_result(job={"seed_train": "0"})), "^job.seed_train: '0' is not an integer$"),
])
def test_a_damaged_result_is_refused_in_one_line_and_counts_as_not_run(tmp_path, content, reason):
    (tmp_path / "result.json").write_text(content)
    with pytest.raises(ValueError, match=reason) as refused:
        read_result(tmp_path)
    assert "\n" not in str(refused.value)
    assert stored_result(tmp_path) is None and not finished(tmp_path)


def test_a_missing_result_is_an_os_error_and_no_result(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_result(tmp_path)
    assert stored_result(tmp_path) is None and not finished(tmp_path / "result.json")


@pytest.mark.processes
def test_the_report_reads_results_without_importing_torch():
    """core/result.py keeps torch, Fabric and OmegaConf out of its imports: the report reads through it."""
    code = ("import sys, unlearnbench.report.build, unlearnbench.core.result; "
            "print(sorted({'torch', 'lightning_fabric', 'omegaconf'} & set(sys.modules)))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_the_examples_reader_checks_the_contracts_columns_and_rows(tmp_path):
    import pandas as pd

    rows = pd.DataFrame({"target": ["3", "3"], "role": ["retrained", "unlearned"], "method": [None, "ssd"],
                         "split": ["forget_train"] * 2, "index": [4, 4], "label": [3, 3], "conf": [0.5, -1.0],
                         "loss": [0.2, 2.0], "pred": [3, 1]})
    rows.to_parquet(tmp_path / "examples.parquet")
    assert read_examples(tmp_path).equals(rows)
    assert list(read_examples(tmp_path / "examples.parquet", columns=["role", "conf"]).columns) == ["role", "conf"]
    for change, reason in [({"role": ["retrained", "student"]}, "^role 'student' is not one of original, "),
                           ({"method": ["ssd", "ssd"]}, "^a method on an original or retrained row"),
                           ({"index": [4, -1]}, "^a negative example index$"),
                           ({"conf": ["0.5", "x"]}, r"^column 'conf' is \w+, not float$")]:
        rows.assign(**change).to_parquet(tmp_path / "examples.parquet")
        with pytest.raises(SchemaError, match=reason):
            read_examples(tmp_path)
    (tmp_path / "examples.parquet").write_bytes(b"PAR1 cut short")
    with pytest.raises(SchemaError, match=r"^not a readable Parquet file \(\w+: "):
        read_examples(tmp_path)
