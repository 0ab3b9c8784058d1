"""Words in the render layer only: the compute layer returns notes (a code and its numbers), `render/words.py` words
each code once, and the report's files hold the same sentences as before the split."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pandas as pd

from unlearnbench.report.compute import analysis, stats
from unlearnbench.report.compute.notes import Note
from unlearnbench.report.compute.power import paired_test, power_plan
from unlearnbench.report.render.words import WORDS, joined, text, worded

COMPUTE = Path(analysis.__file__).parent
# Two words of letters side by side: a phrase for a reader. Column names, codes and keys are single identifiers
# (snake_case, no space), formats and separators ("; ", " · ") hold no two words, so the rule is not brittle.
PHRASE = re.compile(r"[^\W\d_]{2,}'?[^\W\d_]* [^\W\d_(]{2,}")
NOT_YET: set[str] = set()  # every compute module is clean


def docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def phrases(path: Path) -> list[str]:
    """The string constants of a module (f-strings' literal parts included) that hold a phrase, outside its
    docstrings and its refusals (a `raise` statement's message is an error, worded where it is raised)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = docstrings(tree) | {id(sub) for node in ast.walk(tree) if isinstance(node, ast.Raise)
                                  for sub in ast.walk(node)}
    return [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
            and PHRASE.search(node.value)]


def test_the_compute_modules_hold_no_sentence():
    found = {path.name: phrases(path) for path in sorted(COMPUTE.glob("*.py"))}
    assert [line for name, lines in found.items() if name not in NOT_YET for line in lines] == []
    assert {name for name, lines in found.items() if lines} == NOT_YET  # drop a module from NOT_YET once it is clean


def test_the_phrase_rule_tells_a_sentence_from_a_name():
    assert PHRASE.search("no training or unlearning time recorded") and PHRASE.search("σ_U²'s interval is the χ² one")
    assert not any(PHRASE.search(s) for s in ("sigma_t2_high", "few_training_seeds", "; ", " · ", "A({seed})", ""))


def test_every_code_compute_writes_has_words():
    codes = {node.args[0].value for path in COMPUTE.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Note" and node.args}
    assert len(codes) > 30 and codes <= set(WORDS)


def test_the_variance_warnings_read_as_before():
    unbalanced = stats.nested_variance([[1.0, 2.0], [3.0, 5.0, 4.0], [0.0]])
    assert [note.code for note in unbalanced.warnings] == ["few_training_seeds_row", "unbalanced_row",
                                                          "chi2_sigma_u2"]
    assert joined(unbalanced.warnings) == (
        "fewer than 10 training seeds (I = 3): σ_T² is barely identifiable; unbalanced grid (1 to 3 unlearning seeds "
        "per training seed): unbalanced ANOVA estimator with effective J = n0 = 1.83; the σ_T² interval is "
        "approximate; fewer than 5 training seeds with two unlearning seeds: σ_U²'s interval is the χ² one, exact "
        "only if every training seed has the same variance")
    assert list(map(text, stats.nested_variance([[1.0], [2.0]]).warnings))[-1] == (
        "one unlearning seed per training seed (J = 1): only the total variance is identifiable")
    assert text(stats.nested_variance([[4.0]]).warnings[-1]) == "a single value: no variance is identifiable"
    one_seed = stats.nested_variance([[1.0, 2.0]]).warnings[-1]
    assert text(one_seed) == "one training seed (I = 1): only σ_U² is identifiable"


def test_the_plans_reasons_read_as_before():
    assert joined(power_plan(1e-9, 0.1, 0.1, 30.0, 5.0).note) == (
        "a difference of 1e-09 is too small against its spread: every design needs more than 1,000,000 jobs")
    assert joined(power_plan(0.1, 0.0, 0.0, 30.0, 5.0).note) == (
        "no spread in the difference: 2 training seeds tell the methods apart")
    one = paired_test([[0.1, 0.2]])
    assert joined(one.note) == (
        "fewer than two training seeds: the difference's spread over training seeds is unknown; no test")
    unbounded = stats.seed_plan(0.01, math.inf, 30.0, 5.0, 0.01, sigma_e2=math.inf)
    assert unbounded.note == (Note("unbounded", {"components": ["σ_U²", "σ_E²"]}),)
    assert joined(unbounded.note) == "σ_U² and σ_E² upper limit unbounded: too few seeds to plan at the upper limit"


def test_worded_writes_a_tables_notes_as_its_csv_held_them():
    table = pd.DataFrame({"method": ["a", "b", "c"], "note": [(), (Note("no_time"), Note("k_bound", {"K": 8})),
                                                              math.nan]})
    assert list(worded(table)["note"]) == ["", "no training or unlearning time recorded; K at the search bound (8)",
                                           ""]
    assert table["note"].iloc[0] == ()  # the compute table itself keeps its notes
    assert worded(pd.DataFrame({"x": [1]})).equals(pd.DataFrame({"x": [1]}))


def test_the_tuning_tables_notes_and_read_problems_read_as_before(tmp_path):
    from unlearnbench.report.compute.tuning import interval_notes, judgement, read_tunings

    assert list(map(text, interval_notes(1, 1))) == ["one held-out seed: no held-out or gain interval",
                                                     "one held-out and one tuning seed: no optimism interval"]
    assert interval_notes(0, 3) == [] and interval_notes(2, 2) == []
    held = {"tuned": {"objective": None, "by_seed": {}, "reason": "j4: no result.json"},
            "default": {"objective": 0.2, "by_seed": {"4": 0.2}, "reason": None}}
    assert joined(judgement({"objective": 0.1, "by_seed": {"0": 0.1}}, held)["note"]) == "tuned: j4: no result.json"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tuning.json").write_text("{", encoding="utf-8")
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "tuning.json").write_text("[]", encoding="utf-8")
    found, problems = read_tunings([tmp_path / "bad", tmp_path / "list", tmp_path])
    assert found == [] and [note.code for note in problems] == ["tuning_unread", "not_tuning"]
    assert text(problems[0]) == (f"{tmp_path / 'bad' / 'tuning.json'}: not read (Expecting property name enclosed in "
                                 "double quotes: line 1 column 2 (char 1)); its tuning tables are left out")
    assert text(problems[1]) == (f"{tmp_path / 'list' / 'tuning.json'}: not a tuning record; its tuning tables are "
                                 "left out")
