"""SCRUB: a student (a copy of M_o) moves away from the teacher M_o on D_f while staying close to it on D_r.

Kurmanji et al., "Towards Unbounded Machine Unlearning" (NeurIPS 2023), github meghdadk/SCRUB. The teacher is M_o,
frozen in eval mode; the student trains in train mode. Epochs count from 1; in each epoch:
  1. while epoch ≤ msteps, one max pass over D_f (shuffled, `forget_batch_size`): per batch minimise
     −KL_T(teacher ‖ student);
  2. one min pass over D_r (shuffled, `batch_size`): per batch minimise
     γ · CE(student, y) + α · KL_T(teacher ‖ student).
KL_T(t ‖ s) = T² · (1/B) · Σ over the batch and the classes of softmax(t/T) · (log softmax(t/T) − log softmax(s/T)),
RepDistiller's `DistillKL` (`thirdparty/repdistiller/distiller_zoo/KD.py`: `kl_div(log p_s, p_t, sum) · T² / B`).
The learning rate is set per epoch: lr · rate^(number of decay epochs strictly below the epoch), RepDistiller's
`adjust_learning_rate` (`helper/util.py`). The optimiser is SGD (lr, momentum, weight decay) or Adam (lr, weight
decay as L2 in the gradient, torch's default betas; `momentum` unused), as the notebooks' `args.optim`.

Defaults: the SCRUB authors' notebooks, by setting (the YAML maps them by dataset):
- every dataset but digits: `large_scale_unlearning.ipynb` (CIFAR-10 / Lacuna-10 with All-CNN or ResNet; the
  README's large-scale setting): SGD lr 5e-4, momentum 0.9, weight decay 5e-4, 3 epochs, msteps 2, T = 4, γ = 0.99,
  α = 0.001, decay epochs [3, 5, 9] at rate 0.1 (so never within 3 epochs), batch 256 retain / 512 forget;
- digits (about 145 training images per class): `small_scale_unlearning.ipynb` (small_cifar5 / small_lacuna5,
  125 per class): Adam lr 5e-4, weight decay 0.1, 10 epochs, msteps 3, T = 2, γ = 1, α = 0.5, decay epochs
  [5, 8, 9] at rate 0.1, batch 32 retain / 64 forget.
Not carried over: the smoothed-SGDA term (`args.smoothing` × parameter distance to an SWA average of the student,
taken from epoch `sstart` = 10: removed from the notebooks in May 2024 and from `loops.py` in Aug 2024); gradient
clipping (commented out there); β for other distillation losses (0, with `distill = 'kd'`); the rewinding of SCRUB+R
(`MIA_experiments.ipynb`: keep the epoch checkpoint whose forget error is closest to the error on held-out samples
of the forgotten classes).
A float16 model (precision 16-true) is refused with Adam: its moment estimates underflow there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, Range
from unlearnbench.runtime import during
from unlearnbench.runtime.train import descend, float_logits
from unlearnbench.tasks.image.methods.base import ImageMethod, UnlearningTask, refuse_float16, setting
from unlearnbench.tasks.image.train import Batches

OPTIMIZERS = ("sgd", "adam")


def distill_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """T² · KL(softmax(teacher/T) ‖ softmax(student/T)), summed over classes and averaged over the batch."""
    log_student = F.log_softmax(student_logits / temperature, dim=1)
    log_teacher = F.log_softmax(teacher_logits / temperature, dim=1)
    kl = F.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True)
    return kl * temperature**2


def decayed_lr(lr: float, epoch: int, decay_epochs: Sequence[int], rate: float) -> float:
    """The reference's step schedule: lr · rate^k, k = how many decay epochs lie strictly below `epoch` (from 1)."""
    return lr * rate ** sum(epoch > e for e in decay_epochs)


class Scrub(ImageMethod):
    ranges: ClassVar[dict[str, Range]] = {"msteps": AT_LEAST_0, "gamma": AT_LEAST_0, "alpha": AT_LEAST_0,
                                          "lr_decay_epochs": AT_LEAST_1, "lr_decay_rate": Range(0, 1, low_open=True),
                                          "optimizer": Range(choices=OPTIMIZERS)}

    def __init__(self, name: str, epochs: int = 3, msteps: int = 2, optimizer: str = "sgd", lr: float = 5e-4,
                 momentum: float = 0.9, weight_decay: float = 5e-4, temperature: float = 4.0, gamma: float = 0.99,
                 alpha: float = 0.001, batch_size: int = 256, forget_batch_size: int = 512,
                 lr_decay_epochs: Sequence[int] = (3, 5, 9), lr_decay_rate: float = 0.1) -> None:
        super().__init__(name)
        self.epochs, self.msteps, self.optimizer, self.lr = epochs, msteps, optimizer, lr
        self.momentum, self.weight_decay, self.temperature = momentum, weight_decay, temperature
        self.gamma, self.alpha = gamma, alpha
        self.batch_size, self.forget_batch_size = batch_size, forget_batch_size
        self.lr_decay_epochs, self.lr_decay_rate = lr_decay_epochs, lr_decay_rate

    def student(self, model: nn.Module, task: UnlearningTask) -> tuple[nn.Module, torch.optim.Optimizer]:
        """The student set up by Fabric with the configured optimiser (SGD or Adam, as the notebooks' `optim`)."""
        if setting(self.optimizer, task) == "sgd":
            return task.sgd(model, self.lr, self.momentum, self.weight_decay)
        adam = torch.optim.Adam(model.parameters(), lr=setting(self.lr, task),
                                weight_decay=setting(self.weight_decay, task))
        model, adam = task.fabric.setup(model, adam)
        refuse_float16(model, self.name)
        return model, adam

    def unlearn(self, model: nn.Module, task: UnlearningTask) -> nn.Module:
        lr = setting(self.lr, task)
        student, optimizer = self.student(model, task)
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
            during.epoch_ended()
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
            descend(task.fabric, optimizer, loss, model=student)

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
            descend(task.fabric, optimizer, loss, model=student)
