"""Fine-tuning M_o on the retain set alone (the retain set and the general sets, M_r's training data), in the hope
that it forgets D_f by catastrophic forgetting: the text task's `finetune` baseline (Golatkar et al. 2020 and the
image task's). The recipe is the fine-tuning one (`train`) with `epochs` and `lr` (null: the recipe's rate); the
data order comes from the unlearning seed.
"""

from __future__ import annotations

from types import SimpleNamespace

from torch import nn

from unlearnbench.tasks.text.methods.base import TextMethod, TextTask
from unlearnbench.tasks.text.model.train import fine_tune


class TextFinetune(TextMethod):
    def __init__(self, name: str, epochs: int = 2, lr: float | None = None) -> None:
        super().__init__(name)
        self.epochs, self.lr = epochs, lr

    def unlearn(self, model: nn.Module, task: TextTask) -> nn.Module:
        recipe = SimpleNamespace(**{**vars(task.recipe), "epochs": self.epochs,
                                    "lr": self.lr if self.lr is not None else task.recipe.lr})
        return fine_tune(task.fabric, model, task.retain, recipe, task.rng.torch)
