"""Loss-Free Selective Synaptic Dampening (LFSSD): SSD with an importance that reads no label.

Foster, Schoepf and Brintrup, "Loss-Free Machine Unlearning", ICLR 2024 (Tiny Papers track). The authors' code is
their SSD code (github if-loops/selective-synaptic-dampening) with the two changes its README gives for LFSSD.

As SSD (`ssd.py`: the importance passes in the same order and batch sizes, selection, dampening, caching of I_D,
honest cost), except the importance: per batch L = mean over the batch of ‖M(x)‖₂², formed as the README forms it
(`torch.norm(out, p="fro", dim=1).pow(2).mean()`: the norm, then its square), and imp_θ accumulates |∂L/∂θ| (the
absolute value, not the square), averaged over batches. It approximates the sensitivity of the output's magnitude to
each parameter (the idea of Memory Aware Synapses) instead of the Fisher information of the loss, so the loss never
reads a label: in pool order (`order: dataset`) permuting the labels leaves M_u unchanged. In the reference's order
the labels still decide which samples share a batch, since D_r runs class by class.

α, for ResNet18 and ViT alike, is the LFSSD paper's as the SUPREME framework takes it (`unlearn_main.py`): full
class 5 on CIFAR-20 and 10 on CIFAR-100, sub-class 10, random sample 3.5 (set on CIFAR-10). No value was published
for a full class of a 10-class dataset. There the ratio the selection compares with α is small: the per-sample
gradients of ‖M(x)‖² agree within a class, so batch means hardly cancel, and a parameter that only D_f uses gets
I_f/I_D ≈ n_batches(D)/n_batches(D_f) ≈ |D|/|D_f|, about 8 on digits (23/3 batches) and 10 on CIFAR-10, against 20
and 100 where 5 and 10 were set. unlearnbench's config uses α = 3 for the full class on its 10-class datasets
(digits, CIFAR-10, Fashion-MNIST). Measured on the digits demo (width 8, class 3, the reference's order): with
training seed 0, α = 3 takes acc D'_f from 0.919 to 0.000 and leaves acc D'_r at 0.947 (M_o's); 3.5 leaves 0.081 of
D'_f, 5 leaves 0.676 and 7 dampens nothing that matters (0.919); with training seed 1, α = 2.5 to 4 take D'_f to
0.000 with D'_r 0.925 to 0.938 (M_o 0.944), and 5 leaves 0.351.
"""

from __future__ import annotations

from unlearnbench.tasks.image.methods.ssd import SSD


class LFSSD(SSD):
    loss_kind = "logit_norm"
    magnitude = "abs"
    memo_kind = "lfssd_importance"
