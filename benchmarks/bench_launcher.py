"""Throughput of a sweep of small jobs: Hydra's basic launcher (one process, the machine's threads) against
`hydra/launcher=local` (one worker per core, one thread each), in one run, each from an empty cache.

Target on a 2-core CPU: local ≥ 1.6× the basic launcher's throughput (jobs per minute, whole command). Run with
`make bench`; `--jobs N` and extra overrides (e.g. `train.epochs=20`) change the sweep (`paths.cache_dir=DIR`: the
models of DIR instead of an empty cache, as a test that only reads the table does).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unlearnbench.runtime.errors import UserError

TARGET_RATIO = 1.6


def sweep(folder: Path, jobs: int, extra: list[str]) -> tuple[float, list[dict]]:
    """Run `jobs` digits jobs of `+method=finetune` (one per training seed) into `folder`; the command's wall time
    and the results."""
    from unlearnbench.core.result import read_result

    command = [str(Path(sys.executable).parent / "unlearnbench"), "+method=finetune", f"seeds.train=range({jobs})",
               f"hydra.sweep.dir={folder / 'sweep'}", f"paths.cache_dir={folder / 'cache'}",
               "runtime.print_table=false", "runtime.progress=false", *extra]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    wall = time.perf_counter() - start
    results = [read_result(p) for p in sorted((folder / "sweep").glob("*/result.json"))]
    if len(results) != jobs or any(r["status"] != "complete" for r in results):
        raise UserError(f"bench_launcher: the sweep in {folder} did not complete its {jobs} jobs")
    shutil.rmtree(folder / "cache", ignore_errors=True)  # none here under a `paths.cache_dir` override
    return wall, results


def job_seconds(results: list[dict]) -> float:
    """The jobs' own work (their stages' times, start-up excluded), summed."""
    return sum(sum(v for k, v in r["timings"].items() if k != "startup") for r in results)


def bench_launcher() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=16)
    args, extra = parser.parse_known_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be ≥ 1; got {args.jobs}")
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides, layout in (("basic", [], f"1 process × {cores} threads"),
                                        ("local", ["hydra/launcher=local"], f"{cores} workers × 1 thread")):
            folder = Path(tmp) / name
            folder.mkdir()
            wall, results = sweep(folder, args.jobs, [*extra, *overrides])
            rows.append((name, layout, wall, job_seconds(results)))
    print(f"{args.jobs} digits jobs of +method=finetune{' ' + ' '.join(extra) if extra else ''}, from an empty "
          f"cache, on {cores} cores")
    print(f"{'launcher':<8}  {'layout':<26}  {'wall s':>7}  {'jobs/min':>8}  {'job work s':>10}")
    for name, layout, wall, work in rows:
        print(f"{name:<8}  {layout:<26}  {wall:7.1f}  {60 * args.jobs / wall:8.1f}  {work:10.1f}")
    ratio = rows[0][2] / rows[1][2]
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"throughput ratio local / basic: {ratio:.2f} ({verdict} the target ≥ {TARGET_RATIO} on 2 cores)")


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_launcher)


if __name__ == "__main__":
    main()
