"""The report reads its metric declarations from the results (unlearnbench.report.read.catalogue): a schema-2 result's
own catalogue, the frozen legacy catalogue of its task for a schema-1 result or a damaged one, merged over a sweep;
and the report's source imports no task and names no task's metric."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

import unlearnbench.report
from unlearnbench.core.catalogue import CORE, Catalogue, with_core
from unlearnbench.report.build import build_report
from unlearnbench.report.read.catalogue import LEGACY_FILE, legacy_catalogue, result_catalogue
from unlearnbench.report.read.collect import catalogue_of, load_results
from unlearnbench.report.render.console import job_table
from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
from unlearnbench.tasks.ranking.catalogue import CATALOGUE as RANKING
from unlearnbench.tasks.text.benchmarks.tofu import SELECTION as TOFU
from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT_TASK

# The text task's declarations when schema 2 began, all TOFU's: Leak@k (and max ROUGE@k) and the reference attack came
# later (their results carry their own catalogue).
TEXT_NOW = TEXT_TASK.selected(TOFU)
LATER = ("leak_at_k", "max_rouge_at_k", "mia_reference_auc", "mia_gradnorm_auc")
TEXT = TEXT_NOW.holding(m.name for m in TEXT_NOW.metrics if m.name not in LATER)

# A task's own declaration of Δacc, under a label no other catalogue uses: where it shows, the result's was read.
OWN = {"metrics": [{"name": "delta_acc", "label": "gap", "ideal": 0.0, "headline": ["forget_test"],
                    "leaderboard": ["forget_test"], "figure": []}],
       "splits": {"forget_test": "test"}, "gold_standards": ["retrain"], "derived": []}
JOB = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
       "method": "all", "seed_unlearn": 0, "seed_eval": 0}


def write_result(folder: Path, seed: int, catalogue=None, schema: int = 2) -> None:
    """A complete job of three methods recording Δacc D'_f; `catalogue` None: none at all (schema 1)."""
    records = [{"target": "3", "method": m, "role": "unlearned", "metric": "delta_acc", "split": "forget_test",
                "value": v + seed / 100} for m, v in (("alpha", 0.1), ("beta", 0.3), ("retrain", 0.0))]
    content = {"schema": schema, "status": "complete", "error": None, "job": {**JOB, "seed_train": seed},
               "records": records, **({} if catalogue is None else {"catalogue": catalogue})}
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(content))


# as `job.task` names them; each task's own with the core's after it, as a job declares them
TASKS = {"image_classification": with_core(IMAGE), "text": with_core(TEXT), "ltr": with_core(RANKING)}


def test_the_legacy_catalogue_holds_each_tasks_declarations_and_their_union_stands_in_for_an_unknown_task():
    assert json.loads(LEGACY_FILE.read_text(encoding="utf-8")) == {t: c.as_dict() for t, c in TASKS.items()}
    for task, declared in TASKS.items():
        assert legacy_catalogue(task) == declared
    union = IMAGE + TEXT + RANKING + CORE  # in the file's order (image, text, ranking), the core's metrics last
    in_order = (*IMAGE.metrics, *TEXT.metrics, *RANKING.metrics, *CORE.metrics)
    assert legacy_catalogue() == legacy_catalogue("unknown") == dataclasses.replace(union, metrics=in_order)
    assert legacy_catalogue().gold_standards == {"retrain", "fed_retrain", "text_retrain"}
    assert legacy_catalogue("text").per_example == TEXT.per_example and legacy_catalogue("ltr").per_example is None


def test_a_schema_1_result_is_read_with_its_tasks_legacy_catalogue():
    for task, declared in TASKS.items():
        assert result_catalogue({"job": {**JOB, "task": task}, "records": []}) == declared
    assert result_catalogue({"job": {**JOB, "task": None}, "records": []}) == legacy_catalogue()
    assert result_catalogue({"job": {"seed_train": 0}, "records": []}) == legacy_catalogue()


def test_a_result_is_read_with_its_own_catalogue_and_a_schema_1_result_with_the_legacy_one(tmp_path):
    write_result(tmp_path / "new" / "job0", 0, OWN)
    write_result(tmp_path / "old" / "job0", 0, schema=1)
    _, new_jobs = load_results([tmp_path / "new"])
    assert catalogue_of(new_jobs) == Catalogue.from_dict(OWN)
    assert catalogue_of(new_jobs).label("delta_acc", "forget_test") == "gap test"
    _, old_jobs = load_results([tmp_path / "old"])
    assert catalogue_of(old_jobs) == legacy_catalogue("image_classification")
    merged = catalogue_of(new_jobs + old_jobs)  # in either order: the labels first as text ("D'_f" < "test")
    assert merged == catalogue_of(old_jobs + new_jobs)
    assert merged.label("delta_acc", "forget_test") == "gap D'_f" and merged.metric("mia") is not None
    assert catalogue_of([]) == Catalogue()


def test_every_name_and_label_of_a_catalogue_must_be_text():
    """A per-example metric of 0 or False is as damaged as a list where a name belongs: nothing falsy slips by."""
    for per_example in ({"forget": "f", "retain": "r", "unseen": "u", "accuracy": 0},
                        {"forget": "f", "retain": "r", "unseen": "u", "privacy": False},
                        {"forget": "f", "retain": ["r"], "unseen": "u"}):
        with pytest.raises(ValueError, match="where a name or label belongs"):
            Catalogue.from_dict({**OWN, "per_example": per_example})
    fine = Catalogue.from_dict({**OWN, "per_example": {"forget": "f", "retain": "r", "unseen": "u"}})
    assert fine.per_example.accuracy is None and "f" in fine.texts()


def test_a_damaged_catalogue_is_one_warning_naming_its_file_and_the_legacy_stands_in(tmp_path):
    sweep = tmp_path / "sweep"
    write_result(sweep / "job0", 0, OWN)
    write_result(sweep / "job1", 1, {"metrics": [{"name": "delta_acc"}]})  # no label
    write_result(sweep / "job2", 2, {"metrics": [{"name": ["delta_acc"], "label": "x"}]})  # a name that is no text
    write_result(sweep / "job3", 3, "a catalogue")
    report = build_report([sweep], tmp_path / "report", figures=False)
    assert [job["status"] for job in report.jobs] == ["complete"] * 4  # no job is lost to its declarations
    assert set(report.study.values["seed_train"]) == {0, 1, 2, 3}
    damaged = [w for w in report.warnings if "damaged metric catalogue" in w]
    assert damaged == [
        "damaged metric catalogue in 3 result files, read with the legacy catalogue instead: job1/result.json (not "
        "a metric catalogue: Metric.__init__() missing 1 required positional argument: 'label'); job2/result.json "
        "(not a metric catalogue: \"['delta_acc']\" where a name or label belongs); job3/result.json (not a metric "
        "catalogue: 'str' object has no attribute 'get')"]
    assert report.study.catalogue.label("delta_acc", "forget_test") == "gap D'_f"  # job0's metric, the split's first
    assert report.study.catalogue.metric("mia") is not None  # and the legacy catalogue's beside it


def test_the_job_table_is_headed_by_the_results_own_labels():
    records = [{"target": "3", "method": "alpha", "role": "unlearned", "metric": m, "split": s, "value": v}
               for m, s, v in (("delta_acc", "forget_test", 0.25), ("time_s", None, 2.0))]
    job = {**JOB, "seed_train": 0}
    own = job_table({"job": job, "records": records, "catalogue": {**OWN, "metrics": [
        *OWN["metrics"], *CORE.as_dict()["metrics"]]}}).splitlines()
    assert own[3].split() == ["target", "3", "gap", "test", "time", "s"]
    legacy = job_table({"job": job, "records": records}).splitlines()  # schema 1
    assert legacy[3].split() == ["target", "3", "Δacc", "D'_f", "time", "s"]
    assert legacy[5].split() == own[5].split() == ["alpha", "0.250", "2.000"]


# String constants of the report that equal a task's metric name without being one: each why, in the module that
# holds it (the test fails when one goes away, so that the list stays the list of what is left).
NOT_METRICS = {
    ("build.py", "forget_quality"): "the file forget_quality.csv (the per-example F of the NeurIPS 2023 competition)",
    ("compute/forget_quality.py", "forget_quality"): "the competition's F, a column of forget_quality.csv",
    ("render/figures.py", "forget_quality"): "the competition's F, a column of forget_quality.csv",
    ("read/curves.py", "loss"): "a series of result.json's training curves (core's)",
    ("render/figures.py", "loss"): "a series of result.json's training curves (core's)",
}


def task_metric_names() -> set[str]:
    """Every metric a task declares (its derived ones too), less the core's: those belong to no task."""
    tasks = IMAGE + TEXT + RANKING
    return ({m.name for m in tasks.metrics} | {d.name for d in tasks.derived}) - {m.name for m in CORE.metrics}


def test_the_report_names_no_tasks_metric():
    """The report's code names no metric of a task (its imports: tests/core/test_layering.py)."""
    package = Path(unlearnbench.report.__file__).parent
    names = task_metric_names()
    assert {"acc", "delta_acc", "forget_quality", "truth_ratio", "ndcg@10"} <= names and "time_s" not in names
    named = set()
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                named.add((module, node.value))
    assert named == set(NOT_METRICS)
