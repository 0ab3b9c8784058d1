"""The seed study on the text task, by one command (`make text-study`).

`experiment=tofu_seeds` (I training seeds × J unlearning seeds nested in each, one forget set) under the local
launcher, then a table of what the docs' discussion rests on, per method: σ_T² against σ_U² for forget quality
(against each job's own M_r and against one fixed M_r), model utility, forget ROUGE and privleak; W2 between design
A(0) (training seed 0's unlearning seeds) and design B (one unlearning seed per training seed) for forget quality;
and how often the best method by forget quality changes with the training seed. With `--docs`, the table goes into
docs/text.md between its `<!-- text-study -->` markers, with the machine it ran on, and the figure of forget
quality's variance split to docs/text_seed_study.png.

Extra arguments are Hydra overrides of the sweep (e.g. `methods=[npo,simnpo]`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- text-study -->", "<!-- /text-study -->"
METRICS = [("FQ", "forget_quality", "forget"), ("FQ, first M_r", "forget_quality_first", "forget"),
           ("MU", "model_utility", None), ("ROUGE D_f", "rouge_l_recall", "forget"), ("privleak", "privleak", "forget")]


def fmt(value: float) -> str:
    return "–" if value != value else "0" if value == 0 else f"{value:.2g}"


def split_of(frame, metric: str, split: str | None):
    chosen = frame[frame["metric"] == metric]
    return chosen[chosen["split"].isna() | (chosen["split"] == "")] if split is None else chosen[
        chosen["split"] == split]


def rows(study) -> list[list[str]]:
    variance, w2 = study.variance, study.wasserstein
    unlearned = variance[variance["role"] == "unlearned"]
    table = []
    for method in sorted(unlearned["method"].dropna().unique()):
        mine = unlearned[unlearned["method"] == method]
        row = [method]
        for _, metric, split in METRICS:
            found = split_of(mine, metric, split)
            row.append("–" if found.empty else f"{fmt(found['sigma_t2'].iloc[0])} / {fmt(found['sigma_u2'].iloc[0])}")
        distance = split_of(w2[(w2["method"] == method) & (w2["role"] == "unlearned")], "forget_quality", "forget")
        row.append("–" if distance.empty else f"{fmt(distance['w2_mean'].iloc[0])} "
                                              f"({fmt(distance['null_95_mean'].iloc[0])})")
        table.append(row)
    return table


def table(body: list[list[str]]) -> str:
    header = ["method", *(f"{name}: σ_T² / σ_U²" for name, _, _ in METRICS), "W2 FQ, A(i) vs B (null 95%)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in body)])


def rank_line(study) -> str:
    ranks = split_of(study.ranks, "forget_quality", "forget")
    if ranks.empty:
        return "Rank stability needs three training seeds or more."
    row = ranks.iloc[0]
    return (f"The best method by forget quality over all {int(row['I'])} training seeds is {row['best_all']}; "
            f"one training seed's best differs from it with probability {row['p_best_changes']:.2f} "
            f"[{row['p_low']:.2f}, {row['p_high']:.2f}] (Kendall's τ between one seed's ranking and the others', "
            f"mean {row['tau_mean']:.2f}).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "text_seed_study", help="folder of the sweep and report")
    parser.add_argument("--train-seeds", type=int, default=5, help="I (default 5)")
    parser.add_argument("--unlearn-seeds", type=int, default=3, help="J (default 3)")
    parser.add_argument("--docs", action="store_true", help="update docs/text.md's table and docs/text_seed_study.png")
    args, overrides = parser.parse_known_args()
    if args.train_seeds < 3 or args.unlearn_seeds < 2:
        parser.error("the study needs --train-seeds ≥ 3 and --unlearn-seeds ≥ 2")
    if args.out.exists():
        shutil.rmtree(args.out)
    command = [str(Path(sys.executable).parent / "unlearnbench"), "experiment=tofu_seeds",
               f"study.I={args.train_seeds}", f"study.J={args.unlearn_seeds}", f"hydra.sweep.dir={args.out}",
               "runtime.print_table=false", "hydra/launcher=local", *overrides]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)

    from unlearnbench.report.build import build_report
    from unlearnbench.report.read.collect import describe_numerics

    report = build_report([args.out], args.out / "report")
    if report.failed:
        raise SystemExit(f"{len(report.failed)} jobs failed: see {args.out / 'report' / 'report.md'}")
    text = f"{table(rows(report.study))}\n\n{rank_line(report.study)}"
    print(text)
    figure = next((p for p in report.figures if p.name.startswith("designs_") and "forget_quality_forget" in p.name),
                  None)
    if figure is None:
        raise SystemExit(f"no figure of forget quality's designs: see {args.out / 'report' / 'report.md'}")
    print(f"figure: {figure}")
    if args.docs:
        from unlearnbench.core.files import replace_block, write_atomically

        identity = report.jobs[0]["numerics_identity"]
        shutil.copyfile(figure, REPO / "docs" / "text_seed_study.png")
        lead = textwrap.fill(
            f"Per method, the training seed's and the unlearning seed's variance components (σ_T² / σ_U²) over "
            f"I = {args.train_seeds} training seeds × J = {args.unlearn_seeds} unlearning seeds, one forget set; "
            f"W2 between each training seed's design A(i) and design B, with its permutation null. Numbers from "
            f"{describe_numerics(identity)} (`{identity['id']}`), regenerated by `make text-study`.", 116)
        page = REPO / "docs" / "text.md"
        write_atomically(page, replace_block(page.read_text(), BEGIN, END, f"{BEGIN}\n{lead}\n\n{text}\n{END}"))
        print("docs/text.md and docs/text_seed_study.png updated")


if __name__ == "__main__":
    main()
