"""Progress while a job runs: the per-epoch curve against an independent loop, the live bar only on a terminal,
and the stage and epoch lines of a spawned rank in the job's log file."""

from __future__ import annotations

import os
import pty
import textwrap
from pathlib import Path

import forkserver
import pytest
import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import nn

from unlearnbench.runtime import progress
from unlearnbench.runtime.progress import duration
from unlearnbench.tasks.image.train import cross_entropy_epochs


class FixedBatches:
    """Batches of unequal sizes (the last one short), the same every epoch: what `cross_entropy_epochs` iterates."""

    def __init__(self, generator: torch.Generator) -> None:
        inputs, labels = torch.randn(23, 5, generator=generator), torch.randint(0, 3, (23,), generator=generator)
        self.batches = [(inputs[i:i + 8], labels[i:i + 8]) for i in range(0, 23, 8)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def model_and_optimizer(fabric: Fabric):
    torch.manual_seed(3)
    model = nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.8 ** step)
    model, optimizer = fabric.setup(model, optimizer)
    return model, optimizer, scheduler


def reference_curve(model, optimizer, scheduler, batches, epochs: int) -> dict:
    """The curve written out by hand: per epoch the sample-weighted mean loss, the accuracy, the last step's rate."""
    curve = {"epoch": [], "loss": [], "train_acc": [], "lr": []}
    for epoch in range(1, epochs + 1):
        loss_sum = correct = seen = 0.0
        for inputs, labels in batches:
            logits = model(inputs).float()
            loss = F.cross_entropy(logits, labels)
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
            seen += len(labels)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
        for key, value in (("epoch", epoch), ("loss", loss_sum / seen), ("train_acc", correct / seen), ("lr", lr)):
            curve[key].append(value)
    return curve


def test_the_curve_is_the_epochs_weighted_loss_accuracy_and_rate_and_training_is_unchanged():
    fabric = Fabric(accelerator="cpu", devices=1)
    batches = FixedBatches(torch.Generator().manual_seed(0))
    model, optimizer, scheduler = model_and_optimizer(fabric)
    with progress.training("probe") as run:
        accuracy = cross_entropy_epochs(fabric, model, optimizer, batches, 4, scheduler)
    trained = [p.detach().clone() for p in model.parameters()]
    model, optimizer, scheduler = model_and_optimizer(fabric)
    expected = reference_curve(model, optimizer, scheduler, batches, 4)
    assert run.curve["epoch"] == expected["epoch"] == [1, 2, 3, 4]
    for key in ("loss", "train_acc", "lr"):
        assert run.curve[key] == pytest.approx(expected[key], rel=1e-12, abs=1e-15), key
    assert accuracy == run.curve["train_acc"][-1]
    assert all(torch.equal(a, b) for a, b in zip(trained, model.parameters(), strict=True))  # metering is read-only


def test_loops_outside_a_watched_run_keep_no_curve_and_nested_runs_are_separate():
    fabric = Fabric(accelerator="cpu", devices=1)
    batches = FixedBatches(torch.Generator().manual_seed(1))
    model, optimizer, scheduler = model_and_optimizer(fabric)
    cross_entropy_epochs(fabric, model, optimizer, batches, 1, scheduler)  # no run watched: nothing to keep
    with progress.training("outer") as outer:
        cross_entropy_epochs(fabric, model, optimizer, batches, 2)
        with progress.training("inner") as inner:
            cross_entropy_epochs(fabric, model, optimizer, batches, 1)
        cross_entropy_epochs(fabric, model, optimizer, batches, 1)  # a second loop continues the run's epochs
    assert outer.curve["epoch"] == [1, 2, 3] and inner.curve["epoch"] == [1]


def test_durations_read_as_a_person_reads_them():
    assert [duration(s) for s in (0.04, 12.4, 200, 3 * 3600 + 125)] == ["0.0 s", "12 s", "3.3 min", "3 h 02 min"]


TRAIN = textwrap.dedent("""
    import logging, sys
    import torch
    from lightning_fabric import Fabric
    sys.path[:0] = [{tests!r}, {helpers!r}]  # this module, and the tests' modules it imports
    from test_progress import FixedBatches, model_and_optimizer
    from unlearnbench.runtime import progress
    from unlearnbench.tasks.image.train import cross_entropy_epochs
    from unlearnbench.runtime.errors import FileOnly
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logging.getLogger().handlers[0].addFilter(FileOnly())  # as the job's console handler (conf/config.yaml)
    progress.configure(progress={live}, rank_zero=True)
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, scheduler = model_and_optimizer(fabric)
    with progress.training("probe run"):
        cross_entropy_epochs(fabric, model, optimizer, FixedBatches(torch.Generator().manual_seed(0)), 3)
    print("END")
""")


def on_a_terminal(live: bool, **env: str) -> str:
    """What a tiny training run prints when its stdout is a terminal (a pseudo-terminal here)."""
    here = Path(__file__).resolve().parent
    source = TRAIN.format(tests=str(here), helpers=str(here.parent), live=live)
    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "CI"} | env
    # `python -c source`, forked from the tests' fork server (forkserver.py: torch and Lightning already imported)
    child = forkserver.Forked(forkserver.server(), "-c", [source], Path.cwd(), environment, terminal=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    child.wait(timeout=120)
    os.close(leader)
    assert child.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.processes
def test_a_terminal_gets_a_live_bar_instead_of_epoch_lines():
    shown = on_a_terminal(live=True)
    assert "END" in shown and "probe run" in shown and "━" in shown  # rich's bar
    assert "probe run: epoch 1/3" not in shown  # the bar says it; the job's log file keeps the lines


@pytest.mark.processes
@pytest.mark.parametrize(("live", "env"), [(True, {"CI": "true"}), (False, {})])
def test_under_ci_or_with_progress_off_no_bar_is_drawn(live, env):
    shown = on_a_terminal(live=live, **env)
    assert "END" in shown and "━" not in shown
    assert ("probe run: epoch 3/3" in shown) == live  # CI logs keep the epoch lines; progress=false drops them
