"""SCRUB: a student (a copy of M_o) moves away from the teacher M_o on D_f while staying close to it on D_r.

Kurmanji et al., "Towards Unbounded Machine Unlearning" (NeurIPS 2023), github meghdadk/SCRUB. The teacher is M_o,
frozen in eval mode; the student trains in train mode. Epochs count from 1; in each epoch:
  1. while epoch ≤ msteps, one max pass over D_f (shuffled, batch 64): per batch minimise −KL_T(teacher ‖ student);
  2. one min pass over D_r (shuffled, batch 32): per batch minimise γ · CE(student, y) + α · KL_T(teacher ‖ student).
KL_T(t ‖ s) = T² · mean over the batch of Σ_c softmax(t/T)_c · (log softmax(t/T)_c − log softmax(s/T)_c), the
knowledge-distillation loss of the reference (RepDistiller's `DistillKL`), with the T² scaling.
The learning rate is set per epoch: lr · rate^(number of decay epochs strictly below the epoch).

Defaults (spec/methods.md): SGD lr 5e-4, momentum 0.9, weight decay 5e-4, 5 epochs, msteps 3, T = 2, γ = 1, α = 0.5,
batch 32 retain / 64 forget (Deep Unlearn's batch sizes and T). The decay epochs [3, 5, 9] and rate 0.1 are those of
the SCRUB notebooks with this SGD setting (so epochs 4 and 5 run at lr 5e-5). Not carried over: the reference's
unused extras (label smoothing, the SWA model, gradient clipping; all disabled or dead code there); Deep Unlearn
runs Adam with weight decay 0.1 for 10 epochs, the spec the authors' SGD setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.config import AT_LEAST_0, AT_LEAST_1, Range
from unlearnbench.methods.base import Method, UnlearningTask, setting
from unlearnbench.runtime.train import Batches, descend, float_logits


def distill_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """T² · KL(softmax(teacher/T) ‖ softmax(student/T)), summed over classes and averaged over the batch."""
    log_student = F.log_softmax(student_logits / temperature, dim=1)
    log_teacher = F.log_softmax(teacher_logits / temperature, dim=1)
    kl = F.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True)
    return kl * temperature**2


def decayed_lr(lr: float, epoch: int, decay_epochs: Sequence[int], rate: float) -> float:
    """The reference's step schedule: lr · rate^k, k = how many decay epochs lie strictly below `epoch` (from 1)."""
    return lr * rate ** sum(epoch > e for e in decay_epochs)


class Scrub(Method):
    ranges: ClassVar[dict[str, Range]] = {"msteps": AT_LEAST_0, "gamma": AT_LEAST_0, "alpha": AT_LEAST_0,
                                          "lr_decay_epochs": AT_LEAST_1, "lr_decay_rate": Range(0, 1, low_open=True)}
    def __init__(self, name: str, epochs: int = 5, msteps: int = 3, lr: float = 5e-4, momentum: float = 0.9,
                 weight_decay: float = 5e-4, temperature: float = 2.0, gamma: float = 1.0, alpha: float = 0.5,
                 batch_size: int = 32, forget_batch_size: int = 64, lr_decay_epochs: Sequence[int] = (3, 5, 9),
                 lr_decay_rate: float = 0.1) -> None:
        super().__init__(name)
        self.epochs, self.msteps, self.lr, self.momentum = epochs, msteps, lr, momentum
        self.weight_decay, self.temperature, self.gamma, self.alpha = weight_decay, temperature, gamma, alpha
        self.batch_size, self.forget_batch_size = batch_size, forget_batch_size
        self.lr_decay_epochs, self.lr_decay_rate = lr_decay_epochs, lr_decay_rate

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        lr = setting(self.lr, task)
        student, optimizer = task.sgd(model, lr, self.momentum, self.weight_decay)
        teacher = task.fabric.setup_module(task.original())  # frozen: eval mode, only ever run under no_grad
        teacher.eval()
        retain = task.batches(task.splits.retain_train, setting(self.batch_size, task))
        forget = task.batches(task.splits.forget_train, setting(self.forget_batch_size, task))
        decay_epochs = list(setting(self.lr_decay_epochs, task))
        for epoch in range(1, setting(self.epochs, task) + 1):
            for group in optimizer.param_groups:
                group["lr"] = decayed_lr(lr, epoch, decay_epochs, setting(self.lr_decay_rate, task))
            if epoch <= setting(self.msteps, task):
                self.max_pass(student, teacher, optimizer, forget, task)
            self.min_pass(student, teacher, optimizer, retain, task)
        return student

    def max_pass(self, student: nn.Module, teacher: nn.Module, optimizer: torch.optim.Optimizer, forget: Batches,
                 task: UnlearningTask) -> None:
        """One pass over D_f pushing the student's predictions away from the teacher's."""
        temperature = setting(self.temperature, task)
        student.train()
        for inputs, _ in forget:
            with torch.no_grad():
                target = float_logits(teacher(inputs))
            loss = -distill_kl(float_logits(student(inputs)), target, temperature)
            descend(task.fabric, optimizer, loss)

    def min_pass(self, student: nn.Module, teacher: nn.Module, optimizer: torch.optim.Optimizer, retain: Batches,
                 task: UnlearningTask) -> None:
        """One pass over D_r keeping the student accurate and close to the teacher."""
        temperature, gamma, alpha = (setting(v, task) for v in (self.temperature, self.gamma, self.alpha))
        student.train()
        for inputs, labels in retain:
            with torch.no_grad():
                target = float_logits(teacher(inputs))
            logits = float_logits(student(inputs))
            loss = gamma * F.cross_entropy(logits, labels) + alpha * distill_kl(logits, target, temperature)
            descend(task.fabric, optimizer, loss)
