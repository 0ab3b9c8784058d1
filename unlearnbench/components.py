"""Building components from their configs, with a clear error for an option the component does not take.

A component config is a `_target_` (a class or function) and its keyword arguments. Checking the arguments against
the target's signature before calling it turns a misspelled option into one line that lists the valid ones, while a
TypeError raised inside a constructor stays what it is: a bug, with its traceback.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from unlearnbench.errors import UserError


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


def option_names(target: Any) -> list[str]:
    """Keyword arguments `target` accepts, following `**kwargs` up a class's bases (e.g. a dataset's loader options
    followed by the options every dataset takes)."""
    functions = [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) \
        else [target]
    names: list[str] = []
    for function in functions:
        parameters = inspect.signature(function).parameters.values()
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and p.name != "self"]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return list(dict.fromkeys(names))


def build(cfg: Mapping[str, Any], kind: str, **extra: Any) -> Any:
    """Call the config's `_target_` with its other keys (and `extra`) as keyword arguments."""
    target = target_of(cfg, kind)
    kwargs = {k: v for k, v in cfg.items() if k != "_target_"} | extra
    valid = option_names(target)
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise UserError(f"{kind} {cfg.get('name', '')}: unknown option {', '.join(unknown)}; "
                        f"valid options: {', '.join(v for v in valid if v not in extra)}")
    check = getattr(target, "check_options", None)  # a component may declare the ranges of its options
    if callable(check):
        check(kwargs)
    return target(**kwargs)
