"""AltPO: alternate preference optimisation (Mekala et al., COLING 2025, arXiv 2409.13474).

As OpenUnlearning runs it (community/methods/AltPO: `generate.py`, `run.sh`, the `DPO` handler): DPO whose preferred
answer to a forget question is an *alternate* answer that the model being unlearned writes itself, the rejected one
the true answer; L_forget = −(2/β)·mean log σ(β(r_w − r_l)) against the frozen M_o, β = 0.1, γ = α = 1, an NLL
retain term (IdkDPO's loop with other preferred answers). The alternates: `repeats` (5) sampled generations of M_o
per forget question at `temperature` 1.0, up to `max_new_tokens`, each step drawing one of a question's alternates
uniformly from the unlearning seed, as IdkDPO draws its answer.

Where this differs from the reference:
- The sampling is drawn from the unlearning seed (the reference's generate.py calls `set_seed(0)`), so the
  alternates are part of what the unlearning seed varies.
- M_o is sampled on the question's own prompt. The reference prompts an instruction-tuned Llama to rewrite the
  answer with every fact changed ("Alternate Answer :"); a model without instructions (the CPU default) cannot
  follow that, and its own samples are its alternatives.
- An epoch is one pass over the forget questions (the reference's data has one row per (question, alternate), so
  its 2 epochs visit each question 10 times): the default 10 epochs visit each as often.
- The alternates are kept in the model cache beside M_o, keyed by everything that determines them (M_o, the
  forget questions, the seed, the sampling settings), as the reference keeps its JSONL beside the model; a later
  job of the same seeds reads them, and its method time leaves out their generation (the time of M_o's training is
  left out of every method's alike).
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from unlearnbench.core.config import AT_LEAST_1, POSITIVE, Range
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.text.evaluate import Sampling, sampled
from unlearnbench.tasks.text.methods.base import TextTask
from unlearnbench.tasks.text.methods.idk_dpo import IdkDPO


class AltPO(IdkDPO):
    ranges: ClassVar[dict[str, Range]] = {"repeats": AT_LEAST_1, "temperature": POSITIVE,
                                          "max_new_tokens": AT_LEAST_1}

    def __init__(self, name: str, repeats: int = 5, temperature: float = 1.0, max_new_tokens: int = 32,
                 **options) -> None:
        super().__init__(name, **options)
        self.repeats, self.temperature, self.max_new_tokens = repeats, temperature, max_new_tokens

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        parts = {"kept": "altpo_alternates", "seed": task.rng.seed, "repeats": self.repeats,
                 "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
                 "batch_size": self.batch_size, "questions": [record["question"] for record in task.splits.forget]}
        self.alternates = task.of_original("AltPO's alternates", parts,
                                           lambda: {"alternates": self.alternates_of(model, task)})["alternates"]
        self.preferred = [[task.encoder.item(record["question"], answer) for answer in answers]
                          for record, answers in zip(task.splits.forget, self.alternates, strict=True)]

    def alternates_of(self, model: nn.Module, task: TextTask) -> list[list[str]]:
        """`repeats` samples of M_o per forget question, from a generator seeded from the unlearning seed."""
        prompts = [task.encoder.prompt(record["question"]) for record in task.splits.forget]
        sampling = Sampling(self.repeats, self.temperature, 1.0, streams("alternates", task.rng.seed).seed)
        model.eval()
        return sampled(task.fabric, model, task.encoder.tokenizer, prompts, self.batch_size, self.max_new_tokens,
                       sampling)
