"""SSD (Foster et al., AAAI 2024) and LFSSD (Foster et al., ICLR 2024 Tiny Papers): importances and dampening
against a hand computation, the reference's order of D_f and D_r per scenario, label-freedom of LFSSD's importance,
determinism given M_o, the cached full-set importance and its honest cost, and whole jobs. `test_oracle_ssd.py`
checks the whole method against the reference's loops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from fabricate import write_cifar100
from helpers import TINY, make_task, run_in_process
from lightning_fabric import Fabric
from lightning_fabric.plugins.precision import MixedPrecision
from torch import nn

from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost
from unlearnbench.tasks.image.data.base import ImageData, Subset, full_pool
from unlearnbench.tasks.image.data.cifar import Cifar100
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, Splits, SubClass
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.methods.lfssd import LFSSD
from unlearnbench.tasks.image.methods.ssd import SSD, dampen, dataset_order, importance, reference_order
from unlearnbench.tasks.image.models.resnet import ResNet18
from unlearnbench.tasks.image.train import Batches

CIFAR_MEAN, CIFAR_STD = [0.5071, 0.4865, 0.4409], [0.2673, 0.2564, 0.2762]
SPLITS = ("forget_train", "retain_train", "forget_test", "retain_test")


pytestmark = pytest.mark.usefixtures("one_thread")


# --- hand computation ----------------------------------------------------------------------------------------------

def tiny_data() -> ImageData:
    """Seven 3-pixel 'images' (3 × 1 × 1) of 2 classes: batches of 3 give 3, 3 and 1 samples."""
    generator = torch.Generator().manual_seed(7)
    images = torch.randint(0, 256, (7, 3, 1, 1), generator=generator, dtype=torch.uint8)
    labels = torch.tensor([0, 1, 1, 0, 1, 0, 0])
    return ImageData("tiny", images, labels, images, labels, ["a", "b"], (0.4, 0.5, 0.6), (0.2, 0.3, 0.25))


def tiny_model() -> nn.Module:
    """Linear + BatchNorm1d with non-trivial running statistics (eval mode uses them)."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3, 2), nn.BatchNorm1d(2))
    with torch.no_grad():
        model[2].running_mean.copy_(torch.tensor([0.3, -0.2]))
        model[2].running_var.copy_(torch.tensor([1.5, 0.7]))
        model[2].weight.copy_(torch.tensor([1.2, 0.8]))
        model[2].bias.copy_(torch.tensor([0.1, -0.3]))
    return model


def by_hand(model: nn.Module, data: ImageData, order: list[int], batch_size: int, loss_of, magnitude_of) -> dict:
    """The importance computed independently: per batch, normalise by hand, torch.autograd.grad of the loss, then
    the mean over batches of magnitude(gradient)."""
    mean, std = torch.tensor(data.mean).view(1, 3, 1, 1), torch.tensor(data.std).view(1, 3, 1, 1)
    named = list(model.named_parameters())
    totals = {name: torch.zeros_like(p) for name, p in named}
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    model.eval()
    for chunk in chunks:
        x = (data.train_images[chunk].float() / 255 - mean) / std
        loss = loss_of(model(x), data.train_labels[chunk])
        grads = torch.autograd.grad(loss, [p for _, p in named])
        for (name, _), grad in zip(named, grads, strict=True):
            totals[name] += magnitude_of(grad)
    return {name: total / len(chunks) for name, total in totals.items()}


@pytest.mark.parametrize("loss_kind, magnitude, loss_of, magnitude_of", [
    ("cross_entropy", "square", F.cross_entropy, torch.square),
    # the reference README's LFSSD loss, norm then square (a sum of squares rounds differently)
    ("logit_norm", "abs", lambda logits, labels: torch.norm(logits, p="fro", dim=1).pow(2).mean(), torch.abs),
])
def test_importance_is_the_mean_over_batches_of_the_batch_mean_gradient_magnitude(loss_kind, magnitude, loss_of,
                                                                                 magnitude_of):
    data = tiny_data()
    fabric = Fabric(accelerator="cpu", devices=1)
    order = [4, 0, 6, 2, 5, 1, 3]  # an arbitrary subset order: batches follow it, unshuffled
    subset = Subset(data, "train", torch.tensor(order))
    model = fabric.setup_module(tiny_model())
    batches = Batches(fabric, subset, 3, Normalizer(data.mean, data.std), training=False)  # keeps the last (1)
    got = importance(fabric, model, batches, loss_kind,
                     magnitude)
    expected = by_hand(tiny_model(), data, order, 3, loss_of, magnitude_of)
    assert set(got) == {"1.weight", "1.bias", "2.weight", "2.bias"}  # BN γ, β; not its running statistics
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
        assert got[name].dtype == torch.float32
    assert all(p.grad is None for p in model.parameters())  # no gradient left behind
    assert not model.training


def test_importance_undoes_the_gradient_scaler_of_16_mixed():
    """`fabric.backward` multiplies a 16-mixed loss by the scaler's scale; the importance must not see it."""
    data = tiny_data()
    result = []
    for scale in (1.0, 1024.0):
        precision = MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu", init_scale=scale))
        fabric = Fabric(accelerator="cpu", devices=1, plugins=[precision])
        batches = Batches(fabric, full_pool(data, "train"), 3, Normalizer(data.mean, data.std))
        for loss_kind, magnitude in (("cross_entropy", "square"), ("logit_norm", "abs")):
            result.append(importance(fabric, fabric.setup_module(tiny_model()), batches, loss_kind, magnitude))
    for unscaled, scaled in zip(result[:2], result[2:], strict=True):
        for name in unscaled:
            torch.testing.assert_close(scaled[name], unscaled[name], rtol=1e-3, atol=0)


def test_dampening_follows_the_formula_exactly():
    model = tiny_model()
    fabric = Fabric(accelerator="cpu", devices=1)
    data = tiny_data()
    batches = Batches(fabric, full_pool(data, "train"), 3, Normalizer(data.mean, data.std))
    setup = fabric.setup_module(model)
    i_d = importance(fabric, setup, batches)
    i_f = importance(fabric, setup, Batches(fabric, Subset(data, "train", torch.tensor([1, 2, 4])), 3,
                                            Normalizer(data.mean, data.std)))
    ratio = torch.cat([(i_f[k] / i_d[k]).flatten() for k in i_d])
    ratio = ratio[torch.isfinite(ratio)]
    alpha, lam = float(ratio.quantile(0.5)), float(ratio.quantile(0.75))  # some selected, some not; β < 1 and β = 1
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    count = dampen(setup, i_f, i_d, alpha, lam)
    selected_total = clamped = 0
    for name, theta in model.named_parameters():
        selected = i_f[name] > alpha * i_d[name]
        beta = torch.clamp(lam * i_d[name] / i_f[name], max=1)
        expected = torch.where(selected, before[name] * beta, before[name])
        assert torch.equal(theta.detach(), expected), name
        selected_total += int(selected.sum())
        clamped += int((selected & (beta == 1)).sum())
    assert 0 < selected_total == count < ratio.numel()
    assert 0 < clamped < selected_total


def test_dampening_by_hand_numbers():
    layer = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[2.0, -4.0, 8.0, 1.0]]))
    i_f = {"weight": torch.tensor([[1.0, 1.0, 4.0, 0.0]])}
    i_d = {"weight": torch.tensor([[1.0, 0.0625, 0.25, 0.0]])}
    assert dampen(layer, i_f, i_d, alpha=2.0, lam=1.0) == 2
    # 1 > 2·1: no; 1 > 0.125: β = 0.0625; 4 > 0.5: β = 0.0625; 0 > 0: no (no division by zero)
    assert layer.weight.tolist() == [[2.0, -0.25, 0.5, 1.0]]
    assert dampen(layer, {"weight": torch.tensor([[1.0, 0, 0, 0]])}, {"weight": torch.tensor([[0.4, 0, 0, 0]])},
                  alpha=2.0, lam=10.0) == 1  # selected (1 > 0.8), but β = min(4, 1) = 1
    assert layer.weight.tolist() == [[2.0, -0.25, 0.5, 1.0]]


def test_dampening_keeps_the_parameter_dtype():
    layer = nn.Linear(2, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 5.0]]))
    dampen(layer, {"weight": torch.tensor([[1.0, 1.0]])}, {"weight": torch.tensor([[0.5, 0.01]])}, 10.0, 1.0)
    assert layer.weight.dtype == torch.bfloat16  # θ₂ · 0.01, formed in float32, rounded once to bfloat16
    assert torch.equal(layer.weight, torch.tensor([[3.0, 5.0 * 0.01]]).to(torch.bfloat16))


# --- tasks built by hand: determinism, label-freedom, the cache ----------------------------------------------------

@pytest.fixture(scope="module")
def digits() -> ImageData:
    return Digits(name="digits", mean=[0.3053], std=[0.3759], targets={"full_class": ["3"]}).load()


@pytest.fixture(scope="module")
def cifar20(tmp_path_factory) -> ImageData:
    root = tmp_path_factory.mktemp("cifar100")
    write_cifar100(root)
    return Cifar100(name="cifar20", coarse=True, mean=CIFAR_MEAN, std=CIFAR_STD, root=str(root),
                    targets={"sub_class": ["rocket"]}).load()


def resnet(classes: int, channels: int, shift: int = 0):
    """A tiny ResNet18 factory; `shift` draws that many numbers first, i.e. a different original model."""
    def factory() -> nn.Module:
        torch.rand(shift)
        return ResNet18(classes, channels, width=4)
    return factory


def unlearned(method, data, scenario, target, factory, seed, cache_dir: Path) -> dict:
    task, load = make_task(data, scenario, target, factory, seed=seed, cache_dir=cache_dir)
    model = method.unlearn(load(), task)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method_class", [SSD, LFSSD])
@pytest.mark.parametrize("setting", ["full_class", "sub_class"])
def test_same_model_for_every_unlearning_seed_and_another_for_another_original(method_class, setting, digits,
                                                                                cifar20, tmp_path):
    if setting == "full_class":
        data, scenario, target, classes, channels = digits, FullClass("full_class"), "3", 10, 1
    else:
        data, scenario, target, classes, channels = cifar20, SubClass("sub_class"), "rocket", 20, 3
    method = method_class("m", alpha=2.0)  # an untrained network: a lower α so that something is dampened at all
    runs = [unlearned(method, data, scenario, target, resnet(classes, channels, shift), seed, tmp_path / f"{i}")
            for i, (shift, seed) in enumerate([(0, 0), (0, 1), (1, 0)])]
    original = dict(make_task(data, scenario, target, resnet(classes, channels), cache_dir=tmp_path / "o")[1]()
                    .state_dict())
    assert not identical(runs[0], original)  # it did something
    assert identical(runs[0], runs[1])
    assert not identical(runs[0], runs[2])


def test_lfssd_importance_never_looks_at_a_label(digits, tmp_path):
    """In pool order permuting the labels leaves LFSSD's M_u as it is (not SSD's). In the reference's order the
    labels do decide the order of D_r (class by class), though never the loss."""
    scenario = FullClass("full_class")
    task, load = make_task(digits, scenario, "3", resnet(10, 1), cache_dir=tmp_path / "a")
    permuted = replace(digits, train_labels=digits.train_labels[torch.randperm(
        len(digits.train_labels), generator=torch.Generator().manual_seed(0))])
    moved = Splits(*(replace(subset, data=permuted) for _, subset in task.splits.items()))  # the same index sets
    task_permuted, _ = make_task(digits, scenario, "3", resnet(10, 1), cache_dir=tmp_path / "b")
    task_permuted = replace(task_permuted, data=permuted, splits=moved)
    for method, same in ((LFSSD("lfssd", alpha=2.0, order="dataset"), True),
                         (SSD("ssd", alpha=2.0, order="dataset"), False)):
        a = method.unlearn(load(), task).state_dict()
        b = method.unlearn(load(), task_permuted).state_dict()
        assert identical(a, b) is same, method.name


def test_full_set_importance_is_cached_and_its_time_is_reported(digits, tmp_path):
    scenario = FullClass("full_class")
    method = SSD("ssd", alpha=2.0)
    builds, entries = [], []

    def spying(task):
        memo = task.memo

        def spy(kind, parts, build):
            def counted():
                builds.append(kind)
                return build()
            entry = memo(kind, parts, counted)
            entries.append(entry)
            return entry
        return replace(task, memo=spy)

    results, costs = [], []
    for seed in (0, 1):  # two jobs on the same M_o (two unlearning seeds), one cache
        task, load = make_task(digits, scenario, "3", resnet(10, 1), seed=seed, cache_dir=tmp_path / "cache")
        task = spying(task)
        results.append({k: v.clone() for k, v in method.unlearn(load(), task).state_dict().items()})
        costs.append(method.cost(Cost(0.25, 0.1, 50.0), task))
    assert builds == ["ssd_importance"]  # built once, then read
    assert [e.hit for e in entries] == [False, True]
    assert len([p for p in (tmp_path / "cache").iterdir() if (p / "COMPLETE").exists()]) == 1
    assert identical(*results)
    computed_s = entries[1].meta["time_s"]
    assert computed_s > 0 and entries[1].meta["time_s"] == entries[0].meta["time_s"]
    assert costs[0].time_s == 0.25  # computed in the call: measured as it is
    assert costs[1].time_s == pytest.approx(0.25 + computed_s)  # read from the cache: its computation counted
    assert (costs[1].memory_gib, costs[1].utilisation_pct) == (0.1, 50.0)
    assert method.cost(Cost(0.25), task).time_s == 0.25  # the reuse is counted once, for its own call
    lfssd_task, load = make_task(digits, scenario, "3", resnet(10, 1), cache_dir=tmp_path / "cache")
    LFSSD("lfssd").unlearn(load(), lfssd_task)  # another loss, another artefact
    assert len([p for p in (tmp_path / "cache").iterdir() if (p / "COMPLETE").exists()]) == 2
    SSD("ssd", order="dataset").unlearn(load(), lfssd_task)  # another order of D, another artefact
    assert len([p for p in (tmp_path / "cache").iterdir() if (p / "COMPLETE").exists()]) == 3


# --- the order of D_f and D_r -------------------------------------------------------------------------------------

def members(pool_labels: torch.Tensor, value: int | torch.Tensor) -> torch.Tensor:
    return torch.nonzero(pool_labels == value).flatten()


def test_full_class_reference_order_runs_class_by_class(digits):
    task, _ = make_task(digits, FullClass("full_class"), "3", resnet(10, 1))
    forget, retain = reference_order(task)
    labels = digits.train_labels[retain.indices]
    assert torch.equal(labels, labels.sort().values)  # class after class, in class order ...
    assert labels.unique().tolist() == [c for c in range(10) if c != 3]
    for c in labels.unique():  # ... each class in pool order
        assert torch.equal(retain.indices[labels == c], members(digits.train_labels, c))
    assert torch.equal(forget.indices, members(digits.train_labels, 3))
    pool_forget, pool_retain = dataset_order(task)
    assert torch.equal(pool_forget.indices, forget.indices)
    assert torch.equal(pool_retain.indices, task.splits.retain_train.indices)
    assert not torch.equal(pool_retain.indices, retain.indices)  # the digits pool interleaves its classes


def test_sub_class_reference_order_runs_fine_class_by_fine_class(cifar20):
    task, _ = make_task(cifar20, SubClass("sub_class"), "rocket", resnet(20, 3))
    forget, retain = reference_order(task)
    rocket = cifar20.group_names.index("rocket")
    fine = cifar20.train_groups[retain.indices]
    assert torch.equal(fine, fine.sort().values) and rocket not in fine.tolist()
    for g in fine.unique():
        assert torch.equal(retain.indices[fine == g], members(cifar20.train_groups, g))
    assert torch.equal(forget.indices, members(cifar20.train_groups, rocket))
    assert not torch.equal(retain.indices, task.splits.retain_train.indices)  # not pool order


def test_random_sample_reference_order_is_a_draw_from_the_method_stream(digits):
    """The sets of the split, each in the order of a uniform permutation (as the reference's `random_split`), drawn
    from the method's stream: the same draw for the same stream."""
    task, _ = make_task(digits, RandomSample("random_sample", batch_size=128), "0.1", resnet(10, 1), seed=5)
    state = task.rng.torch.get_state()
    forget, retain = reference_order(task)
    for ordered, split in ((forget, task.splits.forget_train), (retain, task.splits.retain_train)):
        assert torch.equal(ordered.indices.sort().values, split.indices)
        assert not torch.equal(ordered.indices, split.indices)
    task.rng.torch.set_state(state)
    again = reference_order(task)
    assert torch.equal(again[0].indices, forget.indices) and torch.equal(again[1].indices, retain.indices)


def test_an_unknown_order_is_refused_before_any_work():
    with pytest.raises(UserError, match="order"):
        SSD.check_options({"name": "ssd", "order": "sorted"})
    with pytest.raises(UserError, match="valid: reference, dataset"):
        LFSSD("lfssd", order="sorted")


# --- whole jobs ------------------------------------------------------------------------------------------------

def unlearned_records(outcome) -> dict:
    assert outcome.error is None, outcome.trace
    return {(r["target"], r["method"], r["metric"], r["split"]): r["value"] for r in outcome.records
            if r["role"] == "unlearned" and r["metric"] in ("acc", "loss")}


def records(outcome, role: str, metric: str, method=None) -> dict:
    return {r["split"]: r["value"] for r in outcome.records
            if r["role"] == role and r["metric"] == metric and r["method"] == method}


@pytest.fixture(scope="module")
def job_folder(tmp_path_factory) -> Path:
    """One folder, hence one model cache, for the digits jobs: M_o of training seed 0 is trained once."""
    return tmp_path_factory.mktemp("jobs")


# TINY trained for one epoch: these jobs train their own four models (the test counts its cache's entries), and what
# they assert (which seed a result follows, what is cached, α = 1e30) holds for any trained M_o
ONE_EPOCH = [*TINY, "train.epochs=1", "train.milestones=[]"]


@pytest.fixture(scope="module")
def jobs(job_folder):
    """Digits full class, TINY for one epoch: seeds (train, unlearn) (0, 1), (0, 2), (1, 1), all on one cache."""
    folder = job_folder
    cache = folder / "cache"
    out = {}
    for train, unlearn in ((0, 1), (0, 2), (1, 1)):
        before = set(cache.iterdir()) if cache.exists() else set()
        out[train, unlearn] = run_in_process([*ONE_EPOCH, f"seeds.train={train}", f"seeds.unlearn={unlearn}",
                                              "seeds.eval=0"], folder, ["ssd", "lfssd"])
        out[train, unlearn, "new entries"] = len({p for p in cache.iterdir() if p.is_dir()} - before)
    return out


def test_job_results_do_not_depend_on_the_unlearning_seed_but_on_the_original_model(jobs):
    a, b, c = unlearned_records(jobs[0, 1]), unlearned_records(jobs[0, 2]), unlearned_records(jobs[1, 1])
    for method in ("ssd", "lfssd"):
        assert {("3", method, m, s) for m in ("acc", "loss") for s in SPLITS} <= a.keys()
    assert a == b
    assert a != c
    assert {k: v for k, v in a.items() if k[1] == "ssd"} != {k: v for k, v in c.items() if k[1] == "ssd"}
    assert {k: v for k, v in a.items() if k[1] == "lfssd"} != {k: v for k, v in c.items() if k[1] == "lfssd"}


def test_job_on_a_known_original_model_reuses_both_importances(jobs):
    assert jobs[0, 1, "new entries"] == 4  # M_o, M_r, SSD's I_D, LFSSD's I_D
    assert jobs[0, 2, "new entries"] == 1  # only M_r for the new unlearning seed
    assert jobs[1, 1, "new entries"] == 3  # a new M_o: its two importances (M_r of seed 1 is cached)
    for method in ("ssd", "lfssd"):
        first = records(jobs[0, 1], "unlearned", "time_s", method)[None]
        reused = records(jobs[0, 2], "unlearned", "time_s", method)[None]
        assert reused > 0.3 * first  # the cached pass's time is part of the reported cost, not dropped


@pytest.mark.parametrize("method", ["ssd", "lfssd"])
def test_in_a_job_an_alpha_nothing_reaches_leaves_the_original_model(jobs, job_folder, method):
    """No I_f exceeds α·I_D for α = 1e30: nothing is dampened, M_u is M_o, and so is every score of it (the
    forgetting itself hangs on the trained model: test_outcomes.py says what holds)."""
    outcome = run_in_process([*ONE_EPOCH, "seeds.train=0", "seeds.unlearn=1", "seeds.eval=0", "method.alpha=1e30"],
                             job_folder, [method])  # M_o, M_r and I_D from the cache
    assert outcome.error is None, outcome.trace
    original, unlearned = records(outcome, "original", "acc"), records(outcome, "unlearned", "acc", method)
    assert unlearned == original
    assert records(outcome, "unlearned", "loss", method) == records(outcome, "original", "loss")
    assert records(outcome, "unlearned", "layer_distance", method) == records(outcome, "original", "layer_distance")


def test_both_run_in_the_sub_class_scenario_on_cifar20(tmp_path):
    write_cifar100(tmp_path / "data" / "cifar100")
    outcome = run_in_process(["dataset=cifar20", "scenario=sub_class", "scenario.targets=[rocket]", "model.width=4",
                              "train.epochs=1", "train.milestones=[]", "runtime.threads=1",
                              "runtime.print_table=false"], tmp_path, ["ssd", "lfssd"])
    got = unlearned_records(outcome)
    for method in ("ssd", "lfssd"):
        assert all(0 <= got["rocket", method, "acc", s] <= 1 for s in SPLITS)
