"""`make readme-table` (scripts/readme_demo_table.py): the README's demo table is generated, names its machine, and
is replaced in place, never appended or half-written; the command runs to its end on a small demo."""

from __future__ import annotations

import shutil
import sys
import unittest.mock

import pytest
from helpers import QUICK_REPORT, REPO, TINY, run_main, script, with_defaults

from unlearnbench.core.files import replace_block
from unlearnbench.runtime.errors import UserError

readme_table = script(REPO / "scripts" / "readme_demo_table.py")

RESULT = {"numerics": {"id": "740574199d5d", "device": "cpu", "cpu": "AMD EPYC", "cpu_capability": "AVX2",
                       "threads": 2, "torch": "2.14.1", "precision": "32-true", "world_size": 1},
          "job": {"dataset": "digits", "model": "resnet18", "scenario": "full_class", "seed_train": 0,
                  "seed_unlearn": 0, "seed_eval": 0},
          "records": [{"target": "3", "method": None, "role": "original", "metric": "acc", "split": "forget_test",
                       "value": 0.919},
                      {"target": "3", "method": "ssd", "role": "unlearned", "metric": "acc",
                       "split": "forget_test", "value": 0.5}]}


def test_block_names_the_machine_and_holds_the_job_table():
    block = readme_table.block(RESULT)
    assert block.startswith(readme_table.BEGIN) and block.endswith(readme_table.END)
    assert "AMD EPYC (AVX2), 2 threads, torch 2.14.1" in " ".join(block.split())
    assert "`740574199d5d`" in block
    table = block.split("```")[1].strip().splitlines()
    assert table[0].split() == ["target", "3", "acc", "D'_f"]
    assert table[2].split() == ["(original)", "0.919"] and table[3].split() == ["ssd", "0.500"]


def test_replace_block_rewrites_only_between_the_markers():
    begin, end = readme_table.BEGIN, readme_table.END
    text = f"intro\n{begin}\nold table\n{end}\noutro\n"
    assert replace_block(text, begin, end, f"{begin}\nnew\n{end}") == f"intro\n{begin}\nnew\n{end}\noutro\n"
    for broken in ("no markers", f"{begin}\n{end}\n{begin}\n{end}", f"{end}\n{begin}"):
        with pytest.raises(UserError, match="exactly one"):
            replace_block(broken, begin, end, "x")


def test_the_readme_table_is_a_generated_one():
    readme = (REPO / "README.md").read_text()
    generated = readme[readme.index(readme_table.BEGIN):readme.index(readme_table.END)]
    assert "Numbers from " in generated and "numerics identity `" in generated and "(original)" in generated


@pytest.mark.processes
def test_make_readme_table_rewrites_the_block_of_the_readme_it_is_given(tmp_path, shared_cache):
    """The command on a small demo (two methods, tiny models from the suite's cache: a later `paths.cache_dir` wins
    over the script's empty one), its sweep forked from the test's fork server, into a copy of the README."""
    readme = tmp_path / "README.md"
    shutil.copyfile(REPO / "README.md", readme)

    argv = ["readme_demo_table.py", "--readme", str(readme), "methods=[finetune,ssd]",
            *with_defaults(TINY, QUICK_REPORT), f"paths.cache_dir={shared_cache}"]
    run = run_main(readme_table, argv, tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    begin, end = readme_table.BEGIN, readme_table.END
    before, after = (REPO / "README.md").read_text(), readme.read_text()
    block = after[after.index(begin):after.index(end) + len(end)]
    assert after.replace(block, "") == before.replace(before[before.index(begin):before.index(end) + len(end)], "")
    one_line = " ".join(block.split())  # the text wraps where the CPU's name puts it
    identity = one_line.split("numerics identity `")[1].split("`")[0]
    assert run.stdout == f"{readme}: demo table regenerated on {identity}\n"
    table = block.split("```")[1].strip().splitlines()
    assert table[0].split()[:2] == ["target", "3"]
    assert [line.split()[0] for line in table[2:]] == ["(original)", "(retrained)", "finetune", "ssd"]


def test_a_readme_without_the_block_is_refused_before_the_demo_runs(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    with unittest.mock.patch.object(sys, "argv", ["readme_demo_table.py", "--readme", str(readme)]), \
            unittest.mock.patch.object(readme_table, "subprocess", None), pytest.raises(SystemExit) as stop:
        readme_table.main()
    assert str(stop.value) == (f"file {readme}: the text must hold exactly one {readme_table.BEGIN} … "
                               f"{readme_table.END} block")
