"""The Makefile's script targets: each runs the script its test runs, as the test runs it; `make bench`'s five
benchmarks, each to its end on its smallest settings, print their tables; and a docs-writing script refuses a docs
folder without its page before it runs anything.

The docs-writing scripts' own runs: test_seed_study.py (`make study`), test_report_text.py (`make text-study`),
test_examples.py (`make forget-quality`), test_readme_table.py (`make readme-table`). The benchmarks run in this
process, and the sweeps of two of them in processes forked from the test's fork server (forkserver.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from helpers import QUICK_REPORT, REPO, TINY, run_main, script, with_defaults

# target: the commands of its recipe, with the options its test adds to them (test files named above)
SCRIPT_TARGETS = {"study": ["scripts/seed_study.py --docs"], "text-study": ["scripts/text_seed_study.py --docs"],
                  "forget-quality": ["scripts/forget_quality_table.py --docs"],
                  "readme-table": ["scripts/readme_demo_table.py"],
                  "bench": ["benchmarks/bench_demo.py", "benchmarks/bench_foltr.py", "benchmarks/bench_decode.py",
                            "benchmarks/bench_throughput.py", "benchmarks/bench_launcher.py",
                            "benchmarks/bench_during.py", "benchmarks/bench_during.py experiment=tofu"]}
# benchmark: its smallest settings (each documented in the script)
BENCHMARKS = {
    "bench_demo": ["methods=[ssd]", *with_defaults(TINY, QUICK_REPORT)],
    "bench_foltr": ["--rounds", "20", "--train-queries", "60", "--test-queries", "20"],
    "bench_decode": ["--classes", "3", "--per-class", "4"],
    "bench_throughput": ["--accelerator", "cpu", "--widths", "8", "--precisions", "32-true", "--repeats", "1",
                         "--seconds", "0", "--hiddens", "32", "--entities", "4"],
    # one job: no pool (test_launcher's); its fine-tuning in batches of 512 (the scenario's, which the method's
    # `batch_size` follows): 15 steps instead of 105
    "bench_launcher": ["--jobs", "1", *with_defaults(TINY, QUICK_REPORT), "scenario.batch_size=512"],
    # fine-tuning in batches of 512 too (still a point every 2 steps), on TINY's models, which bench_demo's run
    # leaves in the suite's cache
    "bench_during": ["methods=[finetune,ssd]", "scenario.batch_size=512", *with_defaults(TINY, QUICK_REPORT)],
}


def recipes(makefile: str) -> dict[str, list[str]]:
    """Each target's recipe lines, without the tab."""
    found, target = {}, None
    for line in makefile.splitlines():
        if line.startswith("\t") and target:
            found[target].append(line[1:])
        elif (match := re.match(r"([^\s:=]+):(?!=)", line)) and not line.startswith("."):
            target = match.group(1)
            found[target] = []
    return found


def test_each_target_runs_the_script_its_test_runs():
    lines = recipes((REPO / "Makefile").read_text())
    for target, commands in SCRIPT_TARGETS.items():
        assert lines[target] == [f"$(BIN)/python {command}" for command in commands], target
    benchmarks = sorted(p.stem for p in (REPO / "benchmarks").glob("bench_*.py"))
    assert sorted({Path(command.split()[0]).stem for command in SCRIPT_TARGETS["bench"]}) == benchmarks == sorted(
        BENCHMARKS)


def run_benchmark(name: str, args: list[str], folder: Path) -> str:
    """The benchmark's `main` with `args`, in `folder`, its sweeps forked from the fork server; what it printed."""
    run = run_main(script(REPO / "benchmarks" / f"{name}.py"), [f"{name}.py", *args], folder, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*\.?\d*", line)]


@pytest.mark.processes
def test_bench_demo_times_every_stage_and_method(tmp_path, shared_cache):
    """With the suite's models (a later `paths.cache_dir` wins over the script's empty cache): the test reads the
    table, not the training times."""
    args = [*BENCHMARKS["bench_demo"], f"paths.cache_dir={shared_cache}"]
    printed = run_benchmark("bench_demo", args, tmp_path).splitlines()
    assert printed[0].startswith("unlearnbench demo: digits, resnet18, full_class, methods=[ssd] model.width=8")
    stages = [re.fullmatch(r"(.{32}) (.{8})  (.*)", line).groups() for line in printed[3:printed.index("")]]
    names = [name.strip() for name, _, _ in stages]
    assert names[:5] == ["whole demo (wall clock)", "import and start-up", "load data", "train original model",
                         "train retrained model"] and names[-1] == "rest (result, report, exit)"
    assert "unlearn: ssd" in names and "evaluate: ssd" in names
    seconds = [float(value) for _, value, _ in stages]
    assert all(s >= 0 for s in seconds[:-1])
    assert seconds[0] >= sum(seconds[1:-1]) - 0.005 * len(seconds)  # the wall clock holds every stage (rounded)
    assert stages[0][2] == "target ≤ 30 s"
    method, unlearn_s, speedup = printed[-1].split()  # its time_s record and retraining's over it
    assert len(printed) == len(stages) + 7 and method == "ssd" and float(unlearn_s) > 0 and float(speedup[:-1]) > 0
    assert speedup.endswith("×")


def test_bench_foltr_times_one_small_run_and_reports_ndcg(tmp_path):
    printed = run_benchmark("bench_foltr", BENCHMARKS["bench_foltr"], tmp_path).splitlines()
    assert printed[0] == "FOLTR on synthetic LETOR (60 train / 20 test queries, navigational clicks)"
    assert [line[:48].strip() for line in printed[3:9]] == [
        "write synthetic LETOR files (once)", "read them (LETOR parser)", "train: 20 rounds × 10 clients × 5 queries",
        "unlearn: fed_finetune, 20 rounds × 7 clients", "evaluate: NDCG@10 after each of 41 rounds",
        "one full run (train + unlearn + evaluate)"]
    ndcg = numbers(printed[9].removeprefix("NDCG@10"))
    assert len(printed) == 10 and len(ndcg) == 3 and all(0 <= v <= 1 for v in ndcg)


def test_bench_decode_loads_the_fabricated_tree_twice(tmp_path):
    printed = run_benchmark("bench_decode", BENCHMARKS["bench_decode"], tmp_path).splitlines()
    assert printed[0].startswith("decode and cache: 12 JPEGs of 250 × 250 to 32 × 32")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in printed[3:]]
    assert [row[0] for row in rows] == ["first load (decode, write cache)", "second load (cache only)"]
    assert all(float(row[1]) >= 0 and numbers(row[2])[0] > 0 for row in rows)  # a cached load may take 0.00 s


def test_bench_throughput_prints_a_ratio_per_stage_and_task(tmp_path):
    lines = run_benchmark("bench_throughput", BENCHMARKS["bench_throughput"], tmp_path).splitlines()
    rows = [line for line in lines if line.startswith(("train ", "eval ", "    32 "))]
    assert [line.split()[:2] for line in rows] == [["train", "8"], ["eval", "8"], ["32", "32-true"]]
    for line in rows:  # ours, raw, ratio = ours / raw, and the flag below the target
        ours, raw, ratio = numbers(line.removesuffix("  below target"))[-3:]
        assert ours > 0 and raw > 0 and ratio == pytest.approx(ours / raw, abs=0.02)
        if abs(ratio - 0.9) > 0.005:  # a ratio printed as 0.90 may lie either side
            assert line.endswith("below target") == (ratio < 0.9)
    below = sum(line.endswith("below target") for line in rows)
    assert lines[-1] == ("all ratios ≥ 0.9" if not below else f"{below} ratio(s) below 0.9")


@pytest.mark.processes
def test_bench_launcher_compares_the_two_launchers(tmp_path, shared_cache):
    """With the suite's models, as bench_demo's test."""
    args = [*BENCHMARKS["bench_launcher"], f"paths.cache_dir={shared_cache}"]
    printed = run_benchmark("bench_launcher", args, tmp_path)
    lines = printed.splitlines()
    assert lines[0].startswith("1 digits jobs of +method=finetune model.width=8") and lines[1].split()[:2] == [
        "launcher", "layout"]
    rows = [line.split() for line in lines[2:4]]
    assert [row[0] for row in rows] == ["basic", "local"] and len(lines) == 5
    walls = []
    for row in rows:  # wall s, jobs/min, the jobs' own work s; each rounded to 0.1 from the unrounded wall
        wall, per_minute, work = map(float, row[-3:])
        assert 60 / (wall + 0.05) - 0.05 <= per_minute <= 60 / (wall - 0.05) + 0.05 and work > 0
        walls.append(wall)
    ratio = numbers(lines[4].split(":")[1])[0]  # basic's wall over local's, rounded to 0.01
    assert (walls[0] - 0.05) / (walls[1] + 0.05) - 0.005 <= ratio <= (walls[0] + 0.05) / (walls[1] - 0.05) + 0.005


@pytest.mark.parametrize("name, page", [("seed_study", "seed-study.md"), ("text_seed_study", "text.md"),
                                        ("forget_quality_table", "forget-quality.md"), ("tune_study", "tuning.md")])
def test_a_docs_folder_without_the_page_is_refused_before_anything_runs(name, page, tmp_path, monkeypatch):
    module = script(REPO / "scripts" / f"{name}.py")
    monkeypatch.setattr(module, "subprocess", None)  # a sweep would raise an AttributeError, not a SystemExit
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--docs", "--docs-dir", str(tmp_path), "--out",
                                      str(tmp_path / "out")])
    with pytest.raises(SystemExit) as stop:
        module.main()
    assert str(stop.value).startswith(f"the '--docs-dir' option of {name}.py must be a folder holding {page} with "
                                      f"one {module.BEGIN} … {module.END} block; got {tmp_path} (")
    assert "\n" not in str(stop.value) and not (tmp_path / "out").exists()


@pytest.mark.processes
def test_bench_during_prints_each_methods_overhead(tmp_path, shared_cache):
    args = [*BENCHMARKS["bench_during"], f"paths.cache_dir={shared_cache}"]
    printed = run_benchmark("bench_during", args, tmp_path).splitlines()
    assert printed[0].startswith("evaluation during unlearning: a point every 10% of each method's steps;")
    assert printed[1].split()[:7] == ["method", "steps", "every", "points", "unlearn", "s", "points"]
    rows = {line.split()[0]: line.split() for line in printed[3:]}
    assert sorted(rows) == ["finetune", "ssd"]
    assert rows["ssd"][1:4] == ["1", "1", "2"]  # no step loop: one update, points at 0 and 1
    steps, every, points = (int(v) for v in rows["finetune"][1:4])
    assert every == -(-steps // 10) and points == len({*range(0, steps + 1, every), steps})
    for row in rows.values():
        unlearn_s, spent, extra = float(row[4]), float(row[5]), float(row[6].rstrip("%"))
        # the ratio of the unrounded times: within what the printed times' rounding to 0.01 s leaves (hundredths of
        # a second here) and its own rounding
        low, high = 100 * (spent - 0.005) / (unlearn_s + 0.005), 100 * (spent + 0.005) / (unlearn_s - 0.005)
        assert unlearn_s > 0 and spent > 0 and low - 0.5 <= extra <= high + 0.5, (row, low, high)
        assert row[7] == ("met" if extra <= 25 else "missed")
