"""Selection and judgement on different examples: which part of an evaluation set a tuning's job scores
(`experiment=tune`, core/tuning.py, docs/tuning.md).

A tuning chooses a method's point by the objective of its trials, then judges that point and the method's defaults on
held-out training seeds. Held-out training seeds remove the luck of the seeds, but not the luck of the examples: where
a metric is scored on examples outside the training set (test images, the membership attacks' non-members, general
questions no model trains on), the chosen point fits those examples' noise too, and judging it on the same examples
understates the error of tuning, the selection bias of Cawley & Talbot (2010), "On over-fitting in model selection
and subsequent selection bias in performance evaluation" (JMLR 11), which nested validation avoids. So each such set
is split once into two disjoint parts: the trials (`tune.stage` trial) score one, the held-out judgement (stages
tuned and default) the other. The forget and retain sets, and what probes their content, are the object of
unlearning (what must be forgotten or kept): every job scores them whole.

The parts are drawn from `streams("validation", tune.seed, set name)`, so every job of a tuning sees the same parts,
whatever its training seed, point or machine; the trials' part holds round(validation_fraction · n) of the set's n
examples (halves rounded up, the product taken exactly), and each part one at least. Outside tuning (no `tune`, or
`tune.stage` null) a job scores every example, as it always has.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from unlearnbench.core.tuning import TRIAL
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import streams

TRIALS, HELDOUT = "trials", "heldout"  # the two parts of a set


@dataclass(frozen=True)
class Part:
    """The examples of the set `name` (of `size` examples) that a tuning's job scores: `rows`, ascending positions in
    the set, the trials' part or the held-out judgement's (`part`)."""

    name: str
    part: str
    rows: np.ndarray
    size: int

    def describe(self) -> dict:
        """What result.json's `dataset` records of it (under `scored`)."""
        return {"part": self.part, "examples": len(self.rows), "of": self.size}


def trials_count(name: str, size: int, fraction: float) -> int:
    """round(fraction · size), halves up, exact (0.15 · 10 is 1.5, where the floating-point product is below it);
    a `UserError` in one line where either part would be empty."""
    count = math.floor(Fraction(str(fraction)) * size + Fraction(1, 2))
    if size < 2:
        raise UserError(f"the set {name!r} holds {size} example(s), too few to give the trials and the held-out "
                        f"judgement one each (tune.validation_fraction={fraction}); a tuning needs 2 at least")
    if not 0 < count < size:
        low, high = 1 / (2 * size), 1 - 1 / (2 * size)
        raise UserError(f"the 'tune.validation_fraction' option must leave the trials and the held-out judgement one "
                        f"example each of the set {name!r} ({size} examples), from {low:.4g} to below {high:.4g}; "
                        f"got {fraction} instead")
    return count


def parts(name: str, size: int, fraction: float, seed: int) -> dict[str, np.ndarray]:
    """The set's two parts, {TRIALS: rows, HELDOUT: rows}, disjoint, covering it, each ascending: the first
    round(fraction · size) positions of one permutation drawn from `seed` (tune.seed) and the set's name go to the
    trials, the rest to the held-out judgement."""
    order = streams("validation", seed, name).numpy.permutation(size)
    count = trials_count(name, size, fraction)
    return {TRIALS: np.sort(order[:count]), HELDOUT: np.sort(order[count:])}


def scored_part(config: Mapping[str, Any], name: str, size: int) -> Part | None:
    """The part of the set `name` (of `size` examples) that the job of `config` scores: the trials' where
    `tune.stage` is trial, the other where it is tuned or default; None outside tuning (every example)."""
    tune = config.get("tune")
    stage = None if tune is None else tune.get("stage")
    if stage is None:
        return None
    part = TRIALS if stage == TRIAL else HELDOUT
    rows = parts(name, size, tune["validation_fraction"], tune["seed"])[part]
    return Part(name, part, rows, size)
