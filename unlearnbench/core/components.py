"""Building components from their configs, with a clear error for an option the component does not take.

A component config is a `_target_` (a class or function) and its keyword arguments. Checking the arguments against
the target's signature before calling it turns a misspelled option into one line that lists the valid ones, while a
TypeError raised inside a constructor stays what it is: a bug, with its traceback.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unlearnbench.runtime.errors import UserError


def locate(path: str) -> Any:
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name is not None and not ".".join(parts[:cut]).startswith(error.name):
                raise  # the module exists but imports something missing: a real error, not a wrong path
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(f"no module named {parts[0]!r}", name=parts[0])


def searches_cwd() -> bool:
    """Whether imports look in the current folder: not under the console script (its own folder is first on
    sys.path), but under `python -m unlearnbench` and `run_sweep`."""
    here = Path.cwd().resolve()
    return any(Path(entry or ".").resolve() == here for entry in sys.path)


def target_of(cfg: Mapping[str, Any], kind: str) -> Any:
    path = cfg.get("_target_")
    if not path:
        raise UserError(f"{kind} config {dict(cfg)} has no _target_ (the class or function that builds it)")
    try:
        return locate(path)
    except ModuleNotFoundError as error:
        if error.name != path.split(".")[0]:
            raise UserError(f"{kind} {cfg.get('name', '')}: cannot import _target_ {path} ({error})") from None
        searched = "is searched too" if searches_cwd() else "is not searched"
        raise UserError(f"{kind} {cfg.get('name', '')}: cannot import _target_ {path}: Python finds no package "
                        f"{error.name!r} among the installed packages and PYTHONPATH (the current folder, "
                        f"{Path.cwd()}, {searched}); install it (pip install -e DIR, DIR holding its "
                        f"pyproject.toml) or put the folder that holds {error.name}/ on PYTHONPATH (PYTHONPATH=. "
                        f"when that is the current folder)") from None
    except (ImportError, AttributeError) as error:
        raise UserError(f"{kind} {cfg.get('name', '')}: cannot import _target_ {path} ({error})") from None


def option_types(target: Any) -> dict[str, Any]:
    """Keyword arguments `target` accepts and their annotations (Any where there is none, or where it cannot be
    resolved), following `**kwargs` up a class's bases (e.g. a dataset's loader options followed by the options
    every dataset takes); the first function that names an option decides its type."""
    functions = [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) \
        else [target]
    options: dict[str, Any] = {}
    for function in functions:
        parameters = inspect.signature(function).parameters.values()
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # a forward reference only a type checker sees: leave that function's options unchecked
            hints = {}
        for p in parameters:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                options.setdefault(p.name, hints.get(p.name, Any))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return options


def option_names(target: Any) -> list[str]:
    return list(option_types(target))


def admits(annotation: Any, value: Any) -> bool:
    """Whether `value`, as a YAML config or a command line gives it, fits `annotation`: an int where a float is
    asked for, never a bool where a number is (YAML's true is no count), any list where a sequence is."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or isinstance(annotation, typing.TypeVar):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(admits(member, value) for member in arguments)
    if origin is typing.Literal:
        return value in arguments
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    kind = origin or annotation
    if not isinstance(kind, type):
        return True  # a construct this check does not model: the constructor decides
    if issubclass(kind, Mapping):
        return isinstance(value, Mapping)
    if issubclass(kind, Sequence) and not issubclass(kind, str | bytes):
        return isinstance(value, Sequence) and not isinstance(value, str | bytes) and all(
            admits(element(arguments), item) for item in value)
    return isinstance(value, kind)


def element(arguments: tuple) -> Any:
    """The type of every item of a sequence type with these arguments: list[int]'s, tuple[int, ...]'s; Any for a
    bare sequence or a tuple of mixed types."""
    return arguments[0] if len(arguments) == 1 or arguments[1:] == (Ellipsis,) else Any


PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "true or false values"}


def described(annotation: Any) -> str:
    """What `annotation` admits, in a user's words."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(described(member) for member in arguments)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, arguments))
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if annotation in names:
        return names[annotation]
    kind = origin or annotation
    if isinstance(kind, type) and issubclass(kind, Mapping):
        return "a mapping"
    if isinstance(kind, type) and issubclass(kind, Sequence):
        return f"a list of {PLURALS.get(element(arguments), 'values')}"
    return getattr(kind, "__name__", str(kind))


def type_problems(target: Any, options: Mapping[str, Any], kind: str) -> list[str]:
    """The options whose value does not fit the annotation of the argument it becomes. A target whose options may
    be mappings by model, dataset or scenario name (`keyed_settings`, methods.base.setting) has each value of such
    a mapping checked instead."""
    annotations, keyed = option_types(target), getattr(target, "keyed_settings", False)
    problems = []
    for name, value in options.items():
        annotation = annotations.get(name, Any)
        leaves = [value]
        while keyed and any(isinstance(v, Mapping) for v in leaves) and not admits(annotation, {}):
            leaves = [leaf for v in leaves for leaf in (v.values() if isinstance(v, Mapping) else [v])]
        wrong = [leaf for leaf in leaves if not admits(annotation, leaf)]
        if wrong:
            shown = "null" if wrong[0] is None else repr(wrong[0])
            problems.append(f"{kind}.{name}={shown} is not valid; valid: {described(annotation)}")
    return problems


SEARCH_SPACE = "tune"  # a method's search space (core/tuning.py): read by experiment=tune, never a constructor's


def build(cfg: Mapping[str, Any], kind: str, **extra: Any) -> Any:
    """Call the config's `_target_` with its other keys (and `extra`) as keyword arguments, but its search space."""
    target = target_of(cfg, kind)
    kwargs = {k: v for k, v in cfg.items() if k not in ("_target_", SEARCH_SPACE)} | extra
    valid = option_names(target)
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise UserError(f"{kind} {cfg.get('name', '')}: unknown option {', '.join(unknown)}; "
                        f"valid options: {', '.join(v for v in valid if v not in extra)}")
    problems = type_problems(target, {k: v for k, v in kwargs.items() if k not in extra}, kind)
    if problems:
        raise UserError(f"{kind} {cfg.get('name', '')}: {'; '.join(problems)}")
    check = getattr(target, "check_options", None)  # a component may declare the ranges of its options
    if callable(check):
        check(kwargs)
    return target(**kwargs)
