"""Time the demo (`unlearnbench` with no arguments) from an empty cache, stage by stage.

Targets on a 2-core CPU: the whole demo within 30 s; evaluating every metric for one method within 1 s.
Run with `make bench`; extra arguments are Hydra overrides of the demo (e.g. `methods=[ssd]`: another demo, whose
times the targets do not describe).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEMO_TARGET_S = 30.0
EVALUATION_TARGET_S = 1.0


def run_demo(folder: Path, overrides: list[str] = ()) -> tuple[float, dict]:
    from unlearnbench.core.result import read_result

    command = [str(Path(sys.executable).parent / "unlearnbench"), f"hydra.sweep.dir={folder / 'sweep'}",
               f"paths.cache_dir={folder / 'cache'}", "runtime.print_table=false", *overrides]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    wall = time.perf_counter() - start
    (result_file,) = (folder / "sweep").glob("*/result.json")
    return wall, read_result(result_file)


def rows(wall: float, result: dict) -> list[tuple[str, float, str]]:
    timings = result["timings"]
    table = [("whole demo (wall clock)", wall, f"target ≤ {DEMO_TARGET_S:.0f} s"),
             ("import and start-up", timings["startup"], "process start to first work"),
             ("load data", timings["load_data"], ""),
             ("train original model", timings["original"], ""),
             ("train retrained model", timings["retrained"], "")]
    for stage, seconds in timings.items():
        if stage.startswith("method:"):
            table.append((f"unlearn: {stage.removeprefix('method:')}", seconds, ""))
    for stage, seconds in timings.items():
        if stage.startswith("evaluation:"):
            target = f"target ≤ {EVALUATION_TARGET_S:.0f} s" if stage.count(":") == 1 else ""
            table.append((f"evaluate: {stage.removeprefix('evaluation:')}", seconds, target))
    table.append(("rest (result, report, exit)", wall - sum(timings.values()), ""))
    return table


def method_rows(result: dict) -> list[tuple[str, float, float]]:
    """(method, unlearning seconds, speed-up over retraining = retraining seconds / method seconds)."""
    times = {(r["role"], r["method"]): r["value"] for r in result["records"] if r["metric"] == "time_s"}
    retrain_s = times["retrained", None]
    return [(method, seconds, retrain_s / seconds) for (role, method), seconds in sorted(times.items(), key=str)
            if role == "unlearned"]


def bench_demo() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    overrides = parser.parse_known_args()[1]
    with tempfile.TemporaryDirectory() as tmp:
        wall, result = run_demo(Path(tmp), overrides)
    print(f"unlearnbench demo: {result['job']['dataset']}, {result['job']['model']}, {result['job']['scenario']}, "
          f"{' '.join(overrides) or 'every method'}, from an empty cache")
    print(f"{'stage':32} {'seconds':>8}  note")
    print(f"{'-' * 32} {'-' * 8}  {'-' * 14}")
    for name, seconds, note in rows(wall, result):
        print(f"{name:32} {seconds:8.2f}  {note}")
    print()
    print(f"{'method':20} {'unlearn s':>9} {'speed-up vs retrain':>20}")
    print(f"{'-' * 20} {'-' * 9} {'-' * 20}")
    for method, seconds, speedup in method_rows(result):
        print(f"{method:20} {seconds:9.2f} {speedup:19.1f}×")


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_demo)


if __name__ == "__main__":
    main()
