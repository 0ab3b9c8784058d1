"""What the methods achieve, asserted only where it holds whatever the machine's float trajectory.

Another CPU model, instruction set or thread count trains other models; on the tiny test model one trajectory's
luck can flip a method's outcome (SSD at α = 10 forgets the class on one machine and leaves it untouched on another:
the seed sensitivity unlearnbench measures). So every claim here is about three training seeds at once (their mean)
or holds for every single run with a wide margin. The margins come from 24 runs of this exact setting (TINY, every
full-class method, training seeds 0-7) under three float trajectories of a 2-core AMD EPYC (AVX2): 1 thread,
2 threads, and 1 thread with the kernels capped at SSE4.2 (`ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41
MKL_ENABLE_INSTRUCTIONS=SSE4_2`). The worst value seen is quoted beside each assertion ("worst" is over single runs,
"worst mean" over every three of the 24 runs; SCRUB's and SalUn's were measured again, the same way, after their
defaults moved to the authors' values, and SCRUB's and NegGrad+'s again for `SHORTER`).

Two methods run shorter than their defaults (`SHORTER`), a third of this file's time otherwise: SCRUB 4 of its 10
digits epochs (its 3 max epochs and the first min-only one; its default's worst run was 0.164 below the original,
its worst mean −0.17 and +0.02 on D'_r), NegGrad+ 5 of its 10 epochs (the SCRUB authors' MIA notebook's count).

Not asserted, because no margin held: whether SSD, LFSSD, Bad Teacher or UNSIR lower the forget accuracy of one
model (per run, SSD's D'_f accuracy ranged from 0.70 to 1.30 times the original's, UNSIR's up to 1.55 times; their
mechanics are tested on constructed cases in test_methods_*.py). So they are not run here: that every method scores
on every split of a full-class job is asserted by test_cli.py's demo (every method, one job), and in the random-sample
scenario by test_methods_all.py.
"""

from __future__ import annotations

import pytest
from helpers import TINY, image_methods, run_in_process

pytestmark = pytest.mark.slow  # 24 methods' whole jobs over three training seeds: `make test` runs them, test-fast not

SEEDS = (0, 1, 2)
STRONG_FORGETTERS = ("finetune", "gradient_ascent", "neggrad_plus", "salun", "l1_sparse")  # train on D_r or ascend
RELABELLERS = ("random_labels", "scrub")  # D_f relabelled or pushed away from the teacher, D_r kept
RETAIN_KEEPERS = ("finetune", "salun", "l1_sparse", "random_labels", "scrub")  # keep training on D_r
METHODS = sorted({*STRONG_FORGETTERS, *RELABELLERS, *RETAIN_KEEPERS, "retrain"})  # the methods asserted on
SHORTER = {"scrub": ["method.epochs=4"], "neggrad_plus": ["method.epochs=5"]}  # the module docstring says why


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_cache) -> list[dict]:
    """The full-class methods asserted on, on digits at TINY, for three training seeds (the suite's cache)."""
    folder = tmp_path_factory.mktemp("outcomes")
    out = []
    for seed in SEEDS:
        outcome = run_in_process([*TINY, f"seeds.train={seed}"], folder, METHODS, shared_cache, SHORTER)
        assert outcome.error is None, outcome.trace
        out.append({(r["method"] or r["role"], r["metric"], r["split"]): r["value"] for r in outcome.records})
    return out


def mean(runs: list[dict], model: str, split: str, metric: str = "acc") -> float:
    return sum(run[model, metric, split] for run in runs) / len(runs)


def test_the_methods_score_on_every_split(runs):
    assert set(METHODS) <= set(image_methods("full_class"))
    for run in runs:
        for method in METHODS:
            for split in ("forget_test", "retain_test", "forget_train", "retain_train"):
                assert 0.0 <= run[method, "acc", split] <= 1.0, (method, split)


def test_the_original_model_learned_and_the_retrained_model_never_predicts_the_class(runs):
    assert mean(runs, "original", "forget_train") > 0.6  # worst mean 0.73
    assert mean(runs, "original", "retain_test") > 0.65  # worst mean 0.77
    assert mean(runs, "retrained", "retain_test") > 0.6  # worst mean 0.73 (worst run 0.68)
    for run in runs:
        assert run["retrained", "acc", "forget_test"] <= 0.05  # 0.0 in every run: it never saw the class


@pytest.mark.parametrize("method", STRONG_FORGETTERS)
def test_methods_that_train_on_the_retain_set_or_ascend_on_the_forget_set_forget_the_class(runs, method):
    for split in ("forget_test", "forget_train"):
        # worst mean ratio 0.32 (l1_sparse); gradient ascent, NegGrad+ and SalUn reached 0.0 in every run
        assert mean(runs, method, split) < 0.6 * mean(runs, "original", split), split


@pytest.mark.parametrize("method", RELABELLERS)
def test_relabelling_and_distilling_away_lower_the_forget_set_accuracy(runs, method):
    for run in runs:  # worst run: 0.164 below the original (random labels), 0.110 (SCRUB)
        assert run[method, "acc", "forget_train"] < run["original", "acc", "forget_train"]
    # worst mean −0.17, SCRUB's −0.158
    assert mean(runs, method, "forget_train") < mean(runs, "original", "forget_train") - 0.05


@pytest.mark.parametrize("method", RETAIN_KEEPERS)
def test_methods_that_keep_training_on_the_retain_set_keep_its_accuracy(runs, method):
    # worst mean +0.02, SCRUB's +0.013
    assert mean(runs, method, "retain_test") > mean(runs, "original", "retain_test") - 0.05


def test_retrain_is_the_retrained_model(runs):
    for run in runs:
        for split in ("forget_test", "retain_test", "forget_train", "retain_train"):
            assert run["retrain", "acc", split] == run["retrained", "acc", split]
            assert run["retrain", "delta_acc", split] == 0.0
