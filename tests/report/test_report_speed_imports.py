"""What a console run and its report leave out for speed: matplotlib is imported only for figures (a report with
`report.figures=false` never loads it), and the console script composes the config once before the sweep (Hydra's
`get_mode` composition is skipped) while the sweep still runs as a multirun with `hydra.mode=MULTIRUN`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unlearnbench import cli

BUILD = """
import sys
from pathlib import Path
from unlearnbench.report.build import build_report
sweep, out = Path(sys.argv[1]), Path(sys.argv[2])
without = build_report([sweep], out / "without", figures=False, permutations=20)
loaded_without = "matplotlib" in sys.modules
with_figures = build_report([sweep], out / "with", figures=True, permutations=20)
print(f"{loaded_without} {'matplotlib' in sys.modules} {len(without.figures)} {len(with_figures.figures)}")
"""


def write_job(folder: Path, seed_train: int, seed_unlearn: int) -> None:
    """A complete job of two methods with a training curve: a report that has figures to draw."""
    job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
           "method": "all", "seed_train": seed_train, "seed_unlearn": seed_unlearn, "seed_eval": seed_unlearn}
    records = [{"target": "3", "method": method, "role": role, "metric": "acc", "split": "forget_test",
                "value": value + 0.01 * seed_train + 0.002 * seed_unlearn}
               for method, role, value in ((None, "original", 0.9), (None, "retrained", 0.0),
                                           ("finetune", "unlearned", 0.1), ("ssd", "unlearned", 0.3))]
    curves = [{"model": "original", "target": None, "method": None, "seed": seed_train, "cached": False,
               "epoch": [1, 2], "loss": [1.0, 0.5], "train_acc": [0.5, 0.8], "lr": [0.1, 0.01]}]
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"schema": 1, "status": "complete", "error": None, "job": job,
                                                    "records": records, "curves": curves}))


@pytest.mark.processes  # a fresh interpreter: the one place where matplotlib is not imported yet
def test_figures_off_never_imports_matplotlib(tmp_path):
    """In a fresh interpreter: no matplotlib after a report without figures; the same results with figures do
    import it and draw (so the check can fail)."""
    for seed_train in (0, 1, 2):
        for seed_unlearn in (10, 11):
            write_job(tmp_path / "sweep" / f"t{seed_train}_u{seed_unlearn}", seed_train, seed_unlearn)
    done = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "sweep"), str(tmp_path / "reports")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded_without, loaded_with, drawn_without, drawn_with = done.stdout.split()
    assert (loaded_without, loaded_with, drawn_without) == ("False", "True", "0")
    assert int(drawn_with) > 0
    assert not (tmp_path / "reports" / "without" / "figures").exists()
    assert (tmp_path / "reports" / "with" / "report.md").read_text().count("figures/") >= int(drawn_with)


@pytest.fixture
def composed(monkeypatch, tmp_path):
    """The console script run in this process on options that fail their check before any job (train.epochs=0):
    the configs Hydra composed (`load_configuration`'s `run_mode`, with the overrides) and the exit message."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    calls = []
    original = ConfigLoaderImpl.load_configuration

    def counting(self, config_name, overrides, run_mode, **options):
        calls.append((str(run_mode), list(overrides)))
        return original(self, config_name, overrides, run_mode, **options)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counting)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["unlearnbench", "train.epochs=0", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    return calls, str(stop.value.code)


def test_console_script_composes_once_before_the_sweep(composed):
    from hydra._internal.hydra import Hydra

    calls, message = composed
    assert "epochs" in message  # the option's check ran: the sweep's config was composed and reached the callback
    assert len(calls) == 1  # Hydra's get_mode composed a second one before
    run_mode, overrides = calls[0]
    assert run_mode == "RunMode.MULTIRUN" and overrides[-1] == "hydra.mode=MULTIRUN"
    assert Hydra.get_mode.__name__ == "get_mode"  # Hydra's own again after the run
