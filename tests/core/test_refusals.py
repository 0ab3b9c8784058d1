"""One way to refuse, read from the code (issue 57, item 4), over unlearnbench/, hydra_plugins/, scripts/ and
benchmarks/. A user meets one shape of message: a `UserError` (runtime/errors.py) whose one line says what is wrong
and what is valid, built by `invalid()` where an option is at fault ("the 'x' option of Y must be …; got …
instead"), by `bad_file()` where a file is ("file F: …"), else by `UserError("…")`; and only the CLI (cli.py) turns
an error into an exit status. So:

- no `raise` of a builtin exception that bad input would bring to a user as a traceback or a bare message
  (`REFUSED`: ValueError, TypeError, RuntimeError, KeyError, SystemExit…). Allowed, as no refusals: what Python's
  protocols ask for (AttributeError from `__getattr__`, NotImplementedError, StopIteration), OSError and its kind for
  I/O faults, AssertionError for an internal error that no input reaches, and re-raising a caught error;
- no exit outside cli.py: no `SystemExit`, `sys.exit`, `os._exit`, `exit()`, `quit()` or `….exit()` of an argparse
  parser (a script's `main` hands its work to `cli.run_script`). argparse's own usage refusal, `parser.error`, which
  prints the usage with its line, stays the parser's;
- invalid()'s wording ("must be" … "got" … "instead", in one string, f-strings and implicit concatenations joined)
  only in runtime/errors.py: elsewhere it is a call to `invalid()`;
- every exception class is a UserError, except the faults and the control flow in `NOT_REFUSALS`, each with why.

`PENDING` lists what files that are not yet converted still hold, each entry with its owner; an entry that no longer
matches anything fails too, so that the list only shrinks. A failure names the file, the line and what it holds.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("unlearnbench", "hydra_plugins", "scripts", "benchmarks")
CLI = "unlearnbench/cli.py"
ERRORS = "unlearnbench/runtime/errors.py"

# Builtin exceptions that, raised, reach a user as a traceback or a bare message: a refusal is a UserError instead.
REFUSED = ("Exception", "BaseException", "ValueError", "TypeError", "RuntimeError", "KeyError", "IndexError",
           "LookupError", "ArithmeticError", "SystemExit")
WORDING = re.compile(r"\bmust be\b.*\bgot\b.*\binstead\b", re.DOTALL)

# Exception classes that are no refusal: a fault of the machine or a peer, or control flow between the layers.
NOT_REFUSALS = {
    "EndSweep": "carries a refusal or a fault that ends the whole sweep past Hydra's `except Exception` to the CLI",
    "WriteError": "an OSError: a file that cannot be written (a full disk, a read-only folder)",
    "RoundAbandoned": "control flow: a rank leaves its lockstep round (a BaseException no method swallows)",
    "PeerFailed": "a fault: another rank of the job failed",
    "RankDied": "a fault: a rank's process died",
    "NonFiniteStep": "an ArithmeticError: a training step gave a non-finite loss (the job records it)",
    "Diverged": "a fault: a method's training diverged (recorded as the method's failure)",
    "Interrupted": "a KeyboardInterrupt: Ctrl-C or SIGTERM at a safe point",
}


@dataclass(frozen=True)
class Finding:
    """One thing the rule forbids: the file (from the repository root), its line, and what it is."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


@dataclass(frozen=True)
class Pending:
    """Findings allowed for now: those in files under `prefix` whose `what` holds `what`; `owner` converts them."""

    prefix: str
    what: str
    owner: str

    def allows(self, finding: Finding) -> bool:
        return finding.file.startswith(self.prefix) and self.what in finding.what


PENDING = [
    # Kept, not pending: no refusal but a spawned rank's process ending with status 1 and no traceback, its parent
    # reading why from the job folder (runtime/ranks.py `_in_step`); no user's error passes there.
    Pending("unlearnbench/runtime/ranks.py", "SystemExit", "kept: a spawned rank's quiet end"),
]


def sources() -> list[Path]:
    return sorted(p for top in SOURCES for p in (ROOT / top).rglob("*.py"))


def text_of(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's literal parts joined (implicit concatenation is one node already)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "…".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def raised_name(node: ast.Raise) -> str | None:
    """`raise X(…)` or `raise X`: X, where it is a plain name."""
    target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return target.id if isinstance(target, ast.Name) else None


def is_exit(node: ast.AST) -> str | None:
    """What exits the process at this node, if anything: SystemExit named, sys.exit, os._exit, exit(), quit(), an
    argparse parser's .exit()."""
    if isinstance(node, ast.Name) and node.id == "SystemExit":
        return "SystemExit"
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    if isinstance(function, ast.Name) and function.id in ("exit", "quit"):
        return f"{function.id}()"
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
        owner, name = function.value.id, function.attr
        if (owner, name) in (("sys", "exit"), ("os", "_exit")) or (name == "exit" and "parser" in owner):
            return f"{owner}.{name}()"
    return None


def exception_bases(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """{class name: its base names} for every class of the sources."""
    return {node.name: [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def is_exception(name: str, bases: dict[str, list[str]], seen: frozenset = frozenset()) -> bool:
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return True
    return name not in seen and any(is_exception(b, bases, seen | {name}) for b in bases.get(name, []))


def is_user_error(name: str, bases: dict[str, list[str]], seen: frozenset = frozenset()) -> bool:
    return name == "UserError" or (name not in seen and any(is_user_error(b, bases, seen | {name})
                                                             for b in bases.get(name, [])))


def findings_of(file: str, tree: ast.Module, bases: dict[str, list[str]]) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None and raised_name(node) in REFUSED:
            found.append(Finding(file, node.lineno, f"raise {raised_name(node)}"))
        if file != CLI and (exit_ := is_exit(node)):
            found.append(Finding(file, node.lineno, f"exit {exit_}"))
        if file != ERRORS and (text := text_of(node)) is not None and WORDING.search(text):
            found.append(Finding(file, node.lineno, f"wording {text[:60]!r}: a hand copy of invalid()'s"))
        if isinstance(node, ast.ClassDef) and node.name != "UserError" and is_exception(node.name, bases) \
                and not is_user_error(node.name, bases) and node.name not in NOT_REFUSALS:
            found.append(Finding(file, node.lineno, f"class {node.name}: an exception class that is no UserError"))
    return found


def all_findings() -> list[Finding]:
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
             for p in sources()}
    bases = exception_bases(trees)
    return [f for file, tree in trees.items() for f in findings_of(file, tree, bases)]


def test_every_refusal_is_a_user_error_and_only_the_cli_exits():
    assert len(sources()) > 100  # the walk sees the whole tree
    found = all_findings()
    forbidden = [f for f in found if not any(p.allows(f) for p in PENDING)]
    assert not forbidden, "\n" + "\n".join(map(str, forbidden))


def test_every_pending_entry_still_allows_something():
    """The allow-list only shrinks: an entry whose findings are gone is removed with them."""
    found = all_findings()
    stale = [p for p in PENDING if not any(p.allows(f) for f in found)]
    assert not stale, stale


def test_the_rule_sees_each_kind_of_offence():
    """The checker itself: a source with one of each finding gives each, and the allowed forms give none."""
    offending = '''
import sys
class Refused(ValueError): pass
def f(parser, x):
    if x: raise ValueError("bad")
    if x: raise TypeError
    if x: raise SystemExit("unlearnbench: no")
    if x: sys.exit(2)
    if x: parser.exit(2, "no")
    return f"the 'x' option of f must be positive; got {x} " "instead"
'''
    allowed = '''
from unlearnbench.runtime.errors import UserError, bad_file, invalid
class Refused(UserError): pass
class Narrower(Refused): pass
def f(parser, x, path):
    if x: raise invalid("x", "f", "positive", x)
    if x: raise bad_file(path, "holds no table")
    if x: raise Narrower("no")
    if x: raise NotImplementedError
    if x: raise AssertionError("an internal order")
    if x: parser.error("--x must be positive")
    try:
        pass
    except OSError:
        raise
'''
    def found(source: str) -> list[str]:
        tree = ast.parse(source)
        return sorted("wording" if f.what.startswith("wording") else f.what.split(":")[0]
                      for f in findings_of("scripts/x.py", tree, exception_bases({"x": tree})))

    assert found(offending) == ["class Refused", "exit SystemExit", "exit parser.exit()", "exit sys.exit()",
                                "raise SystemExit", "raise TypeError", "raise ValueError", "wording"]
    assert found(allowed) == []
