"""SSD and LFSSD against an oracle: the reference's loops written out again here in plain PyTorch, on the data the
reference's scripts would build, in every scenario.

Reference: github if-loops/selective-synaptic-dampening. `ssd.py`: `calc_importance` (per unshuffled batch: clear the
gradients, mean loss, backward, add grad² (SSD) or |grad| (LFSSD, the README's loss ‖M(x)‖₂² via `torch.norm`);
divide by the number of batches) and `modify_weight` (where I_f > α·I_D multiply θ by min(λ·I_D/I_f, 1)), run by
`ssd_tuning` in eval mode on `forget_train_dl` and `full_train_dl` = ConcatDataset((retain, forget)). The data:
- full class (`forget_full_class_*.py`): samples grouped by their third item (the class; CIFAR-20's coarse class),
  D_r = every other class in class order, D_f = the class, each class in dataset order; batch 64 for both;
- sub-class (`forget_subclass_*.py`): grouped by the second item (CIFAR-20's fine class) the same way; the loss
  uses the third (the coarse class); batch 64 for both;
- random sample (`forget_random_main.py`): `random_split` slices one random permutation into D_f and D_r; batch 128
  for both. The forget set here is unlearnbench's draw; the order within D_f and within D_r, which the reference
  draws with its own seed, is taken from the method's stream as unlearnbench draws it (`ssd.shuffled`).
The weights must come out bit-identical in float32 on one CPU thread.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from helpers import make_task
from torch import Tensor, nn
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from unlearnbench.tasks.image.data.base import ImageData
from unlearnbench.tasks.image.data.digits import Digits
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample, Scenario, SubClass
from unlearnbench.tasks.image.methods.base import UnlearningTask
from unlearnbench.tasks.image.methods.lfssd import LFSSD
from unlearnbench.tasks.image.methods.ssd import SSD
from unlearnbench.tasks.image.models.resnet import ResNet18

FINE_TO_COARSE = [2, 0, 3, 1, 0, 2, 1, 3]  # 8 fine classes in 4 super-classes, CIFAR-20 style
MEAN, STD = (0.45, 0.5, 0.55), (0.25, 0.2, 0.3)
ALPHA = {"ssd": 2.0, "lfssd": 1.5}  # low enough, for an untrained network, that some entries are selected


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data() -> ImageData:
    """A CIFAR-20-like pool: 3 × 8 × 8 images whose mean depends on the fine class, classes interleaved at random in
    pool order (so grouping by class changes which samples share a batch)."""
    generator = torch.Generator().manual_seed(11)

    def pool(n: int) -> tuple[Tensor, Tensor]:
        fine = torch.randint(0, len(FINE_TO_COARSE), (n,), generator=generator)
        noise = torch.randint(0, 160, (n, 3, 8, 8), generator=generator)
        images = (noise + 12 * fine.view(-1, 1, 1, 1)).to(torch.uint8)
        return images, fine

    train_images, train_fine = pool(400)
    test_images, test_fine = pool(80)
    coarse = torch.tensor(FINE_TO_COARSE)
    return ImageData("cifar20_like", train_images, coarse[train_fine], test_images, coarse[test_fine],
                     [f"super{c}" for c in range(4)], MEAN, STD, train_groups=train_fine, test_groups=test_fine,
                     group_names=[f"fine{f}" for f in range(8)])


def small_model() -> nn.Module:
    """Conv, batch norm (with running statistics far from 0 and 1: eval mode uses them), ReLU, linear."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 8 * 8, 4))
    with torch.no_grad():
        model[1].running_mean.copy_(torch.tensor([0.2, -0.3, 0.1, 0.4]))
        model[1].running_var.copy_(torch.tensor([1.7, 0.6, 2.2, 0.9]))
        model[1].weight.copy_(torch.tensor([1.1, 0.7, 1.3, 0.9]))
        model[1].bias.copy_(torch.tensor([0.05, -0.1, 0.2, 0.0]))
    return model


# --- the oracle --------------------------------------------------------------------------------------------------

class ReferenceSamples(Dataset):
    """The pool as the reference's datasets serve it: (ToTensor then Normalize of the image, fine, coarse) as its
    `Cifar20`, or (image, empty tensor, label) as its `Cifar10` and `Cifar100` where there are no fine classes."""

    def __init__(self, data: ImageData) -> None:
        self.data = data
        self.mean = torch.tensor(data.mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(data.std, dtype=torch.float32).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.data.train_labels)

    def __getitem__(self, i: int) -> tuple[Tensor, int | Tensor, int]:
        x = self.data.train_images[i].to(torch.float32) / 255
        groups = self.data.train_groups
        fine = int(groups[i]) if groups is not None else torch.Tensor([])
        return (x - self.mean) / self.std, fine, int(self.data.train_labels[i])


def by_class(samples: Dataset, classes: int, item: int) -> dict[int, list]:
    """Every sample, in dataset order, filed under its `item`-th element (2: the class, 1: the fine class)."""
    filed: dict[int, list] = {c: [] for c in range(classes)}
    for i in range(len(samples)):
        sample = samples[i]
        filed[sample[item]].append(sample)
    return filed


def retain_and_forget(filed: dict[int, list], forgotten: int) -> tuple[list, list]:
    """D_r: the samples of every other class, class after class; D_f: those of the forgotten class."""
    retain = [s for c in sorted(filed) if c != forgotten for s in filed[c]]
    return retain, list(filed[forgotten])


def oracle_importance(model: nn.Module, loader: DataLoader, label_free: bool) -> dict[str, Tensor]:
    clearer = torch.optim.SGD(model.parameters(), lr=0.1)  # only clears the gradients, as in the reference
    sums = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    for x, _fine, y in loader:
        clearer.zero_grad()
        out = model(x)
        loss = torch.norm(out, p="fro", dim=1).pow(2).mean() if label_free else nn.CrossEntropyLoss()(out, y)
        loss.backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                sums[name] += p.grad.clone().abs() if label_free else p.grad.clone().pow(2)
    return {name: total / float(len(loader)) for name, total in sums.items()}


@torch.no_grad()
def oracle_dampen(model: nn.Module, i_f: dict[str, Tensor], i_d: dict[str, Tensor], alpha: float) -> int:
    """λ = 1, exponent 1, bound 1 (the reference's settings); returns how many entries were selected."""
    selected = 0
    for name, theta in model.named_parameters():
        where = torch.where(i_f[name] > i_d[name] * alpha)
        factor = (i_d[name] * 1.0 / i_f[name]).pow(1)[where]
        factor[factor > 1] = 1
        theta[where] = theta[where] * factor
        selected += len(where[0])
    return selected


def oracle(original: nn.Module, retain: list, forget: list, batch_size: int, label_free: bool,
           alpha: float) -> tuple[dict[str, Tensor], int]:
    """`ssd_tuning` on D_f and D = D_r followed by D_f: the dampened state and the number of selected entries."""
    model = original.eval()
    forget_loader = DataLoader(forget, batch_size)
    full_loader = DataLoader(ConcatDataset((retain, forget)), batch_size=batch_size)
    i_f = oracle_importance(model, forget_loader, label_free)
    i_d = oracle_importance(model, full_loader, label_free)
    return model.state_dict(), oracle_dampen(model, i_f, i_d, alpha)


# --- the reference's data per scenario -----------------------------------------------------------------------------

def reference_sets(data: ImageData, scenario: Scenario, target: str, task: UnlearningTask) -> tuple[list, list]:
    samples = ReferenceSamples(data)
    if isinstance(scenario, FullClass):
        return retain_and_forget(by_class(samples, len(data.classes), 2), data.classes.index(target))
    if isinstance(scenario, SubClass):
        return retain_and_forget(by_class(samples, len(data.group_names), 1), data.group_names.index(target))
    # random_split: D_f = π[:k], D_r = π[k:], with unlearnbench's sets and the order it draws within each
    generator = torch.Generator().set_state(task.rng.torch.get_state())
    forget = task.splits.forget_train.indices.sort().values
    retain = task.splits.retain_train.indices.sort().values
    forget = forget[torch.randperm(len(forget), generator=generator)]
    permutation = torch.cat([forget, retain[torch.randperm(len(retain), generator=generator)]])
    k = len(forget)
    return [samples[int(i)] for i in permutation[k:]], [samples[int(i)] for i in permutation[:k]]


def pool_order_sets(data: ImageData, task: UnlearningTask) -> tuple[list, list]:
    samples = ReferenceSamples(data)
    return ([samples[int(i)] for i in task.splits.retain_train.indices.sort().values],
            [samples[int(i)] for i in task.splits.forget_train.indices.sort().values])


SCENARIOS: dict[str, Callable[[], tuple[Scenario, str]]] = {
    "full_class": lambda: (FullClass("full_class"), "super1"),  # the super-class: fine classes 1 and 4
    "sub_class": lambda: (SubClass("sub_class"), "fine5"),
    "random_sample": lambda: (RandomSample("random_sample", batch_size=128), "0.35"),
}
METHODS = {"ssd": (SSD, False), "lfssd": (LFSSD, True)}


def unlearnbench_state(method_name: str, task: UnlearningTask, load: Callable[[], nn.Module],
                       order: str = "reference") -> dict[str, Tensor]:
    method_class, _ = METHODS[method_name]
    method = method_class(method_name, alpha=ALPHA[method_name], batch_size=task.scenario.batch_size, order=order)
    return {k: v.detach().clone() for k, v in method.unlearn(load(), task).state_dict().items()}


def assert_identical(got: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


@pytest.mark.parametrize("method_name", list(METHODS))
@pytest.mark.parametrize("scenario_name", list(SCENARIOS))
def test_bit_identical_to_the_reference_loops_on_the_reference_order(method_name, scenario_name, data, tmp_path):
    scenario, target = SCENARIOS[scenario_name]()
    task, load = make_task(data, scenario, target, small_model, seed=3, cache_dir=tmp_path)
    retain, forget = reference_sets(data, scenario, target, task)  # before unlearn draws from the method's stream
    assert sorted(len(s) for s in (retain, forget)) == sorted(len(s) for s in (task.splits.retain_train,
                                                                               task.splits.forget_train))
    expected, selected = oracle(load(), retain, forget, scenario.batch_size, METHODS[method_name][1],
                                ALPHA[method_name])
    total = sum(p.numel() for p in small_model().parameters())
    assert 0 < selected < total
    assert_identical(unlearnbench_state(method_name, task, load), expected)


@pytest.mark.parametrize("method_name", list(METHODS))
def test_bit_identical_with_unlearnbench_resnet18_on_digits(method_name, tmp_path):
    """A real network (batch norm in every block, residual paths) on a real 10-class pool whose order cycles
    through the classes: full class '3', batch 64."""
    digits = Digits(name="digits", mean=[0.3053], std=[0.3759]).load()
    scenario = FullClass("full_class")

    def factory() -> nn.Module:
        return ResNet18(10, 1, width=4)

    task, load = make_task(digits, scenario, "3", factory, seed=0, cache_dir=tmp_path)
    retain, forget = reference_sets(digits, scenario, "3", task)
    expected, selected = oracle(load(), retain, forget, 64, METHODS[method_name][1], ALPHA[method_name])
    assert 0 < selected < sum(p.numel() for p in factory().parameters())
    assert_identical(unlearnbench_state(method_name, task, load), expected)


@pytest.mark.parametrize("method_name", list(METHODS))
@pytest.mark.parametrize("scenario_name", ["full_class", "sub_class"])
def test_the_order_matters_and_the_dataset_option_runs_pool_order(method_name, scenario_name, data, tmp_path):
    """Pool order gives another result here (the classes are interleaved), which `order: dataset` reproduces; run on
    the cache the reference order filled, so I_D of one order is never served for the other."""
    scenario, target = SCENARIOS[scenario_name]()
    task, load = make_task(data, scenario, target, small_model, seed=3, cache_dir=tmp_path)
    label_free = METHODS[method_name][1]
    reference_state, _ = oracle(load(), *reference_sets(data, scenario, target, task), scenario.batch_size,
                                label_free, ALPHA[method_name])
    pool_state, selected = oracle(load(), *pool_order_sets(data, task), scenario.batch_size, label_free,
                                  ALPHA[method_name])
    assert selected > 0
    assert any(not torch.equal(reference_state[k], pool_state[k]) for k in pool_state)
    assert_identical(unlearnbench_state(method_name, task, load), reference_state)
    assert_identical(unlearnbench_state(method_name, task, load, order="dataset"), pool_state)
