"""The tally task's methods: exact removal of the forget group's values from the mean, and keeping M_o as it is."""

from typing import ClassVar

from unlearnbench.core.method import Method


class TallyMethod(Method):
    task: ClassVar[str] = "tally"
    deterministic: ClassVar[bool] = True


class Subtract(TallyMethod):
    """M_u = (n·M_o − Σ D_f) / (n − |D_f|): the retrained mean, exactly."""

    def unlearn(self, model: float, task) -> float:
        values, forget = task
        return (len(values) * model - values[forget].sum()) / (len(values) - forget.sum())


class Keep(TallyMethod):
    """M_u = M_o: forgets nothing."""

    def unlearn(self, model: float, task) -> float:
        return model
