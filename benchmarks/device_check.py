"""The GPU check: every precision mode and every strategy that fits one GPU on a one-epoch CIFAR-shaped job, NVML
utilisation, the text task (a tiny Llama fine-tuned in full, with LoRA, with LoRA on a 4-bit base, and under FSDP and
DeepSpeed ZeRO 1-3 with one rank), and the training throughput of the CIFAR ResNet18 recipe and of the text task's
fine-tuning (tokens/s); one PASS / FAIL / CANNOT line per row.

Run it through `benchmarks/device_check.sh` (which installs the extras first); about 5 minutes on one GPU. CANNOT
is a mode this machine cannot run, with the reason the job gave (a missing package, a GPU too old for FP8); FAIL is a
mode that should run here and did not. The table is also written as Markdown (`--out`), for docs/performance.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

PRECISIONS = ("32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "transformer-engine",
              "transformer-engine-float16", "int8", "int8-training", "nf4", "nf4-dq", "fp4", "fp4-dq")
STRATEGIES = ("fsdp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3")
CANNOT = ("needs ", "runs on ")  # how the job says that this machine lacks what a mode needs (runtime/fabric.py)
# The text task: experiment=tofu's tiny random Llama with one method, fine-tuned in full, with LoRA, with LoRA on a
# 4-bit base (bitsandbytes' nf4 through the nf4 precision config), and in full under each sharding strategy (1 rank:
# gathered state dicts, generation inside the wrapper, DeepSpeed's own clipping).
TEXT_CASES = {"full": [], "lora": ["model.lora.enabled=true"], "qlora": ["model.lora.enabled=true", "precision=nf4"],
              **{strategy: [f"strategy={strategy}", "strategy.devices=1"] for strategy in STRATEGIES}}


def job_args(data: Path, cache: Path, sweep: Path, accelerator: str) -> list[str]:
    """A one-epoch CIFAR-10-shaped job with one method: every stage (train, unlearn, evaluate) runs once."""
    return [str(Path(sys.executable).parent / "unlearnbench"), "dataset=cifar10", f"paths.data_dir={data}",
            f"paths.cache_dir={cache}", f"hydra.sweep.dir={sweep}", "model.width=16", "train.epochs=1",
            "train.milestones=[1]", "scenario.targets=[airplane]", "+method=finetune", "method.epochs=1",
            f"runtime.accelerator={accelerator}", "runtime.print_table=false"]


def text_args(cache: Path, sweep: Path, accelerator: str, precision: str) -> list[str]:
    """A text job on the built-in data: M_o and M_r fine-tuned, NPO, every metric."""
    return [str(Path(sys.executable).parent / "unlearnbench"), "experiment=tofu", "+method=npo",
            f"paths.cache_dir={cache}", f"hydra.sweep.dir={sweep}", f"runtime.accelerator={accelerator}",
            f"precision={precision}", "runtime.print_table=false"]


def text_row(root: Path, case: str, accelerator: str, precision: str, timeout: int) -> tuple[str, str, str]:
    sweep = root / f"text_{case}"
    done = run([*text_args(root / "cache", sweep, accelerator, precision), *TEXT_CASES[case]], timeout=timeout)
    found = list(verdicts(sweep, "precision").values())
    status, detail = found[0] if found else ("FAIL", f"no result (exit {done.returncode}: "
                                                     f"{done.stderr.strip()[-200:]})")
    used = next((o.split("=", 1)[1] for o in TEXT_CASES[case] if o.startswith("precision=")), precision)
    return f"text {case} ({'1 rank, ' if case in STRATEGIES else ''}{used})", status, detail


def verdicts(sweep: Path, key: str) -> dict[str, tuple[str, str]]:
    """(PASS | FAIL | CANNOT, detail) per value of job field `key`, from the sweep's result.json files."""
    from unlearnbench.core.result import read_result

    rows = {}
    for path in sorted(sweep.glob("*/result.json")):
        result = read_result(path)
        value = result["job"].get(key)
        error = result.get("error") or "; ".join(f"{f['method']}: {f['error']}" for f in result.get("failures", []))
        if result["status"] == "complete" and not result.get("failures"):
            seconds = sum(result.get("timings", {}).values())
            rows[value] = ("PASS", f"{seconds:.1f} s for the job's stages")
        elif any(word in (result.get("error") or "") for word in CANNOT):
            rows[value] = ("CANNOT", error.splitlines()[0][:200])
        else:
            rows[value] = ("FAIL", error.splitlines()[0][:200] if error else "no error recorded")
    return rows


def run(command: list[str], timeout: int) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"timed out after {timeout} s")


def utilisation_row(sweep: Path) -> tuple[str, str]:
    """NVML's utilisation, as the 32-true job recorded it for its training stages."""
    from unlearnbench.core.result import read_result

    for path in sweep.glob("*/result.json"):
        result = read_result(path)
        if result["job"].get("precision") == "32-true" and result["status"] == "complete":
            if result["numerics"].get("device") != "cuda":
                return "CANNOT", "no GPU: the job sampled CPU utilisation instead"
            numbers = [r["value"] for r in result["records"] if r["metric"] == "utilisation_pct" and r["value"]]
            if numbers:
                return "PASS", f"sampled in {len(numbers)} stages, up to {max(numbers):.0f}%"
            return "FAIL", "no GPU utilisation recorded (is nvidia-ml-py installed and NVML reachable?)"
    return "FAIL", "the 32-true job did not complete"


def check_device() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accelerator", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--images", type=int, default=400, help="fabricated images per CIFAR batch file (6 files)")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--text-cases", default=",".join(TEXT_CASES), help="of " + ", ".join(TEXT_CASES))
    parser.add_argument("--text-precision", default="bf16-mixed", help="the text jobs' precision (qlora: nf4)")
    parser.add_argument("--out", type=Path, default=Path("device_check.md"))
    args = parser.parse_args()
    from fabricate import write_cifar10

    rows: list[tuple[str, str, str]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cifar10(root / "data" / "cifar10", n_per_batch=args.images)
        base = job_args(root / "data", root / "cache", root / "precisions", args.accelerator)
        done = run([*base, f"precision={args.precisions}"], timeout=900)
        found = verdicts(root / "precisions", "precision")
        for precision in args.precisions.split(","):
            status, detail = found.get(precision, ("FAIL", f"no result (exit {done.returncode}: "
                                                           f"{done.stderr.strip()[-200:]})"))
            rows.append((f"precision {precision}", status, detail))
        if "32-true" in args.precisions.split(","):
            rows.append(("NVML utilisation", *utilisation_row(root / "precisions")))
        for strategy in filter(None, args.strategies.split(",")):
            sweep = root / strategy
            done = run([*job_args(root / "data", root / "cache", sweep, args.accelerator), f"strategy={strategy}",
                        "strategy.devices=1", "precision=bf16-mixed"], timeout=300)
            status, detail = verdicts(sweep, "strategy").get(strategy, (
                "FAIL", f"no result (exit {done.returncode}: {done.stderr.strip()[-200:]})"))
            rows.append((f"strategy {strategy} (1 rank, bf16-mixed)", status, detail))
        for case in filter(None, args.text_cases.split(",")):
            rows.append(text_row(root, case, args.accelerator, args.text_precision, timeout=300))
    throughput = ""
    if not args.no_throughput:
        bench = run([sys.executable, str(REPO / "benchmarks" / "bench_throughput.py"), "--widths", "64",
                     "--precisions", "bf16-mixed", "--compile", "--accelerator", args.accelerator,
                     "--hiddens", "256"], timeout=600)
        throughput = bench.stdout
        below = "below target" in bench.stdout or bench.returncode != 0
        rows.append(("throughput, ResNet18 width 64 and tiny Llama, bf16-mixed", "FAIL" if below else "PASS",
                     "ratio below 0.9 (table below)" if below and bench.returncode == 0 else
                     (bench.stderr.strip()[-200:] if bench.returncode else "ratios ≥ 0.9 (table below)")))
    width = max(len(check) for check, _, _ in rows)
    lines = [f"{check:<{width}}  {status:<6}  {detail}" for check, status, detail in rows]
    print("\n".join(lines))
    if throughput:
        print("\n" + throughput)
    counts = {s: sum(r[1] == s for r in rows) for s in ("PASS", "FAIL", "CANNOT")}
    summary = (f"device check: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['CANNOT']} cannot run "
               f"here, {time.perf_counter() - start:.0f} s")
    print(summary)
    table = ["| check | result | detail |", "|---|---|---|", *[f"| {c} | {s} | {d} |" for c, s, d in rows]]
    args.out.write_text("\n".join([*table, "", "```", throughput.strip(), "```", "", summary, ""]) if throughput
                        else "\n".join([*table, "", summary, ""]))
    return 1 if counts["FAIL"] else 0


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(check_device)


if __name__ == "__main__":
    main()
