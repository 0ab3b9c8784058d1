"""The cost of evaluation during unlearning (`evaluation.during`): each method's points at every 10% of its steps
against its own unlearning time, on a preset (the demo by default; extra arguments are Hydra overrides, e.g.
`experiment=tofu` for the text preset).

Target: at most 25% extra time per method. Three runs from one model cache (M_o and M_r trained once): the preset
without points; the preset with a point at step 0 and the end only, whose last step is each method's step count;
then, per method, the preset with a point every ⌈steps / 10⌉ steps. The overhead is the points' time
(`during_time_s`) over the method's time in the plain run (`time_s`).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 0.25
NEVER = 10**9  # a schedule whose only points are step 0 and the end


def run(folder: Path, name: str, overrides: list[str]) -> dict:
    """The records of the preset's one job run with `overrides` into `folder/name`."""
    from unlearnbench.core.result import read_result

    sweep = folder / name
    command = [str(Path(sys.executable).parent / "unlearnbench"), f"hydra.sweep.dir={sweep}",
               f"paths.cache_dir={folder / 'cache'}", "runtime.print_table=false", "report.figures=false",
               *overrides]
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    (result_file,) = sweep.glob("*/result.json")
    return read_result(result_file)


def per_method(result: dict, metric: str) -> dict[str, float]:
    return {r["method"]: r["value"] for r in result["records"]
            if r["role"] == "unlearned" and r["metric"] == metric and "step" not in r}


def last_steps(result: dict) -> dict[str, int]:
    steps: dict[str, int] = {}
    for record in result["records"]:
        if record.get("step") is not None:
            steps[record["method"]] = max(steps.get(record["method"], 0), record["step"])
    return steps


def bench_during() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    overrides = parser.parse_known_args()[1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain = per_method(run(folder, "plain", overrides), "time_s")
        steps = last_steps(run(folder, "ends", [*overrides, f"evaluation.during.every={NEVER}"]))
        for method, count in sorted(steps.items()):
            every = max(1, math.ceil(count / 10))
            watched = run(folder, f"every_{method}", [*overrides, f"methods=[{method}]",
                                                      f"evaluation.during.every={every}"])
            points = len({r["step"] for r in watched["records"] if r.get("step") is not None})
            spent = per_method(watched, "during_time_s")[method]
            rows.append((method, count, every, points, plain[method], spent, spent / plain[method]))
    print(f"evaluation during unlearning: a point every 10% of each method's steps; "
          f"{' '.join(overrides) or 'the demo'}")
    print(f"{'method':18} {'steps':>6} {'every':>6} {'points':>6} {'unlearn s':>9} {'points s':>9} {'extra':>7}  "
          f"target ≤ {TARGET:.0%}")
    print(f"{'-' * 18} {'-' * 6} {'-' * 6} {'-' * 6} {'-' * 9} {'-' * 9} {'-' * 7}  {'-' * 12}")
    for method, count, every, points, unlearn_s, spent, extra in rows:
        verdict = "met" if extra <= TARGET else "missed"
        print(f"{method:18} {count:6d} {every:6d} {points:6d} {unlearn_s:9.2f} {spent:9.2f} {extra:7.0%}  {verdict}")


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_during)


if __name__ == "__main__":
    main()
