"""Every image method under data parallelism: two CPU ranks (`strategy=ddp_spawn`, gloo) through the real console
script, and UNSIR's noise steps, which run backward passes through a DDP model with its parameters frozen."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import REPO, TINY, make_task, results, run_cli
from lightning_fabric import Fabric
from omegaconf import OmegaConf

from unlearnbench.core.components import locate
from unlearnbench.runtime.ranks import launch
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass
from unlearnbench.tasks.image.methods.unsir import Unsir, optimise_noise
from unlearnbench.tasks.image.models.resnet import ResNet18

pytestmark = pytest.mark.processes  # every test here starts processes: the console script, ranks or a cluster

METHODS = {"finetune", "retrain", "bad_teacher", "random_labels", "unsir", "ssd", "lfssd", "gradient_ascent",
           "neggrad_plus", "scrub", "salun", "l1_sparse"}
SPLITS = ("forget_train", "retain_train", "forget_test", "retain_test")
# A quarter of digits for training (449 images) and unlearning batches of 512 (the methods' `batch_size` follows the
# scenario's; the models, in the suite's cache, do not depend on it): fewer steps for every method, so the job of all
# of them on two ranks takes well under a minute on 2 busy cores (with TINY's 80% split and batches of 64, about
# two). The test checks mechanics, not outcomes.
SMALL = [*TINY, "dataset.test_fraction=0.75", "scenario.batch_size=512", "strategy=ddp_spawn", "strategy.devices=2"]


def registered_image_methods() -> set[str]:
    """The image-classification methods of conf/method/ (read, not composed: composing all of them takes seconds)."""
    return {path.stem for path in (REPO / "conf" / "method").glob("*.yaml")
            if locate(OmegaConf.load(path)["_target_"]).task == "image"}


def test_every_image_method_completes_on_two_ranks(tmp_path, shared_cache):
    """One job of every method (one M_o, one M_r, in the suite's cache: test_ranks.py's jobs need them too):
    complete, no method failed, every accuracy a fraction; each method's dynamics taken by both ranks (a point after
    every epoch, on 16 examples of each split)."""
    during = ["evaluation.during.every=1epoch", "evaluation.during.max_examples=16"]
    run = run_cli([*SMALL, *during, f"paths.cache_dir={shared_cache}"], tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    (result,) = results(tmp_path / "sweep").values()
    assert result["status"] == "complete" and result["error"] is None
    assert result["failures"] == []
    assert result["job"]["devices"] == 2 and result["numerics"]["world_size"] == 2
    accuracy = {(r["method"], r["split"]): r["value"] for r in result["records"]
                if r["role"] == "unlearned" and r["metric"] == "acc"}
    ran = {method for method, _ in accuracy}
    assert ran >= METHODS and ran == registered_image_methods()
    for method in ran:
        for split in SPLITS:
            value = accuracy[method, split]
            assert value is not None and 0.0 <= value <= 1.0, (method, split, value)
    points = {}
    for r in result["records"]:
        if "step" in r:
            points.setdefault(r["method"], set()).add(r["step"])
            assert r["value"] is None or math.isfinite(r["value"]), r
    assert set(points) == ran and all(0 in steps and len(steps) >= 2 for steps in points.values())


def unsir_on_two_ranks(fabric: Fabric) -> dict:
    """Run by each rank: UNSIR's noise steps on the DDP model, then the whole method; what rank 0 returns compares
    both ranks' noise and unlearned weights, and reports what the noise steps left on the model."""
    torch.set_num_threads(1)
    data = Digits(name="digits", mean=[0.3053], std=[0.3759], targets={"full_class": ["3"]}).load()
    task, load = make_task(data, FullClass(name="full_class"), "3", lambda: ResNet18(10, 1, width=8), fabric=fabric)
    method = Unsir("unsir", noise_steps=3, noise_copies=2, retain_per_class=20)
    model, _ = task.adam(load(), 1e-4, "unsir")
    noise, _ = optimise_noise(fabric, model, method.initial_noise(task), task.forget_label, 3, 0.1, 0.1)
    untouched = all(p.grad is None and p.requires_grad for p in model.parameters())
    unlearned = method.unlearn(load(), task)
    weights = torch.cat([p.detach().flatten() for p in unlearned.parameters()])
    original = torch.cat([p.detach().flatten() for p in load().parameters()])
    noises, all_weights = fabric.all_gather(noise), fabric.all_gather(weights)
    return {"same_noise": torch.equal(*noises), "same_weights": torch.equal(*all_weights),
            "moved": not torch.equal(weights, original), "untouched": untouched}


def on_two_ranks(fabric: Fabric) -> dict:
    """Run by each rank: both checks below, in one launch."""
    return {"unsir": unsir_on_two_ranks(fabric), "predictions": predictions_on_two_ranks(fabric)}


@pytest.fixture(scope="module")
def two_ranks() -> dict:
    """Two ranks forked from this process (Fabric's `ddp_fork`: what is checked does not depend on how the ranks
    start, and a spawned rank would spend 8 CPU-s importing torch, Lightning and the task again; the jobs'
    ddp_spawn is test_every_image_method_completes_on_two_ranks's)."""
    return launch(Fabric(accelerator="cpu", strategy="ddp_fork", devices=2), on_two_ranks)


def test_unsir_keeps_two_ranks_in_step(two_ranks):
    """The noise steps leave DDP's reducer alone: afterwards the impair and repair steps synchronise gradients (the
    ranks train on different halves of each batch and still end with identical weights), and both ranks used the
    same noise."""
    assert two_ranks["unsir"] == {"same_noise": True, "same_weights": True, "moved": True, "untouched": True}


def predictions_on_two_ranks(fabric: Fabric) -> dict:
    """Run by each rank: logits of one fixed model for pools whose sizes leave uneven and missing batches."""
    from unlearnbench.runtime.seeding import global_seed
    from unlearnbench.tasks.image.data.base import Subset
    from unlearnbench.tasks.image.data.transforms import Normalizer
    from unlearnbench.tasks.image.evaluate import predict

    torch.set_num_threads(1)
    data = Digits(name="digits", mean=[0.3053], std=[0.3759], targets={"full_class": ["3"]}).load()
    with global_seed(7):
        model = ResNet18(10, 1, width=4)
    normalizer = Normalizer(data.mean, data.std)
    return {(n, batch): predict(fabric, model, Subset(data, "test", torch.arange(n).flip(0)), batch,
                                normalizer).numpy()  # plain arrays: tensors would cross back as shared memory
            for n, batch in ((1, 4), (7, 2), (9, 4), (64, 64), (65, 16))}


def test_evaluation_on_two_ranks_equals_one_rank_sample_for_sample(two_ranks):
    """Batch k goes to rank k mod 2, the last round is padded and the padding cut: for pools of 1 sample, of an odd
    number of batches and of a last short batch, two ranks return one rank's logits, in the pool's order."""
    one = predictions_on_two_ranks(Fabric(accelerator="cpu", devices=1))
    two = two_ranks["predictions"]
    assert one.keys() == two.keys()
    for case, logits in one.items():
        assert logits.shape == (case[0], 10) and (logits == two[case]).all(), case
