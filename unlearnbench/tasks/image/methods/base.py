"""The image-classification methods' interface: `unlearn(model, task)` turns a copy of M_o into M_u, given an
`UnlearningTask`; `setting` resolves an option given by model, dataset or scenario. The interface every task shares
is `unlearnbench.core.method.Method`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.core.method import Method as BaseMethod
from unlearnbench.core.method import keyed
from unlearnbench.runtime.cache import Entry
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import Streams
from unlearnbench.tasks.image.data.base import ImageData, Subset
from unlearnbench.tasks.image.data.scenarios import Scenario, Splits
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.train import Batches


@dataclass
class UnlearningTask:
    """Everything a method may use. Its random choices draw from `rng` (derived from the unlearning seed)."""

    fabric: Fabric
    model_name: str
    data: ImageData
    splits: Splits
    scenario: Scenario
    target: str
    normalizer: Normalizer
    rng: Streams
    original: Callable[[], nn.Module]  # a fresh copy of M_o (e.g. a frozen teacher)
    random_model: Callable[[torch.Generator], nn.Module]  # a freshly initialised model of the same architecture
    retrained: nn.Module  # M_r, for the `retrain` baseline only
    retrained_cost: Cost
    memo: Callable[[str, dict, Callable[[], tuple[dict[str, Tensor], dict]]], Entry]
    """`memo(kind, parts, build)`: an artefact derived from M_o alone plus `parts`, from the model cache or built by
    `build() -> (tensors, meta)` on a miss, so work that only depends on M_o is done once per original model."""

    def batches(self, subset: Subset, batch_size: int, shuffle: bool = True, training: bool = True) -> Batches:
        """Unaugmented batches of `subset` (unlearning-time data is normalised only), shuffled with `rng`;
        `training=False` for passes in evaluation mode (see `Batches`)."""
        return Batches(self.fabric, subset, batch_size, self.normalizer, self.rng.torch if shuffle else None,
                       training=training)

    def sgd(self, model: nn.Module, lr: Any, momentum: Any = 0.0,
            weight_decay: Any = 0.0) -> tuple[nn.Module, torch.optim.Optimizer]:
        """`model` and SGD on its parameters, set up by Fabric; each hyperparameter resolved by `setting`."""
        optimizer = torch.optim.SGD(model.parameters(), lr=setting(lr, self), momentum=setting(momentum, self),
                                    weight_decay=setting(weight_decay, self))
        return self.fabric.setup(model, optimizer)

    def adam(self, model: nn.Module, lr: Any, method: str) -> tuple[nn.Module, torch.optim.Optimizer]:
        """`model` and Adam on its parameters, set up by Fabric; a float16 model is refused (`refuse_float16`)."""
        model, optimizer = self.fabric.setup(model, torch.optim.Adam(model.parameters(), lr=setting(lr, self)))
        refuse_float16(model, method)
        return model, optimizer

    @property
    def forget_label(self) -> int:
        """The label every forget sample carries in targeted scenarios: the class (full-class) or the super-class
        of the forgotten sub-class."""
        forget = self.splits.forget_train
        return int(forget.labels[forget.indices[0]])


def setting(value: Any, task: UnlearningTask) -> Any:
    """A hyperparameter that may differ by model, dataset or scenario (`core.method.keyed`), for this task's job."""
    return keyed(value, (task.model_name, task.data.name, task.scenario.name))


class ImageMethod(BaseMethod):
    """The base of the image-classification methods: `unlearn(model, task)` with an `UnlearningTask`."""

    task = "image"

    def serves(self, scenario: Scenario) -> bool:
        return True

    @abstractmethod
    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        """Return M_u, starting from `model` (a copy of M_o that the method may change in place)."""


Method = ImageMethod  # the name an image method derives from in docs/extending.md and its example package


def random_other_labels(labels: Tensor, num_classes: int, generator: torch.Generator) -> Tensor:
    """A label drawn uniformly among the classes other than each sample's own (Random Labels, SalUn).

    In the full-class scenario the own label is the forgotten class, in the sub-class scenario the forgotten
    class's super-class, so neither is ever assigned.
    """
    offsets = torch.randint(1, num_classes, labels.shape, generator=generator).to(labels.device)
    return (labels + offsets) % num_classes


def refuse_float16(model: nn.Module, method: str) -> None:
    """Adam's second-moment estimate, about 0.001·g², underflows in float16 for |g| < 0.008, and Adam then divides
    by its ε (also 0 in float16): the model turns into NaN. So a float16 model (precision 16-true) is refused."""
    if any(p.dtype == torch.float16 for p in model.parameters()):
        raise UserError(f"method {method} trains with Adam, whose moment estimates underflow in float16 and turn the "
                        f"model into NaN; use precision=16-mixed, bf16-mixed or bf16-true instead of 16-true")
