"""Random Labels (RL): train M_o on D_r together with D_f relabelled at random among the other classes.

Golatkar, Achille and Soatto, "Eternal Sunshine of the Spotless Net: Selective Forgetting in Deep Networks" (CVPR
2020), whose "Random Labels" baseline this is, as the SSD authors' code runs it: `amnesiac` in
if-loops/selective-synaptic-dampening (src/forget_full_class_strategies.py, forget_subclass_strategies.py,
forget_random_strategies.py), credited there (forget_full_class_strategies.py l. 232) to the code of
vikram2000b/bad-teaching-unlearning, with no paper.
The SUPREME code (pedroandreou/supreme-unlearning, random_labeling.py) cites Golatkar et al. and calls the name
"amnesiac" a misnomer: it comes from Graves et al., "Amnesiac Machine Learning" (AAAI 2021), whose amnesiac
unlearning undoes the recorded updates of the batches that held D_f; the relabelling run here is the plainer
"unlearning" that paper describes beside it.
Each forget sample gets one label, drawn once, uniformly among the classes other than its own: every class but the
forgotten one (full-class), every super-class but the forgotten sub-class's (sub-class), any class but the sample's
own (random-sample). Then 3 epochs over relabelled D_f ∪ D_r, batch 128, shuffled, Adam lr 1e-4, train mode,
cross-entropy (the reference's `fit_one_unlearning_cycle`, src/unlearn.py).

Difference from the reference: the labels and the data order come from the unlearning seed instead of unseeded
global RNG (the reference's random-sample variant draws by rejection, ours by an offset: the same distribution).
A float16 model (precision 16-true) is refused: Adam's moment estimates underflow there and the model turns into NaN.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, random_other_labels, setting
from unlearnbench.tasks.image.train import Batches, cross_entropy_epochs


def relabelled(task: UnlearningTask) -> tuple[Subset, Tensor]:
    """D_f followed by D_r, and their training labels aligned by position: D_f's drawn with the unlearning seed."""
    forget, retain = task.splits.forget_train, task.splits.retain_train
    new_labels = random_other_labels(forget.labels[forget.indices], task.data.num_classes, task.rng.torch)
    subset = Subset(task.data, "train", torch.cat([forget.indices, retain.indices]))
    return subset, torch.cat([new_labels, retain.labels[retain.indices]])


class WithLabels:
    """Batches of (inputs, labels[positions]): one epoch, shuffled anew, each time it is iterated."""

    def __init__(self, batches: Batches, labels: Tensor) -> None:
        self.batches, self.labels = batches, labels

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for inputs, _, positions in self.batches.indexed():
            yield inputs, self.labels[positions]


class RandomLabels(ImageMethod):
    deterministic = False

    def __init__(self, name: str, epochs: int = 3, lr: float = 1e-4, batch_size: int = 128) -> None:
        super().__init__(name)
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        subset, labels = relabelled(task)
        model, optimizer = task.adam(model, self.lr, self.name)
        batches = WithLabels(task.batches(subset, setting(self.batch_size, task)), labels)
        cross_entropy_epochs(task.fabric, model, optimizer, batches, setting(self.epochs, task))
        return model
