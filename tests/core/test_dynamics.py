"""One method's points (core/dynamics.py over runtime/during.py's watch), on a loop one can follow by hand: where
the points fall, which epoch each belongs to, what a model's flags are after a point, and what the method's time
leaves out."""

from __future__ import annotations

import time

from torch import nn

from unlearnbench.core.dynamics import Dynamics
from unlearnbench.core.outcome import Outcome
from unlearnbench.runtime import during
from unlearnbench.runtime.monitor import Cost


class Counting:
    """An evaluation whose point records the number of updates the model has seen (M_o: none), and leaves the
    model in eval mode, as an evaluation does."""

    def during(self, method: str, model):
        if model is None:
            return {("updates", None): 0}
        model.eval()
        return {("updates", None): model.updates}


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(2)
        self.updates = 0


def run(every, epochs: int, steps_per_epoch: int, announce: bool = True, pause_s: float = 0.0):
    outcome = Outcome()
    dynamics = Dynamics({"evaluation": {"during": {"every": every}}}, outcome, Counting(), "3", "loop")
    model = Model().train()
    model.norm.eval()  # a method's own choice (a frozen normalisation), which a point must keep
    with dynamics.watching():
        for _ in range(epochs):
            for _ in range(steps_per_epoch):
                model.updates += 1
                time.sleep(pause_s)
                during.stepped(model)
            if announce:
                during.epoch_ended()
    dynamics.end(model)
    return outcome, dynamics, model


def points(outcome: Outcome) -> list[tuple[int, int | None, int]]:
    return [(r["step"], r["epoch"], r["value"]) for r in outcome.records if "step" in r]


def test_points_at_step_0_every_n_steps_and_the_end_each_in_its_epoch():
    outcome, _, model = run(every=2, epochs=3, steps_per_epoch=3)
    # steps 2, 4, 6 and the end (9); a point at an epoch's last step (6) belongs to that epoch
    assert points(outcome) == [(0, 0, 0), (2, 0, 2), (4, 1, 4), (6, 2, 6), (8, 2, 8), (9, 3, 9)]
    assert model.training and not model.norm.training  # every module's flag as the method left it


def test_an_epoch_schedule_and_a_loop_without_epochs():
    outcome, _, _ = run(every="2 epochs", epochs=5, steps_per_epoch=2)
    assert points(outcome) == [(0, 0, 0), (4, 2, 4), (8, 4, 8), (10, 5, 10)]
    outcome, _, _ = run(every=4, epochs=2, steps_per_epoch=3, announce=False)
    assert points(outcome) == [(0, None, 0), (4, None, 4), (6, None, 6)]


def test_a_method_without_steps_has_its_one_update_at_step_1():
    outcome, _, _ = run(every=1, epochs=0, steps_per_epoch=0)
    assert points(outcome) == [(0, None, 0), (1, None, 0)]
    assert [r["metric"] for r in outcome.records if "step" not in r] == ["during_time_s"]


def test_the_methods_time_leaves_out_the_points_inside_its_run():
    outcome, dynamics, _ = run(every=1, epochs=1, steps_per_epoch=2, pause_s=0.0)
    assert dynamics.watch.inside_s <= dynamics.watch.spent_s
    assert dynamics.cost(Cost(time_s=10.0)).time_s == 10.0 - dynamics.watch.inside_s
    assert dynamics.cost(Cost(time_s=None)).time_s is None
    (spent,) = [r["value"] for r in outcome.records if r["metric"] == "during_time_s"]
    assert spent == dynamics.watch.spent_s


def test_off_watches_nothing_and_adds_nothing():
    outcome, dynamics, model = run(every=None, epochs=2, steps_per_epoch=2)
    assert outcome.records == [] and dynamics.watch is None and model.updates == 4
    assert dynamics.cost(Cost(time_s=3.0)).time_s == 3.0
