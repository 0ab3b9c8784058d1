"""Loss-Free Selective Synaptic Dampening (LFSSD): SSD without labels.

Foster, Schoepf and Brintrup, "Loss-Free Machine Unlearning", ICLR 2024 (Tiny Papers track); built on the authors' SSD
code (github if-loops/selective-synaptic-dampening) with only the importance changed.

As SSD (`ssd.py`: importance passes, selection, dampening, defaults, caching of I_D, honest cost), except the
importance uses no labels: per batch L = mean over the batch of ‖M(x)‖₂² (the squared L2 norm of the logits), and
imp_θ accumulates |∂L/∂θ| (the absolute value, not the square), averaged over batches. It approximates the
sensitivity of the output's magnitude to each parameter (the idea of Memory Aware Synapses) instead of the
Fisher information of the loss, so it never looks at a label: permuting the labels leaves M_u unchanged.

A consequence worth knowing: the per-sample gradients of ‖M(x)‖² agree within a class, so batch means hardly cancel,
and a parameter that only D_f uses gets I_f/I_D ≈ n_batches(D)/n_batches(D_f) ≈ |D|/|D_f|. Where D_f is a tenth of D
(full class on a 10-class dataset) that is about 10 or less, and the reference α = 10 (set on 20- and 100-class data)
selects next to nothing (digits: 23/3, 12 of 176k parameter entries selected); SSD's squared cross-entropy gradients
do cancel on D and exceed the ratio. unlearnbench's LFSSD config therefore uses α = 5 on its 10-class datasets
(digits, CIFAR-10, Fashion-MNIST) and the reference's values elsewhere.
"""

from __future__ import annotations

from unlearnbench.methods.ssd import SSD


class LFSSD(SSD):
    loss_kind = "logit_norm"
    magnitude = "abs"
    memo_kind = "lfssd_importance"
