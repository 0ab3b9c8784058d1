"""Merging the metric catalogues of a sweep's results (`Catalogue.union`, the report's `merged`) gives one catalogue
whatever the order the results are read in; and each task declares its metrics once, the text task's benchmarks
selecting from its one catalogue what their jobs show (`Catalogue.selected`, `declared`)."""

from __future__ import annotations

import itertools

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from unlearnbench.core import catalogue
from unlearnbench.core.catalogue import CORE, RETRAINED, Catalogue, Metric, Roles, Selection, declared, with_core
from unlearnbench.report.read.catalogue import disagreement_warning, merged
from unlearnbench.report.read.collect import read_warnings
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.image.catalogue import CATALOGUE as IMAGE
from unlearnbench.tasks.ranking.catalogue import CATALOGUE as RANKING
from unlearnbench.tasks.text.benchmarks import muse, tofu, wmdp
from unlearnbench.tasks.text.catalogue import CATALOGUE as TEXT

TOFU, MUSE, WMDP = (with_core(TEXT.selected(b.SELECTION)) for b in (tofu, muse, wmdp))
ADDED = Catalogue((Metric("brier", "Brier", 0.0, headline=("forget_test",)),))  # a metric added to the image task


def results() -> list[Catalogue]:
    """Catalogues as a sweep's results carry them: whole, or only the metrics a job recorded (`holding`)."""
    tofu_without_sampling = TOFU.holding(m.name for m in TOFU.metrics if m.name not in ("leak_at_k", "max_rouge_at_k"))
    return [with_core(IMAGE), with_core(IMAGE) + ADDED, TOFU, tofu_without_sampling, MUSE, WMDP, with_core(RANKING)]


def test_merging_the_results_catalogues_in_every_order_gives_one_catalogue():
    catalogues = results()
    first = merged(catalogues)
    for order in itertools.permutations(catalogues[2:]):  # every order of five, the other two first and last
        assert merged([*catalogues[:2], *order]) == merged([*order, *catalogues[:2]]) == first
    for a, b in itertools.permutations(catalogues, 2):
        assert a + b == b + a
    assert merged([*catalogues, *catalogues[:3]]) == first  # a result read twice changes nothing
    assert {m.name for m in first.metrics} == set().union(*({m.name for m in c.metrics} for c in catalogues))


def test_a_task_s_results_merge_back_in_the_task_s_order():
    """Results that recorded fewer metrics (no sampling: no Leak@k) put nothing out of its place."""
    *_, tofu_without_sampling = results()[:4]
    for order in ((TOFU, tofu_without_sampling), (tofu_without_sampling, TOFU)):
        assert merged(order) == TOFU
    assert merged([with_core(IMAGE), with_core(IMAGE) + ADDED]).metrics[-1].name == "brier"  # after the core's
    assert catalogue.ordered([("a", "c"), ("a", "b", "c")]) == ("a", "b", "c")
    # chains that disagree still give one order
    assert catalogue.ordered([("x", "y"), ("y", "x")]) == catalogue.ordered([("y", "x"), ("x", "y")])


def test_a_metric_with_other_roles_in_another_benchmark_takes_the_union_of_its_splits():
    """MinK AUC is a headline of TOFU's jobs and not of MUSE's: in a report of both, it is one in either order."""
    assert TOFU.metric("mia_min_k_auc").headline == ("forget",) and MUSE.metric("mia_min_k_auc").headline == ()
    for order in ((TOFU, MUSE), (MUSE, TOFU)):
        both = merged(order)
        assert both.metric("mia_min_k_auc").headline == ("forget",)
        assert ("MinK AUC D_f", "mia_min_k_auc", "forget") in both.headline()
        assert both.metric("privleak") == TOFU.metric("privleak") == MUSE.metric("privleak")
    fewer = Catalogue((Metric("delta_acc", "Δacc", 0.0, headline=("forget_train",)),))
    assert (fewer + IMAGE).metric("delta_acc").headline == IMAGE.metric("delta_acc").headline == (
        "forget_test", "retain_test", "forget_train")


def test_a_metric_declared_with_other_facts_is_read_one_way_and_the_report_says_so():
    """Results of different versions: the label first as text; no ideal (never marked, not ranked) where the ideals
    differ; and one line of the report names the metrics."""
    old = Catalogue((Metric("acc", "accuracy", 0.5, leaderboard=("forget",)), Metric("loss", "loss", RETRAINED)))
    new = Catalogue((Metric("acc", "acc", RETRAINED, headline=("forget",), leaderboard=("forget",)),
                     Metric("loss", "loss", RETRAINED)))
    for order in ((old, new), (new, old)):
        acc = merged(order).metric("acc")
        assert (acc.label, acc.ideal, acc.headline, acc.leaderboard) == ("acc", None, ("forget",), ())
        assert merged(order).leaderboard() == []
    relabelled = Catalogue((Metric("loss", "NLL", RETRAINED, scale=2.0),))
    assert merged([new, relabelled]).metric("loss") == Metric("loss", "NLL", RETRAINED, scale=2.0)  # "NLL" < "loss"
    assert disagreement_warning([old, new, relabelled]) == (
        "metrics declared differently by the results: acc, loss; each is read with one label and scale, and where "
        "the ideals differ with none (never marked best, not ranked)")
    assert disagreement_warning(results()) is None  # the tasks' benchmarks agree on every shared metric's facts
    jobs = [{"folder": f"/sweep/job{i}", "catalogue": c} for i, c in enumerate((old, new))]
    assert read_warnings(jobs) == [disagreement_warning([old, new])]  # the report's warnings carry the line


def test_each_text_benchmark_selects_its_metrics_from_the_task_s_one_catalogue():
    names = [m.name for m in TEXT.metrics]
    assert len(names) == len(set(names)) and {"verbmem_rouge", "mc_accuracy", "forget_quality"} <= set(names)
    assert all(m.headline == m.leaderboard == m.figure == () for m in TEXT.metrics)  # roles are the benchmarks'
    assert [m.name for m in MUSE.metrics][:4] == ["verbmem_rouge", "knowmem_rouge", "privleak", "mia_min_k_auc"]
    assert MUSE.derived == () and TOFU.derived == TEXT.derived  # FQ against the first M_r: TOFU's alone
    assert WMDP.per_example is None and MUSE.per_example == TOFU.per_example == TEXT.per_example
    assert set(WMDP.splits) == {"", "forget", "general"} and "general_facts" not in MUSE.splits
    with pytest.raises(UserError, match=r"^the 'metrics' option of a benchmark's selection must be metrics its task "
                                        r"declares; got nope instead$"):
        TEXT.selected(Selection((Roles("nope"),), ("forget",)))


@pytest.mark.parametrize("preset, bench", [("experiment=tofu", tofu), ("experiment=muse", muse),
                                           ("experiment=wmdp", wmdp)])
def test_a_text_job_declares_the_task_s_catalogue_as_its_benchmark_selects_it(preset, bench):
    task = OmegaConf.to_container(compose_config([preset]).task, resolve=True)
    assert task["catalogue"] == "unlearnbench.tasks.text.catalogue.CATALOGUE"  # no dataset names its own
    assert declared(task) == with_core(TEXT.selected(bench.SELECTION))
    assert [m.name for m in declared(task).metrics][-len(CORE.metrics):] == [m.name for m in CORE.metrics]
