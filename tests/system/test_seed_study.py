"""`make study` (scripts/seed_study.py --docs) on a small design: two sweeps, one report over both, the seed-study
figure, and the blocks of docs/seed-study.md and docs/comparing.md it rewrites (in a copy of the pages); and the
`methods=[…]` option it relies on."""

from __future__ import annotations

import functools
import re
import shutil
import unittest.mock
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import QUICK_REPORT, TINY, drawing_only, results, run_cli, run_main, script

from unlearnbench.core.job import chosen
from unlearnbench.report import build
from unlearnbench.runtime.errors import UserError

REPO = Path(__file__).resolve().parents[2]
PAGES = ("seed-study.md", "comparing.md")
SECOND = "gradient_ascent"  # the study's second method, after ssd


def study_script():
    return script(REPO / "scripts" / "seed_study.py")


@pytest.fixture(scope="module")
def study(tmp_path_factory, shared_cache):
    """`make study`'s command on 6 training × 2 unlearning seeds (the fewest blocks at which two methods'
    leaderboard has a test, and so the critical-difference diagram --docs copies), writing into a copy of the docs
    pages: its `main` in this process and its two sweeps forked from the test's fork server (forkserver.py: the
    console-script commands it runs, without an interpreter's imports each). Its sweeps run under the basic launcher
    (a later `hydra/launcher` wins over the script's `local`): the launcher does not change a job's records
    (test_launcher.py), and on a busy machine two workers' start-up would cost more than their parallelism wins."""
    root = tmp_path_factory.mktemp("study")
    (root / "docs").mkdir()
    for page in PAGES:
        shutil.copyfile(REPO / "docs" / page, root / "docs" / page)
    module = study_script()

    # QUICK_REPORT: the sweeps' own reports; the study's report draws figures (the two --docs copies), with a quick
    # forgetting quality (its 100 permutations are half of the report's time; the study's tables do not show it)
    quick = functools.partial(build.build_report, forget_permutations=10)
    # gradient ascent as the second method: one that depends on the unlearning seed (its batch order), as SSD does
    # not, at a tenth of fine-tuning's cost (5 steps on D_f against 5 epochs on D_r)
    argv = ["seed_study.py", "--docs", "--docs-dir", str(root / "docs"), "--out", str(root / "study"),
            "--train-seeds", "6", "--unlearn-seeds", "2", "--methods", f"ssd,{SECOND}",
            f"paths.cache_dir={shared_cache}", f"paths.data_dir={root / 'data'}", "report.target_se=0.02", *TINY,
            "hydra/launcher=basic", *(f"{key}={value}" for key, value in QUICK_REPORT.items())]
    # the study's report draws the two figures --docs copies, not its others (their drawing: test_report_sweep.py)
    with unittest.mock.patch.object(build, "build_report", quick), drawing_only("leaderboard", "seed_study"):
        return root / "study", run_main(module, argv, root)


@pytest.mark.processes
def test_the_study_runs_both_designs_and_reports_them_together(study):
    folder, run = study
    assert run.returncode == 0, run.stderr[-3000:]
    single, multi = results(folder / "single"), results(folder / "multi")
    assert sorted((r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in single.values()) == [(0, 0), (0, 1)]
    seeds_b = sorted((r["job"]["seed_train"], r["job"]["seed_unlearn"]) for r in multi.values())
    assert seeds_b == [(seed, seed) for seed in range(1, 6)]
    for result in [*single.values(), *multi.values()]:  # methods=[…]: exactly those two, in one job
        assert {r["method"] for r in result["records"] if r["role"] == "unlearned"} == {"ssd", SECOND}
    report = folder / "report"
    assert (report / "figures" / "seed_study_digits_resnet18_full_class_3.png").stat().st_size > 0
    by_seed = pd.read_csv(report / "wasserstein_by_seed.csv")
    scores = by_seed[~by_seed["metric"].isin(["time_s", "memory_gib", "utilisation_pct"])]  # a cost may be unsampled
    assert set(by_seed["seed_train"]) == {0} and set(scores["n_B"]) == {5}  # A(0) against B without seed 0


@pytest.mark.processes
def test_the_printed_table_shows_ssd_constant_across_unlearning_seeds(study):
    _, run = study
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in run.stdout.splitlines() if line.startswith("| ") and not line.startswith("| method")}
    assert set(rows) == {"ssd", SECOND}
    assert rows["ssd"][2] == "0" and rows["ssd"][6] == "0"  # its own accuracies do not depend on the unlearning seed
    plans = pd.read_csv(study[0] / "report" / "seed_plan.csv")
    ssd = plans[(plans["method"] == "ssd") & (plans["metric"] == "acc") & (plans["split"] == "forget_test")]
    for plan in ("point_note", "upper_note"):  # at the estimates and at the upper confidence limits
        assert ssd[plan].str.contains("extra unlearning seeds buy nothing").all()
    assert (plans["upper_I"].dropna() >= 2).all() and (plans["point_I"].dropna() >= 2).all()
    power = pd.read_csv(study[0] / "report" / "seed_power.csv")  # the two methods, next to each other
    pairs = set(zip(power["method_a"], power["method_b"], power["pair"], strict=True))
    assert len(pairs) == 1 and pairs <= {("ssd", SECOND, "neighbours"), (SECOND, "ssd", "neighbours")}
    assert {"delta_acc", "delta_mia"} <= set(power["metric"]) and set(power["I"]) == {6}
    assert "### How many seeds to tell two methods apart" in (study[0] / "report" / "report.md").read_text()
    # each sweep's own report (the end-of-sweep callback) takes `report.target_se` from the command line
    assert set(pd.read_csv(study[0] / "single" / "report" / "seed_plan.csv")["target_se"]) == {0.02}


def block_of(text: str, begin: str, end: str) -> str:
    return text[text.index(begin):text.index(end) + len(end)]


@pytest.mark.processes
def test_docs_mode_rewrites_only_the_blocks_of_the_pages_and_copies_the_figures(study):
    folder, run = study
    assert run.returncode == 0, run.stderr[-3000:]
    module, docs = study_script(), folder.parent / "docs"
    for page, begin, end in (("seed-study.md", module.BEGIN, module.END),
                             ("comparing.md", module.BOARD_BEGIN, module.BOARD_END)):
        before, after = (REPO / "docs" / page).read_text(), (docs / page).read_text()
        assert after.replace(block_of(after, begin, end), "") == before.replace(block_of(before, begin, end), "")
    assert f"updated in {docs}: seed-study.md, comparing.md, seed_study.png, seed_study_leaderboard.png" in run.stdout
    figures = folder / "report" / "figures"
    for copy, drawn in (("seed_study.png", "seed_study_digits_resnet18_full_class_3.png"),
                        ("seed_study_leaderboard.png", "leaderboard_digits_resnet18_full_class.png")):
        assert (docs / copy).read_bytes() == (figures / drawn).read_bytes()
    table = block_of((docs / "seed-study.md").read_text(), module.BEGIN, module.END)
    assert "A(0): training seed 0 with 2 unlearning seeds, B: 6 training seeds" in " ".join(table.split())
    assert "regenerated by `make study`" in table and "Numbers from " in table
    assert [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")] == [
        "method", "ssd", SECOND]  # the order of --methods
    board = block_of((docs / "comparing.md").read_text(), module.BOARD_BEGIN, module.BOARD_END).splitlines()
    assert board[board.index("") + 1] == "### digits · resnet18 · full_class"  # after the lead: no section heading
    assert sorted(line.split("|")[1].strip() for line in board if line.startswith("| ") and "---" not in line) == [
        SECOND, "method", "ssd"]
    assert any(line.startswith("Over 6 blocks (1 target × 6 training seeds)") for line in board)
    assert "critical-difference diagram](" not in "\n".join(board)  # the page shows its own copy, outside the block
    assert "](seed_study_leaderboard.png)" in (docs / "comparing.md").read_text()


def test_docs_mode_refuses_a_folder_without_the_pages_before_any_sweep(tmp_path):
    module = study_script()
    module.subprocess = SimpleNamespace(run=None)  # a sweep would fail with a TypeError
    (tmp_path / "docs").mkdir()
    shutil.copyfile(REPO / "docs" / "seed-study.md", tmp_path / "docs" / "seed-study.md")
    run = run_main(module, ["seed_study.py", "--docs", "--docs-dir", str(tmp_path / "docs"), "--out",
                            str(tmp_path / "study")], tmp_path)
    assert run.returncode == 1 and "\n" not in run.stderr
    assert run.stderr.startswith(f"the '--docs-dir' option of seed_study.py must be a folder holding comparing.md "
                                 f"with one {module.BOARD_BEGIN} … {module.BOARD_END} block; got {tmp_path / 'docs'} (")
    assert not (tmp_path / "study").exists()


def test_docs_mode_refuses_a_study_whose_leaderboard_has_no_diagram():
    note = "a Wilcoxon–Holm test over 2 methods needs 6 blocks, not 3: 6 training seeds of 1 target"
    board = SimpleNamespace(config={"dataset": "digits"}, rows=[{"note": note}, {"note": note}, {"note": ""}])
    report = SimpleNamespace(figures=[Path("seed_study_digits_resnet18_full_class_3.png")],
                             study=SimpleNamespace(leaderboard=[board]))
    with pytest.raises(UserError) as stop:
        study_script().leaderboard_block(report, "this machine")
    assert str(stop.value) == (f"--docs needs the leaderboard's critical-difference diagram, and the study drew none "
                               f"({note}): nothing in the docs was changed")


def test_the_docs_show_the_studys_figure_and_generated_table():
    page = (REPO / "docs" / "seed-study.md").read_text()
    module = study_script()
    block = page[page.index(module.BEGIN):page.index(module.END)]
    assert "regenerated by `make study`" in block and "Numbers from " in block
    assert [line.split("|")[1].strip() for line in block.splitlines() if line.startswith("| ")][1:] == module.METHODS
    assert "](seed_study.png)" in page and (REPO / "docs" / "seed_study.png").stat().st_size > 10_000
    assert "(docs/seed_study.png)" in (REPO / "README.md").read_text()  # the README shows the figure too



@pytest.mark.processes
def test_methods_option_rejects_unknown_names_and_the_combination_with_plus_method(tmp_path):
    unknown = run_cli(["methods=[ssd,nonesuch]", *TINY], tmp_path)
    assert unknown.returncode != 0
    assert "methods: unknown method nonesuch; valid: altpo, bad_teacher," in unknown.stderr  # every method, sorted
    assert "Traceback" not in unknown.stderr and not (tmp_path / "sweep").exists()
    both = run_cli(["methods=[ssd]", "+method=ssd", *TINY], tmp_path)
    assert both.returncode != 0 and "not both" in both.stderr
    registered = [{"name": "finetune"}, {"name": "ssd"}, {"name": "lfssd"}]  # the task's methods, registry order
    assert [m["name"] for m in chosen(registered, ["ssd", "finetune"], "image")] == ["finetune", "ssd"]
    assert chosen(registered, None, "image") == registered
    for names, wrong in ((["ssd", "fedremove"], "fedremove"), ([], "(none given)")):
        with pytest.raises(UserError, match=rf"methods: {re.escape(wrong)} is not a method of the image "
                                            r"task; valid: finetune, ssd, lfssd"):
            chosen(registered, names, "image")
