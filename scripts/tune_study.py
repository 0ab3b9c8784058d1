"""The tuning study, by one command (`make tune-study`): how much tuning on few training seeds overstates a method,
what tuning buys over the method's defaults, and how much one tuning's verdict depends on its own luck.

Digits with a narrow ResNet (width 8, three epochs) and two image methods that fit the 30 minutes on 2 cores:
gradient ascent (it trains on D_f alone) and SSD (no training: its importances over D are computed once per trained
model and reused by every trial; its defaults, α per dataset, lie outside its declared space, so TPE is not told its
trial 0). Each is tuned by `experiment=tune` under the local launcher. One sweep per design: `--replicates` (3)
replicates of the whole tuning, each with its own sampler seed and its own set of tuning training seeds, `--trials`
(30) trials each (the defaults' trial, TPE's 10 random start-up points, then TPE's model). Design "one seed" tunes
on the sets [[0], [1], [2]], design "three seeds" on [[3, 4, 5], [6, 7, 8], [9, 10, 11]]: no two sets share a seed.
Every replicate of both designs is judged on the same `--heldout` (5) held-out training seeds that follow them
(12–16). Per design a table of each replicate's tuning, held-out, optimism and gain with their 95% intervals (the
sweeps' tuning.csv), and one across replicates (`compute.tuning.replicate_rows`). With `--docs` the tables go into
tuning.md of `--docs-dir` (the repository's docs/) between its `<!-- tune-study -->` markers, with the machine they
ran on.

Extra arguments are Hydra overrides for every sweep; `--trials`, `--replicates`, `--sizes`, `--heldout` and
`--methods` shrink the study (a test runs it so).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from unlearnbench.core.files import missing_blocks

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- tune-study -->", "<!-- /tune-study -->"
METHODS = ["gradient_ascent", "ssd"]
DIGITS = ["model.width=8", "train.epochs=3", "train.milestones=[2]", "train.batch_size=64", "train.lr=0.05"]
NAMES = {1: "one seed", 2: "two seeds", 3: "three seeds"}


def designs(sizes: list[int], replicates: int, heldout: int) -> tuple[dict[str, list[list[int]]], list[int]]:
    """({design: its replicates' tuning seed sets}, the held-out seeds): consecutive training seeds, so that no set
    shares a seed with another set of any design, nor with the held-out seeds that follow them all."""
    found, start = {}, 0
    for size in sizes:
        found[NAMES.get(size, f"{size} seeds")] = [list(range(start + r * size, start + (r + 1) * size))
                                                   for r in range(replicates)]
        start += replicates * size
    return found, list(range(start, start + heldout))


def sweep(folder: Path, methods: list[str], trials: int, sets: list[list[int]], heldout: list[int],
          overrides: list[str]) -> Path:
    """One design's tuning sweep into `folder` (resumed where it is already there); its report folder."""
    command = [str(Path(sys.executable).parent / "unlearnbench"), "experiment=tune", f"+method={','.join(methods)}",
               f"tune.trials={trials}", f"tune.seed_sets={compact(sets)}", f"tune.heldout={compact(heldout)}",
               *DIGITS, "runtime.print_table=false", "report.figures=false", f"hydra.sweep.dir={folder}", *overrides]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)
    return folder / "report"


def compact(value) -> str:
    return str(value).replace(" ", "")


def fmt(value) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def with_interval(value, low, high) -> str:
    return fmt(value) if low != low else f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def replicate_table(tuning: pd.DataFrame) -> str:
    """Per method and replicate: the chosen point, its objective and the defaults' on the tuning seeds, held out
    with its interval, the optimism and the gain with theirs, the gain's p-value."""
    header = ["method", "replicate", "tuning seeds", "best point (trial)", "tuning: best / defaults",
              "held out [95%]", "optimism [95%]", "gain [95%]", "gain p"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in tuning.itertuples(index=False):
        cells = [row.method, str(row.replicate), str(row.tuning_seeds), f"{row.best} ({row.best_trial})",
                 f"{fmt(row.objective_tuning)} / {fmt(row.defaults_tuning)}",
                 with_interval(row.objective_heldout, row.heldout_low, row.heldout_high),
                 with_interval(row.optimism, row.optimism_low, row.optimism_high),
                 with_interval(row.gain, row.gain_low, row.gain_high), fmt(row.gain_p)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def spread_table(tunings: dict[str, pd.DataFrame]) -> str:
    """Per method and design, across replicates: the chosen points' held-out objective, how many distinct points,
    how many beat the defaults on their tuning seeds, the mean optimism and gain with their t-intervals over the
    replicates; and the defaults held out."""
    from unlearnbench.report.compute.tuning import replicate_rows

    header = ["method", "design", "chosen point held out: mean ± std [min, max]", "distinct points",
              "beat defaults (tuning seeds)", "mean optimism [95%]", "mean gain [95%]", "defaults, held out"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for design, tuning in tunings.items():
        for row in replicate_rows(tuning).itertuples(index=False):
            default = tuning.loc[tuning["method"] == row.method, "objective_default"].iloc[0]
            cells = [row.method, design, f"{fmt(row.heldout_mean)} ± {fmt(row.heldout_std)} "
                                         f"[{fmt(row.heldout_min)}, {fmt(row.heldout_max)}]",
                     f"{row.distinct_points} of {row.replicates}", f"{row.beat_defaults} of {row.replicates}",
                     with_interval(row.optimism_mean, row.optimism_low, row.optimism_high),
                     with_interval(row.gain_mean, row.gain_low, row.gain_high), fmt(default)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def study_text(tunings: dict[str, pd.DataFrame], sets: dict[str, list[list[int]]], heldout: list[int],
               methods: list[str], trials: int) -> str:
    sections = [f"**digits** ({', '.join(methods)}; tune.trials={trials} per replicate, trial 0 the defaults; "
                f"held out on training seeds {compact(heldout)} for every replicate):"]
    for design, tuning in tunings.items():
        random = int(tuning["random_search"].astype(bool).sum())
        searched = f"; {random} of {len(tuning)} searches were random search" if random else ""
        sections.append(f"Tuned on {design} (seed sets {compact(sets[design])}{searched}):\n\n"
                        f"{replicate_table(tuning)}")
    sections.append(f"Across replicates:\n\n{spread_table(tunings)}")
    return "\n\n".join(sections)


def machine() -> str:
    import contextlib
    import os
    import platform

    import torch

    model = platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__}"


def write_docs(docs: Path, text: str) -> None:
    from unlearnbench.core.files import replace_block
    from unlearnbench.runtime.files import write_atomically

    page = docs / "tuning.md"
    write_atomically(page, replace_block(page.read_text(), BEGIN, END, f"{BEGIN}\n{text}\n{END}"))
    print(f"{page} updated")


def arguments() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tune_study", help="folder of the sweeps")
    parser.add_argument("--docs", action="store_true", help="write the tables into tuning.md of --docs-dir")
    parser.add_argument("--docs-dir", type=Path, default=REPO / "docs", help="default: the repository's docs/")
    parser.add_argument("--fresh", action="store_true", help="remove --out first (else the sweeps resume)")
    parser.add_argument("--trials", type=int, default=30, help="trials per replicate, the defaults' included")
    parser.add_argument("--replicates", type=int, default=3, help="replicates of each design's tuning")
    parser.add_argument("--sizes", default="1,3", help="tuning seeds per set, one design each (comma-separated)")
    parser.add_argument("--heldout", type=int, default=5, help="held-out training seeds")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    args, overrides = parser.parse_known_args()
    args.sizes = [int(size) for size in args.sizes.split(",") if size]
    if min([args.trials, args.replicates, args.heldout, *args.sizes]) < 1:
        parser.error("--trials, --replicates, --heldout and every --sizes entry must be at least 1")
    return args, overrides


def tune_study() -> None:
    args, overrides = arguments()
    problem = args.docs and missing_blocks(args.docs_dir, {"tuning.md": (BEGIN, END)}, Path(__file__).name)
    if problem:
        raise problem
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
    methods = [method for method in args.methods.split(",") if method]
    sets, heldout = designs(args.sizes, args.replicates, args.heldout)
    tunings = {design: pd.read_csv(sweep(args.out / design.replace(" ", "_"), methods, args.trials, groups, heldout,
                                         overrides) / "tuning.csv")
               for design, groups in sets.items()}
    text = study_text(tunings, sets, heldout, methods, args.trials) + f"\n\nRan on {machine()}."
    print(text)
    if args.docs:
        write_docs(args.docs_dir, text)


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(tune_study)


if __name__ == "__main__":
    main()
