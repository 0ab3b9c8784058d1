"""`make readme-table` (scripts/readme_demo_table.py): the README's demo table is generated, names its machine, and
is replaced in place, never appended or half-written."""

from __future__ import annotations

import pytest
from helpers import REPO, script

from unlearnbench.core.files import replace_block

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
        with pytest.raises(ValueError, match="exactly one"):
            replace_block(broken, begin, end, "x")


def test_the_readme_table_is_a_generated_one():
    readme = (REPO / "README.md").read_text()
    generated = readme[readme.index(readme_table.BEGIN):readme.index(readme_table.END)]
    assert "Numbers from " in generated and "numerics identity `" in generated and "(original)" in generated
