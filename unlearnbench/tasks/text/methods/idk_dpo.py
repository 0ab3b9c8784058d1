"""IdkDPO: direct preference optimisation towards "I don't know" answers (Rafailov et al. 2023, DPO; as TOFU's
and OpenUnlearning's IdkDPO).

As OpenUnlearning's `DPO` handler with its idk experiment (src/trainer/unlearn/dpo.py, configs/trainer/DPO.yaml,
configs/experiment/unlearn/tofu/idk.yaml): the preferred answer to a forget question is an "I don't know" answer,
the rejected one the true answer; L_forget = −(2/β)·mean log σ(β(r_w − r_l)), r the log-ratio of the model to the
frozen M_o; β = 0.1, γ = α = 1, an NLL retain term. The "I don't know" answers are the project's own list
(`unlearnbench.tasks.text.data.records.IDK_ANSWERS`), not OpenUnlearning's `idk.jsonl`; each forget example
draws one uniformly at every step, from the unlearning seed (the reference draws from the global RNG), as the rest
of the global batch is drawn, whatever the number of ranks.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from unlearnbench.core.config import POSITIVE, Range
from unlearnbench.tasks.text.data.records import IDK_ANSWERS
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.methods.npo import nll_pair
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.encoding import collate


class IdkDPO(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"beta": POSITIVE}
    forget_unit = "rows"
    uses_reference = True

    def __init__(self, name: str, beta: float = 0.1, **options) -> None:
        super().__init__(name, **options)
        self.beta = beta

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        self.preferred = [[task.encoder.item(record["question"], answer) for answer in self.answers(record)]
                          for record in task.splits.forget]

    def answers(self, record: dict) -> list[str]:
        """The preferred answers to a forget question: "I don't know" ones."""
        return list(IDK_ANSWERS)

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        rows, draws = forget["row"].tolist(), forget["draw"].tolist()  # the loop's per-example draw (unlearning seed)
        idk = collate([self.preferred[row][draw % len(self.preferred[row])] for row, draw in zip(rows, draws,
                                                                                                   strict=True)],
                      task.encoder.pad_id)
        idk = {name: tensor.to(forget["input_ids"].device) for name, tensor in idk.items()}
        preferred, preferred_ref = nll_pair(model, reference, idk)
        rejected, rejected_ref = nll_pair(model, reference, forget)
        return losses.dpo(preferred, preferred_ref, rejected, rejected_ref, self.beta)
