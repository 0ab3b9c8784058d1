"""The tally task's own option: `evaluation.decimals`, to which its records are rounded (a job of another task has
no such option)."""

from dataclasses import dataclass

from unlearnbench.core.config import AT_LEAST_0, Evaluation, ranged, task_options


@dataclass
class TallyEvaluation(Evaluation):
    decimals: int = ranged(12, AT_LEAST_0)


task_options("tally", evaluation=TallyEvaluation)
