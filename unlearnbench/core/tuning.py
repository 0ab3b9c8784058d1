"""Tuning judged on training seeds it never saw (`experiment=tune`, docs/tuning.md): the search spaces the methods
declare, the seeded search that starts from each method's defaults, the tuning's settings (replicates and their
seed sets) and command line, how a method's rerun stops at a tuned step (`tune.stop_step`: `stopping_of`), and its
record, which the report reads (`tuning.json`; the objective: `report/compute/tuning.py`).

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

from unlearnbench.runtime.errors import UserError, invalid

TUNING = "tuning.json"  # in the sweep folder: the trials and the held-out judgement, written by the sweeper
TRIAL, TUNED, DEFAULT = "trial", "tuned", "default"  # a tuning job's `tune.stage` (its job field `tuning`)
DEFAULTS, RANDOM, TPE = "defaults", "random", "tpe"  # how a trial's point was drawn (a trial's `drawn`)
DEFAULTS_TRIAL = 0  # trial 0 of every replicate runs the method's config unchanged


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

    def contains(self, value: Any) -> bool:
        """Whether `value` is a point of this dimension (Optuna keeps an enqueued number outside a range with a
        warning, and refuses a value not among the choices)."""
        if self.choices is not None:
            return any(value == choice and isinstance(value, bool) == isinstance(choice, bool)
                       for choice in self.choices)
        if not isinstance(value, int | float) or isinstance(value, bool) or not self.low <= value <= self.high:
            return False
        return not self.integer or float(value).is_integer()

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
    def refused(valid: str, got: object) -> UserError:
        return invalid(f"tune.{option}", f"method {method}", valid, got, kind="entry")

    if option not in options:
        raise refused(f"named after one of its options ({', '.join(options)})", repr(option))
    entry = dict(entry) if isinstance(entry, Mapping) else entry
    if isinstance(entry, dict) and "choices" in entry:
        choices = entry["choices"]
        if set(entry) != {"choices"} or not isinstance(choices, Sequence) or isinstance(choices, str) \
                or len(choices) < 2:
            raise refused("{choices: [two or more values]}", repr(entry))
        return Dimension(option, choices=tuple(choices))
    if not isinstance(entry, dict):
        raise refused("{low, high[, log, int]} or {choices: [...]}", repr(entry))
    low, high, log, integer = entry.get("low"), entry.get("high"), entry.get("log", False), entry.get("int", False)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    valid = (not set(entry) - {"low", "high", "log", "int"} and numbers and low < high
             and isinstance(log, bool) and isinstance(integer, bool) and (not log or low > 0)
             and (not integer or (float(low).is_integer() and float(high).is_integer())))
    if not valid:
        raise refused("{low, high[, log: bool, int: bool]} with low < high (low > 0 on a log scale, whole bounds "
                      "for an integer)", repr(entry))
    return Dimension(option, float(low), float(high), log, integer)


@dataclass(frozen=True)
class Defaults:
    """A method's own values of its search space's options, as its jobs compose them, and the options whose value
    lies outside its dimension (a text method's `lr: null`, which takes the model's rate; SSD's α per dataset)."""

    params: dict[str, Any]
    outside: tuple[str, ...] = ()

    @property
    def told(self) -> bool:
        """Whether the sampler is told the defaults' trial: only where every value is a point of the space. TPE's
        model of a dimension is a density over its range or choices, so a value outside cannot enter it (Optuna
        refuses a value not among the choices), and telling it a clipped value would credit a point that never ran."""
        return not self.outside


def defaults_of(method: Mapping[str, Any], space: Sequence[Dimension]) -> Defaults:
    """The defaults' point of `method` (its resolved config) in `space`."""
    params = {dimension.name: method.get(dimension.name) for dimension in space}
    return Defaults(params, tuple(d.name for d in space if not d.contains(params[d.name])))


def sampler_seed(seed: int, method: str, replicate: int = 0) -> int:
    """The TPE sampler's seed of one replicate of a method's tuning: replicate 0 from `tune.seed` and the method
    (the single tuning's), replicate r > 0 from the replicate too (`runtime.seeding.streams`)."""
    from unlearnbench.runtime.seeding import streams

    return (streams("tune", seed, method) if replicate == 0 else streams("tune", seed, method, replicate)).seed


@dataclass
class Point:
    """A trial's point: its options' values, how it was `drawn` (the method's defaults, TPE's random start-up, or
    TPE's model), and the Optuna trial it answers (None for defaults outside the space: the sampler never sees it)."""

    params: dict[str, Any]
    drawn: str
    trial: Any = None


class Search:
    """Optuna's ask-and-tell over one method's search space, its TPE sampler seeded from `tune.seed`, the method's
    name and the replicate (`sampler_seed`): the same seed and the same told objectives ask the same points in the
    same order (what resuming a sweep relies on). A failed trial is told as failed, never as a score.

    With `defaults`, the first point is the method's defaults: enqueued (Optuna's `enqueue_trial`) where they lie
    in the space, so that TPE learns from them, and then `startup_trials` random points follow (TPE's
    `n_startup_trials` counts the told defaults, so it is given one more); outside the space, the defaults' trial
    is run and scored but never told. Either way TPE's model draws a point only once the study holds
    `n_startup_trials` complete trials (failed ones do not count), and `Point.drawn` says which points it drew."""

    def __init__(self, space: Sequence[Dimension], seed: int, method: str, replicate: int = 0,
                 startup_trials: int = 10, defaults: Defaults | None = None) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space, self.defaults = list(space), defaults
        self.seed = sampler_seed(seed, method, replicate)
        self.startup = startup_trials + int(defaults is not None and defaults.told)
        self.study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(
            seed=self.seed, n_startup_trials=self.startup))
        self.distributions = {dimension.name: dimension.distribution() for dimension in self.space}
        if defaults is not None and defaults.told:
            self.study.enqueue_trial({d.name: int(defaults.params[d.name]) if d.integer else defaults.params[d.name]
                                      for d in self.space})
        self.asked = 0

    def ask(self) -> Point:
        """The next trial's point: the defaults first (where given), then TPE's."""
        import optuna

        first, self.asked = self.asked == 0, self.asked + 1
        if first and self.defaults is not None:
            trial = self.study.ask(self.distributions) if self.defaults.told else None
            return Point(dict(self.defaults.params), DEFAULTS, trial)
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        modelled = len(self.study.get_trials(deepcopy=False, states=states)) >= self.startup
        trial = self.study.ask(self.distributions)
        return Point(dict(trial.params), TPE if modelled else RANDOM, trial)

    def tell(self, point: Point, objective: float | None) -> None:
        """The point's objective, or None for a failed trial (nothing for defaults the sampler never saw)."""
        import optuna

        if point.trial is None:
            return
        if objective is None:
            self.study.tell(point.trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(point.trial, objective)

    def overrides(self, params: Mapping[str, Any], drawn: str | None = None) -> list[str]:
        """The job overrides that set a point: none for the defaults, whose jobs run the method's config unchanged."""
        if drawn == DEFAULTS:
            return []
        return [dimension.override(params[dimension.name]) for dimension in self.space]


@dataclass(frozen=True)
class Settings:
    """`tune.*` of a tuning sweep, checked: the trials, the tuning seeds of each replicate (`sets`: `tune.seeds`
    R times, or `tune.seed_sets`, disjoint), the held-out training seeds (disjoint from every tuning seed), the
    sampler's seed, TPE's random start-up trials and the objective's metrics."""

    trials: int
    seeds: list[int]
    heldout: list[int]
    seed: int
    objective: list[str] | None
    startup_trials: int = 10
    sets: tuple[tuple[int, ...], ...] = ()
    stop_step: bool = False  # the stopping step tuned too, from the trials' step records

    @property
    def replicates(self) -> int:
        return len(self.sets)

    @classmethod
    def of(cls, config) -> Settings:
        from omegaconf import OmegaConf

        tune = OmegaConf.to_container(config.tune, resolve=True) if config.get("tune") is not None else None
        if tune is None:
            raise UserError("hydra/sweeper=tune needs the tune options: use experiment=tune")
        seeds, heldout = list(tune["seeds"]), list(tune["heldout"])
        distinct("heldout", heldout)
        sets = replicate_sets(tune.get("seed_sets"), tune.get("replicates", 1), seeds, heldout)
        stop_step = tune.get("stop_step", False)
        if not isinstance(stop_step, bool):
            raise invalid("tune.stop_step", "experiment=tune", "true or false", stop_step)
        return cls(tune["trials"], seeds, heldout, tune["seed"],
                   None if tune["objective"] is None else list(tune["objective"]), tune.get("startup_trials", 10),
                   sets, stop_step)


def distinct(name: str, seeds: list[int]) -> None:
    if not seeds or len(set(seeds)) != len(seeds):
        raise invalid(f"tune.{name}", "experiment=tune", "a list of distinct training seeds, one at least", seeds)


def replicate_sets(seed_sets: list[list[int]] | None, replicates: int, seeds: list[int],
                   heldout: list[int]) -> tuple[tuple[int, ...], ...]:
    """The tuning seeds of each replicate: `tune.seeds` for each of `tune.replicates`, or one set each of
    `tune.seed_sets` (their number is the replicates' where `tune.replicates` is left at 1); a `UserError` in one
    line where sets are empty, repeat a seed, share one, or share one with `tune.heldout`."""
    if seed_sets is None:
        distinct("seeds", seeds)
        held_out_apart(heldout, seeds, "tune.seeds")
        return (tuple(seeds),) * replicates
    if not seed_sets or any(not group or len(set(group)) != len(group) for group in seed_sets):
        raise invalid("tune.seed_sets", "experiment=tune", "one or more sets, each of distinct training seeds, one "
                      "at least", seed_sets)
    if replicates not in (1, len(seed_sets)):
        raise invalid("tune.replicates", "experiment=tune", f"1 or the number of tune.seed_sets ({len(seed_sets)})",
                      replicates)
    every = [seed for group in seed_sets for seed in group]
    repeated = sorted({seed for seed in every if every.count(seed) > 1})
    if repeated:
        raise UserError(f"the 'tune.seed_sets' option must hold disjoint sets of training seeds; got {seed_sets}, "
                        f"where {', '.join(map(str, repeated))} is in two sets")
    held_out_apart(heldout, every, "tune.seed_sets")
    return tuple(tuple(group) for group in seed_sets)


def held_out_apart(heldout: list[int], tuning: list[int], option: str) -> None:
    shared = sorted(set(tuning) & set(heldout))
    if shared:
        raise UserError(f"the 'tune.heldout' option must hold training seeds the trials never see; got {heldout}, "
                        f"which shares {', '.join(map(str, shared))} with {option}")


IMAGE = "unlearnbench.tasks.image.methods."
# The image methods whose run of e epochs is the first e epochs of a longer run (the same data order, updates and
# learning rates: nothing in them depends on the epoch count), so `method.epochs=e` reruns a trial to its epoch e.
STOP_AT_EPOCH = {f"{IMAGE}{path}" for path in ("finetune.FineTune", "gradient_ascent.GradientAscent",
                                                "neggrad_plus.NegGradPlus", "random_labels.RandomLabels",
                                                "salun.SalUn", "scrub.Scrub", "bad_teacher.BadTeacher")}
NOT_STOPPABLE = {  # why a shorter run of these is not the start of a longer one (the refusal says)
    f"{IMAGE}l1_sparse.L1Sparse": "its l1 weight decays to 0 at its last epoch, so a shorter run decays faster",
    f"{IMAGE}unsir.Unsir": "it runs two phases (impair, then repair) whose epochs are counted apart",
    f"{IMAGE}ssd.SSD": "it takes no steps (one update)",
    f"{IMAGE}lfssd.LFSSD": "it takes no steps (one update)",
}
TEXT_LOOP = ("unlearnbench.tasks.text.methods.base", "ForgetRetainMethod")  # the text task's shared loop
STOPPABLE = ("the image methods finetune, gradient_ascent, neggrad_plus, random_labels, salun, scrub and bad_teacher "
             "(at an epoch, evaluation.during.every='N epochs'), and the text task's forget-retain methods with a "
             "constant schedule (at a step, max_steps)")


@dataclass(frozen=True)
class Stopping:
    """How a method's rerun stops at the step a tuning chose (`tune.stop_step`): the override `key` that stops it
    (the image methods' `method.epochs`, the text loop's `max_steps`) and the `unit` it counts, "epoch" or "step",
    in which the trials' step records are read."""

    key: str
    unit: str

    def override(self, step: int, epoch: float | None) -> str:
        """The held-out jobs' override that stops the method at a chosen step record (its epoch for an epoch
        count)."""
        return f"{self.key}={int(epoch) if self.unit == 'epoch' else int(step)}"


def stopping_of(method: Mapping[str, Any], config: Mapping[str, Any]) -> Stopping:
    """How `method` (its composed config) stops at a chosen step in the jobs of `config` (the composed job config);
    a `UserError` in one line where the trials record no steps (`evaluation.during.every` unset), or where a rerun
    to a step is not the start of the trials' longer run."""
    from unlearnbench.core.components import target_of
    from unlearnbench.runtime.during import Schedule

    name = method.get("name", "?")
    schedule = Schedule.parse(((config.get("evaluation") or {}).get("during") or {}).get("every"))
    if schedule is None:
        raise UserError("tune.stop_step=true chooses the stopping step from the trials' step records: set "
                        "evaluation.during.every (an image method stops at an epoch: '1 epoch'; a text method at a "
                        "step: N)")
    target = target_of(method, "method")
    path = f"{target.__module__}.{target.__qualname__}"
    if any((c.__module__, c.__name__) == TEXT_LOOP for c in getattr(target, "__mro__", ())):
        return text_stopping(name, method, (config.get("train") or {}).get("unlearn") or {})
    if path in STOP_AT_EPOCH:
        if schedule.unit != "epoch":
            raise UserError(f"tune.stop_step=true reruns method {name} to a whole number of epochs (method.epochs), "
                            f"so its trials must evaluate at epochs: set evaluation.during.every='N epochs' (got "
                            f"{config['evaluation']['during']['every']!r})")
        return Stopping("method.epochs", "epoch")
    why = NOT_STOPPABLE.get(path, "it has no option that stops its run at a step")
    raise UserError(f"tune.stop_step=true cannot rerun method {name} to a chosen step: {why}; the methods that can: "
                    f"{STOPPABLE}")


def text_stopping(name: str, method: Mapping[str, Any], loop: Mapping[str, Any]) -> Stopping:
    """The text loop stops at `max_steps`: the job's `train.unlearn.max_steps` where it is set (it rules over the
    method's own), else `method.max_steps`. Its linear schedule decays to 0 at the last step, so a run cut by
    `max_steps` is the start of a longer one only with the constant schedule (the warm-up counts epochs of the
    forget set, the same in both)."""
    schedule = loop.get("schedule") or method.get("schedule", "linear")
    if schedule != "constant":
        raise UserError(f"tune.stop_step=true cannot rerun text method {name} to a chosen step with its {schedule} "
                        f"schedule: max_steps would end the decay at that step, which the trial's longer run did "
                        f"not; set method.schedule=constant (train.unlearn.schedule=constant where the job sets it)")
    return Stopping("train.unlearn.max_steps" if loop.get("max_steps") is not None else "method.max_steps", "step")


SWEEPER_KEYS = ("seeds.train", "tune.stage", "tune.trial", "tune.replicate")  # set by the sweeper on each job


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
