"""Bad Teacher (BadT, "incompetent teacher"): the student copies M_o on retained data and a random model on D_f.

Chundawat et al., "Can Bad Teaching Induce Forgetting? Unlearning in Deep Networks Using an Incompetent Teacher"
(AAAI 2023), github vikram2000b/bad-teaching-unlearning, as the SSD authors' code runs it (`blindspot` in
if-loops/selective-synaptic-dampening, src/forget_full_class_strategies.py, with `UnlearnerLoss` and
`blindspot_unlearner` in src/unlearn.py). The student (a copy of M_o, train mode) makes one pass over D_f (flag 1)
∪ a random 30% of D_r (flag 0), batch 256 (ViT 128), shuffled, Adam lr 1e-4, on
kl_div(log_softmax(student/T), target), averaged over batch × classes (PyTorch's 'mean', as the reference; not
'batchmean', and no T² factor), where target = flag·softmax(random/T) + (1 − flag)·softmax(M_o/T), T = 1.
Both teachers run in eval mode without gradients; the random teacher is a freshly initialised model of the same
architecture.

Differences from the reference: every draw (the 30%, the random teacher's weights, the data order) comes from the
unlearning seed instead of unseeded global RNG; the 30% is floor(0.3·|D_r|) samples, the count of the reference's
`int(0.3 * len)`; the 'mean' reduction is computed as the mean of the element-wise KL (the same value and gradient,
without PyTorch's deprecation warning for reduction='mean'). A float16 model (precision 16-true) is refused: Adam's
moment estimates underflow there and the model turns into NaN.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.core.config import Range
from unlearnbench.runtime.progress import EpochMeter
from unlearnbench.runtime.train import descend, float_logits
from unlearnbench.tasks.image.data.base import Subset
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, setting


def teacher_targets(flags: Tensor, competent_logits: Tensor, incompetent_logits: Tensor,
                    temperature: float) -> Tensor:
    """Per sample: softmax(incompetent/T) where the flag is 1 (forget), softmax(competent/T) where it is 0."""
    flags = flags.to(competent_logits.dtype).unsqueeze(1)
    competent = F.softmax(competent_logits / temperature, dim=1)
    incompetent = F.softmax(incompetent_logits / temperature, dim=1)
    return flags * incompetent + (1 - flags) * competent


def bad_teacher_loss(student_logits: Tensor, targets: Tensor, temperature: float) -> Tensor:
    """`F.kl_div(log_softmax(student/T), targets, reduction='mean')`: the mean over batch × classes."""
    return F.kl_div(F.log_softmax(student_logits / temperature, dim=1), targets, reduction="none").mean()


def unlearner_loss(student_logits: Tensor, flags: Tensor, competent_logits: Tensor, incompetent_logits: Tensor,
                   temperature: float) -> Tensor:
    """The reference's `UnlearnerLoss` on one batch: the student against the flag-selected teacher's softmax, both
    at temperature T; the teachers' logits carry no gradient (computed under `no_grad`)."""
    targets = teacher_targets(flags, competent_logits, incompetent_logits, temperature)
    return bad_teacher_loss(student_logits, targets, temperature)


class BadTeacher(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"retain_fraction": Range(0, 1, low_open=True)}
    deterministic = False

    def __init__(self, name: str, retain_fraction: float = 0.3, batch_size: int | dict = 256, epochs: int = 1,
                 lr: float = 1e-4, temperature: float = 1.0) -> None:
        super().__init__(name)
        self.retain_fraction, self.batch_size, self.epochs = retain_fraction, batch_size, epochs
        self.lr, self.temperature = lr, temperature

    def unlearning_data(self, task: UnlearningTask) -> tuple[Subset, Tensor]:
        """D_f followed by floor(fraction·|D_r|) samples of D_r drawn with the unlearning seed, and their flags
        (1 forget, 0 retain) aligned by position. Drawn first, so it does not depend on the other draws."""
        forget, retain = task.splits.forget_train, task.splits.retain_train
        count = int(setting(self.retain_fraction, task) * len(retain))
        chosen = torch.randperm(len(retain), generator=task.rng.torch)[:count].to(retain.indices.device)
        indices = torch.cat([forget.indices, retain.indices[chosen]])
        flags = torch.cat([torch.ones(len(forget)), torch.zeros(count)]).to(task.data.device)
        return Subset(task.data, "train", indices), flags

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        data, flags = self.unlearning_data(task)
        temperature = setting(self.temperature, task)
        incompetent = task.fabric.setup_module(task.random_model(task.rng.torch)).eval()
        competent = task.fabric.setup_module(task.original()).eval()
        student, optimizer = task.adam(model, self.lr, self.name)
        student.train()
        batches = task.batches(data, setting(self.batch_size, task))
        epochs = setting(self.epochs, task)
        with EpochMeter(task.fabric, epochs, len(batches)) as meter:  # the curve: the distillation loss
            for _ in range(epochs):
                for inputs, labels, positions in batches.indexed():
                    with torch.no_grad():
                        good, bad = float_logits(competent(inputs)), float_logits(incompetent(inputs))
                    logits = float_logits(student(inputs))
                    loss = unlearner_loss(logits, flags[positions], good, bad, temperature)
                    meter.batch(loss, logits, labels, optimizer)
                    descend(task.fabric, optimizer, loss, model=student)
                meter.end_epoch()
        return student
