"""The tuning study, by one command (`make tune-study`): by how much tuning on one training seed overstates a method,
and whether tuning changes the ranking.

For each task (digits with a narrow ResNet and four image methods; the built-in TOFU-format data with three text
methods) two `experiment=tune` sweeps under the local launcher: the methods tuned on one training seed, and tuned
on three, each judged on the same five held-out training seeds (disjoint from both), with the methods' defaults on
those seeds beside. Then per task a table: per method, each tuning's objective on its tuning seeds, on the held-out
seeds (95% interval), its optimism, and the defaults' held-out objective; and the methods' held-out mean rank with
their defaults against with the points tuned on three seeds (the sweeps' leaderboard.csv). With `--docs` the
tables go into docs/tuning.md between its `<!-- tune-study -->` markers, with the machine they ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- tune-study -->", "<!-- /tune-study -->"
HELDOUT = "[10,11,12,13,14]"
DESIGNS = {"one seed": "[0]", "three seeds": "[0,1,2]"}
TASKS = {
    "digits": ["+method=finetune,gradient_ascent,neggrad_plus,salun", "tune.trials=12", "model.width=8",
               "train.epochs=3", "train.milestones=[2]", "train.batch_size=64", "train.lr=0.05"],
    "text": ["+method=npo,grad_diff,simnpo", "tune.trials=8", "dataset=fictitious", "model=causal_lm",
             "scenario=forget_entities"],
}


def sweep(folder: Path, task: str, seeds: str) -> Path:
    """One tuning sweep into `folder` (resumed where it is already there)."""
    command = [str(Path(sys.executable).parent / "unlearnbench"), "experiment=tune", *TASKS[task],
               f"tune.seeds={seeds}", f"tune.heldout={HELDOUT}", "runtime.print_table=false",
               f"hydra.sweep.dir={folder}", "report.figures=false"]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=REPO)
    return folder / "report"


def fmt(value) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def table(reports: dict[str, Path]) -> str:
    tunings = {design: pd.read_csv(report / "tuning.csv").set_index("method") for design, report in reports.items()}
    board = pd.read_csv(reports["three seeds"] / "leaderboard.csv")
    ranks = board[board["metric"] == "mean_rank"].set_index(["tuning", "method"])["mean_rank"]
    header = ["method", *(f"tuned on {d}: tuning / held out [95%] / optimism" for d in DESIGNS),
              "defaults, held out", "mean rank held out: defaults → tuned (three seeds)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in tunings["three seeds"].index:
        cells = [method]
        for design in DESIGNS:
            row = tunings[design].loc[method]
            cells.append(f"{fmt(row['objective_tuning'])} / {fmt(row['objective_heldout'])} "
                         f"[{fmt(row['heldout_low'])}, {fmt(row['heldout_high'])}] / {fmt(row['optimism'])}")
        cells.append(fmt(tunings["three seeds"].loc[method, "objective_default"]))
        rank = [ranks.get((stage, method)) for stage in ("default", "tuned")]
        cells.append(" → ".join(f"{r:.2f}" if r == r and r is not None else "–" for r in rank))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    import os
    import platform

    import torch

    model = platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tune_study")
    parser.add_argument("--docs", action="store_true", help="write the tables into docs/tuning.md")
    parser.add_argument("--fresh", action="store_true", help="remove --out first")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
    sections = []
    for task in TASKS:
        reports = {design: sweep(args.out / f"{task}_{design.replace(' ', '_')}", task, seeds)
                   for design, seeds in DESIGNS.items()}
        sections.append(f"**{task}** ({TASKS[task][0].split('=', 1)[1].replace(',', ', ')}; "
                        f"{TASKS[task][1]}, held out on training seeds {HELDOUT}):\n\n{table(reports)}")
    text = "\n\n".join(sections) + f"\n\nRan on {machine()}."
    print(text)
    if args.docs:
        page = REPO / "docs" / "tuning.md"
        content = page.read_text()
        start, end = content.index(BEGIN) + len(BEGIN), content.index(END)
        page.write_text(content[:start] + "\n" + text + "\n" + content[end:])


if __name__ == "__main__":
    main()
