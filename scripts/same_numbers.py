"""Show that a change moved no number: run the same sweeps in two checkouts and compare every record.

    python scripts/same_numbers.py BASE [--out DIR] [--only NAME ...]

BASE is a checkout of the commit to compare against (`git worktree add /tmp/base 0842690`); this checkout is the
other. Each preset (`PRESETS`) runs in both, each run with an empty cache of its own, and every record of one is
matched to the other's by (job folder, target, method, role, metric, split, round). Cost metrics (time, memory,
utilisation) are left out: they measure the machine. A record the base has and this checkout lacks is lost; one
this checkout adds is new (allowed); a value that differs is changed. Prints one line of counts per preset and
exits 1 if any record is lost or changed.

The base checkout gets a link `unlearnbench/conf` → `conf` (the package Hydra reads its configs from), so that it
runs with its own configs rather than the installed ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PRESETS = {  # name → the overrides of `unlearnbench` (the image demo, the text task, the ranking task)
    "image demo": [],
    "experiment=tofu": ["experiment=tofu"],
    "experiment=foltr": ["experiment=foltr", "+method=fedremove,fed_finetune"],
    "experiment=muse": ["experiment=muse"],
    "experiment=wmdp": ["experiment=wmdp"],
}
COSTS = {"time_s", "memory_gib", "utilisation_pct"}
KEY = ("target", "method", "role", "metric", "split", "round")


def run(checkout: Path, overrides: list[str], out: Path) -> Path:
    """The sweep's folder after running `overrides` in `checkout`, with its own code, configs and an empty cache
    (the base's sweep is kept between calls: the sweep resumes it; this checkout's starts afresh)."""
    env = dict(os.environ)
    if checkout != HERE:
        link = checkout / "unlearnbench" / "conf"
        if not link.exists():
            link.symlink_to(Path("..") / "conf")
        env["PYTHONPATH"] = str(checkout)
    else:
        shutil.rmtree(out, ignore_errors=True)
    sweep, cache = out / "sweep", out / "cache"
    command = [sys.executable, "-m", "unlearnbench", *overrides, f"hydra.sweep.dir={sweep}",
               f"paths.cache_dir={cache}", "report.figures=false", "runtime.print_table=false",
               "runtime.progress=false"]
    subprocess.run(command, cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)
    return sweep


def records(sweep: Path) -> dict[tuple, float | None]:
    """Every record of the sweep's jobs but the costs, keyed by job folder and `KEY`."""
    found = {}
    for path in sorted(sweep.glob("*/result.json")):
        for record in json.loads(path.read_text())["records"]:
            if record["metric"] not in COSTS:
                found[(path.parent.name, *(record.get(k) for k in KEY))] = record["value"]
    return found


def compare(base: dict, mine: dict) -> dict[str, int]:
    shared = base.keys() & mine.keys()
    return {"compared": len(shared), "equal": sum(base[k] == mine[k] for k in shared),
            "changed": sum(base[k] != mine[k] for k in shared), "lost": len(base.keys() - mine.keys()),
            "new": len(mine.keys() - base.keys())}


def compare_presets() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="a checkout of the commit to compare against")
    parser.add_argument("--out", type=Path, default=Path("same_numbers"), help="where the sweeps go")
    parser.add_argument("--only", nargs="*", choices=list(PRESETS), help="some of the presets")
    args = parser.parse_args()
    failed = False
    for index, name in enumerate(args.only or PRESETS):
        folder = args.out.resolve() / f"preset{index}"
        base = records(run(args.base.resolve(), PRESETS[name], folder / "base"))
        mine = records(run(HERE, PRESETS[name], folder / "this"))
        counts = compare(base, mine)
        failed |= bool(counts["changed"] or counts["lost"]) or not counts["compared"]
        print(f"{name:<18} " + "  ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    return 1 if failed else 0


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(compare_presets)


if __name__ == "__main__":
    main()
