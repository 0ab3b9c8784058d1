"""The method interface every task shares: `unlearn(model, task)` turns a copy of M_o into M_u.

A method is one module with one class and one YAML in `conf/method/`; the YAML's keys are the constructor's
arguments. A method declares the task it serves (`task`, the config's `task.name`), whether it is deterministic
given M_o (in targeted scenarios), which scenarios it serves and the ranges of its options. Each task derives its
own base from `Method` with what its methods are given (`tasks/image/methods/base.py`, `tasks/text/methods/base.py`,
`tasks/ranking/methods/base.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, option_range_problems
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost

# Ranges of the hyperparameters many methods share, by argument name; a method adds its own in `ranges`.
SHARED_RANGES: dict[str, Range] = {
    "epochs": AT_LEAST_1, "lr": POSITIVE, "momentum": Range(0, 1, high_open=True), "weight_decay": AT_LEAST_0,
    "batch_size": AT_LEAST_1, "forget_batch_size": AT_LEAST_1, "temperature": POSITIVE,
}


def leaves(value: Any) -> list:
    """The plain values of an option that may be a mapping by model, dataset or scenario, or a list."""
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


def keyed(value: Any, names: tuple[str, ...]) -> Any:
    """A setting that may differ by model, dataset or scenario, as the config gives it: a plain value, or a mapping
    keyed by model, dataset or scenario names (nested in any order) with `default` as the fallback, e.g.
    `{default: 10, vit: {full_class: 5, sub_class: 25}}`; `names` are the job's (model, dataset, scenario)."""
    while isinstance(value, Mapping):
        key = next((k for k in (*names, "default") if k in value), None)
        if key is None:
            model, dataset, scenario = names
            raise UserError(f"setting {dict(value)} has no entry for model {model}, dataset {dataset}, scenario "
                            f"{scenario} or 'default'")
        value = value[key]
    return value


class Method(ABC):
    task: ClassVar[str]  # the task it serves (`task.name`): every task's base sets it
    deterministic: ClassVar[bool] = False  # same M_u for every unlearning seed, given M_o, in targeted scenarios
    ranges: ClassVar[dict[str, Range]] = {}  # this method's own option ranges (besides SHARED_RANGES)
    keyed_settings: ClassVar[bool] = True  # any option may be a mapping by model, dataset or scenario

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """One `UserError` naming every option outside its range (`components.build` calls this before the
        constructor, so a bad value fails before any work)."""
        ranges = dict(SHARED_RANGES)
        for klass in reversed(cls.__mro__):
            ranges |= vars(klass).get("ranges", {})
        problems = option_range_problems("method", ranges, options, leaves)
        if problems:
            raise UserError(f"method {options.get('name', cls.__name__)}: {'; '.join(problems)}")

    def __init__(self, name: str) -> None:
        self.name = name

    def serves(self, scenario: Any) -> bool:
        return True

    @abstractmethod
    def unlearn(self, model: Any, task: Any) -> Any:
        """Return M_u, starting from `model` (a copy of M_o that the method may change in place)."""

    def cost(self, measured: Cost, task: Any) -> Cost:
        """The cost to report: what the monitor measured around `unlearn`, unless the method knows better."""
        return measured
