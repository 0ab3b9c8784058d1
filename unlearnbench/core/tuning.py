"""Tuning judged on training seeds it never saw (`experiment=tune`, docs/tuning.md): the search spaces the methods
declare, the tuning's settings and command line, and its record, which the report reads (`tuning.json`; the
objective: `report/compute/tuning.py`).

A method declares what is worth tuning in its YAML, a `tune:` block with one entry per option (read here, never
passed to its constructor):

    tune:
      lr: {low: 1.0e-4, high: 0.1, log: true}       # a real, on a log scale
      epochs: {low: 1, high: 10, int: true}          # an integer
      retain_loss: {choices: [nll, kl]}              # one of a list
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unlearnbench.core.errors import UserError

TUNING = "tuning.json"  # in the sweep folder: the trials and the held-out judgement, written by the sweeper
TRIAL, TUNED, DEFAULT = "trial", "tuned", "default"  # a tuning job's `tune.stage` (its job field `tuning`)


@dataclass(frozen=True)
class Dimension:
    """One option of a method's search space: a range (`log` scale, `integer`) or a list of `choices`."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple | None = None

    def distribution(self):
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.choices is not None:
            return CategoricalDistribution(self.choices)
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(self.low, self.high, log=self.log)

    def override(self, value: Any) -> str:
        """The job override setting the option to `value` (a float in full, so the same point composes the same
        job folder when a sweep resumes)."""
        return f"method.{self.name}={value!r}" if isinstance(value, float) else f"method.{self.name}={value}"


def search_space(method: Mapping[str, Any], options: Sequence[str]) -> list[Dimension]:
    """The `tune:` block of a method's config as dimensions (`options`: the method's valid option names); a
    `UserError` in one line where it declares none or an entry is malformed."""
    name = method.get("name", "?")
    block = method.get("tune")
    if not block:
        raise UserError(f"method {name} declares no search space (a `tune:` block in its YAML), so experiment=tune "
                        f"cannot tune it; give it one with +method.tune.OPTION='{{low: …, high: …}}' or tune "
                        f"another method (docs/tuning.md)")
    return [dimension(name, option, entry, options) for option, entry in block.items()]


def dimension(method: str, option: str, entry: Any, options: Sequence[str]) -> Dimension:
    where = f"the 'tune.{option}' entry of method {method}"
    if option not in options:
        raise UserError(f"{where} must name one of its options ({', '.join(options)}); got {option!r} instead")
    entry = dict(entry) if isinstance(entry, Mapping) else entry
    if isinstance(entry, dict) and "choices" in entry:
        choices = entry["choices"]
        if set(entry) != {"choices"} or not isinstance(choices, Sequence) or isinstance(choices, str) \
                or len(choices) < 2:
            raise UserError(f"{where} must be {{choices: [two or more values]}}; got {entry!r} instead")
        return Dimension(option, choices=tuple(choices))
    if not isinstance(entry, dict):
        raise UserError(f"{where} must be {{low, high[, log, int]}} or {{choices: [...]}}; got {entry!r} instead")
    low, high, log, integer = entry.get("low"), entry.get("high"), entry.get("log", False), entry.get("int", False)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    valid = (not set(entry) - {"low", "high", "log", "int"} and numbers and low < high
             and isinstance(log, bool) and isinstance(integer, bool) and (not log or low > 0)
             and (not integer or (float(low).is_integer() and float(high).is_integer())))
    if not valid:
        raise UserError(f"{where} must be {{low, high[, log: bool, int: bool]}} with low < high (low > 0 on a log "
                        f"scale, whole bounds for an integer); got {entry!r} instead")
    return Dimension(option, float(low), float(high), log, integer)


class Search:
    """Optuna's ask-and-tell over one method's search space, its TPE sampler seeded from `tune.seed` and the
    method's name: the same seed and the same told objectives ask the same points in the same order (what resuming a
    sweep relies on). A failed trial is told as failed, never as a score."""

    def __init__(self, space: Sequence[Dimension], seed: int, method: str) -> None:
        import optuna

        from unlearnbench.runtime.seeding import streams

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = list(space)
        self.study = optuna.create_study(direction="minimize",
                                         sampler=optuna.samplers.TPESampler(seed=streams("tune", seed, method).seed))
        self.distributions = {dimension.name: dimension.distribution() for dimension in self.space}

    def ask(self):
        """The next trial; its point is `trial.params`."""
        return self.study.ask(self.distributions)

    def tell(self, trial, objective: float | None) -> None:
        """The trial's objective, or None for a failed trial."""
        import optuna

        if objective is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, objective)

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        """The job overrides that set a point."""
        return [dimension.override(params[dimension.name]) for dimension in self.space]


@dataclass(frozen=True)
class Settings:
    """`tune.*` of a tuning sweep, checked: the trials, the tuning and held-out training seeds (disjoint), the
    sampler's seed and the objective's metrics."""

    trials: int
    seeds: list[int]
    heldout: list[int]
    seed: int
    objective: list[str] | None

    @classmethod
    def of(cls, config) -> Settings:
        from omegaconf import OmegaConf

        tune = OmegaConf.to_container(config.tune, resolve=True) if config.get("tune") is not None else None
        if tune is None:
            raise UserError("hydra/sweeper=tune needs the tune options: use experiment=tune")
        settings = cls(tune["trials"], list(tune["seeds"]), list(tune["heldout"]), tune["seed"],
                       None if tune["objective"] is None else list(tune["objective"]))
        for name, seeds in (("seeds", settings.seeds), ("heldout", settings.heldout)):
            if not seeds or len(set(seeds)) != len(seeds):
                raise UserError(f"the 'tune.{name}' option must list distinct training seeds, one at least; got "
                                f"{seeds} instead")
        shared = sorted(set(settings.seeds) & set(settings.heldout))
        if shared:
            raise UserError(f"the 'tune.heldout' option must hold training seeds the trials never see; got "
                            f"{settings.heldout}, which shares {', '.join(map(str, shared))} with tune.seeds")
        return settings


SWEEPER_KEYS = ("seeds.train", "tune.stage", "tune.trial")  # set by the sweeper on each job


def split_arguments(arguments: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """([(method, its override)], the other overrides) of the command line: each method of `+method=a,b` is tuned
    on its own; any other sweep, and the options the sweeper sets, are refused in one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    methods, base = [], []
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        key, line = override.get_key_element(), override.input_line
        prefix = line.split("=", 1)[0]
        if override.key_or_group == "method":
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() \
                else [override.get_value_element_as_str()]
            methods += [(value, f"{prefix}={value}") for value in values]
        elif override.key_or_group in SWEEPER_KEYS or key in SWEEPER_KEYS:
            raise UserError(f"experiment=tune sets {override.key_or_group} itself (tune.seeds, tune.heldout); "
                            f"remove {line}")
        elif override.is_sweep_override():
            raise UserError(f"experiment=tune runs one batch of jobs per trial and sweeps nothing else; remove the "
                            f"sweep {line} (tune several methods with +method=a,b)")
        elif override.key_or_group == "methods":
            raise UserError("experiment=tune tunes the methods of +method=NAME[,NAME…], each on its own; remove "
                            f"{line}")
        else:
            base.append(line)
    if not methods:
        raise UserError("experiment=tune tunes the methods of +method=NAME[,NAME…]; got none")
    return methods, base


def write_tuning(folder: Path, tuning: dict) -> None:
    """`tuning.json` whole or not at all (the report's tuning tables are rebuilt from it)."""
    from unlearnbench.core.result import write_json

    write_json(folder / TUNING, tuning)
