"""The text task's scenario: forget whole entities, as TOFU forgets whole authors.

`scenario=forget_entities` takes one of three ways to choose them:
- `split: forget10` (or forget01, forget05): TOFU's fixed splits, the last 1, 5 or 10 % of the entities;
- `fraction: 0.1`: that share of the entities (at least one), drawn with the forget seed;
- `count: 4`: that many entities, drawn with the forget seed.
The retain set is the rest of `full`; the holdout set (the membership attacks' non-members) is the fixed split's
own where the data has one (TOFU's holdout01/05/10), else every holdout record.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.records import FIXED_SPLITS, TextData


@dataclass(frozen=True)
class TextSplits:
    """What a job evaluates on, by split name: the forget and retain sets of training, the holdout set and the two
    general sets; `retain_eval` is the part of the retain set the retain metrics read."""

    forget: list[dict]
    retain: list[dict]
    holdout: list[dict]
    retain_eval: list[dict]
    general_authors: list[dict]
    general_facts: list[dict]
    entities: tuple[str, ...]

    def evaluated(self) -> dict[str, list[dict]]:
        return {"forget": self.forget, "retain": self.retain_eval, "holdout": self.holdout,
                "general_authors": self.general_authors, "general_facts": self.general_facts}


class ForgetEntities:
    targeted = False  # the forget set is a draw (or a fixed split), not a class: no method is deterministic per class

    def __init__(self, name: str = "forget_entities", split: str | None = "forget10", fraction: float | None = None,
                 count: int | None = None) -> None:
        chosen = [option for option, value in (("split", split), ("fraction", fraction), ("count", count))
                  if value is not None]
        if len(chosen) != 1:
            raise UserError(f"scenario {name}: set exactly one of scenario.split, scenario.fraction and "
                            f"scenario.count (set: {', '.join(chosen) or 'none'}); the others null")
        if split is not None and split not in FIXED_SPLITS:
            raise UserError(f"scenario {name}: split {split!r} is not a fixed split; valid: "
                            f"{', '.join(FIXED_SPLITS)}")
        if fraction is not None and not 0 < fraction < 1:
            raise UserError(f"scenario {name}: fraction={fraction} is not valid; valid: in (0, 1)")
        if count is not None and count < 1:
            raise UserError(f"scenario {name}: count={count} is not valid; valid: >= 1")
        self.name, self.fixed_split, self.fraction, self.count = name, split, fraction, count

    def targets(self, data: TextData) -> list[str]:
        """One target, named by how its entities are chosen."""
        if self.fixed_split is not None:
            return [self.fixed_split]
        return [f"{self.fraction:g}" if self.fraction is not None else f"{self.count}_entities"]

    def forget_entities(self, data: TextData, generator: torch.Generator) -> tuple[str, ...]:
        entities = data.entities()
        if self.fixed_split is not None:
            if self.fixed_split not in data.fixed:
                raise UserError(f"dataset {data.name} has no fixed split {self.fixed_split}; valid: "
                                f"{', '.join(data.fixed) or 'none (use scenario.fraction or scenario.count)'}")
            return tuple(data.fixed[self.fixed_split])
        count = self.count if self.count is not None else max(1, round(self.fraction * len(entities)))
        if count >= len(entities):
            raise UserError(f"scenario {self.name}: count={count} leaves no entity to retain; valid: 1 to "
                            f"{len(entities) - 1} (dataset {data.name} has {len(entities)} entities)")
        chosen = torch.randperm(len(entities), generator=generator)[:count].sort().values
        return tuple(entities[i] for i in chosen.tolist())

    def split(self, data: TextData, generator: torch.Generator) -> TextSplits:
        """The splits of the forget set chosen here (a drawn one from `generator`, of the forget seed)."""
        entities = self.forget_entities(data, generator)
        forget, retain = data.split(entities)
        if not retain:
            raise UserError(f"scenario {self.name}: split {self.fixed_split} of dataset {data.name} holds all "
                            f"{len(entities)} entities of its full set, which leaves nothing to retain (M_r is "
                            f"trained on the rest); valid: a fixed split that leaves at least one entity of full")
        unscorable = [r["entity"] for r in forget if not r.get("paraphrased_answer") or not r.get("perturbed_answer")]
        if unscorable:
            raise UserError(f"dataset {data.name}: the forget set's entity {unscorable[0]!r} has no paraphrased and "
                            f"perturbed answers, which the truth ratio needs; choose a fixed split "
                            f"(scenario.split={'|'.join(data.fixed) or 'forget10'})")
        holdout = data.holdouts.get(self.fixed_split, data.holdout)
        retain_eval = retain if data.retain_perturbed is None else [
            r for r in data.retain_perturbed if r["entity"] not in entities]
        if not retain_eval:
            raise UserError(f"dataset {data.name}: every row of its retain_perturbed is about an entity of the forget "
                            f"set {self.targets(data)[0]}, which leaves the retain metrics nothing to read; forget "
                            f"fewer entities, or use the files of one download of TOFU (whose retain_perturbed is "
                            f"about retained authors)")
        return TextSplits(forget=forget, retain=retain, holdout=holdout, retain_eval=retain_eval,
                          general_authors=data.real_authors, general_facts=data.world_facts, entities=entities)
