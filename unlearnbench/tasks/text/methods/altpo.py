"""AltPO: alternate preference optimisation (Mekala et al., COLING 2025, arXiv 2409.13474).

As OpenUnlearning runs it (community/methods/AltPO: `generate.py`, `generate.yaml`, `run.sh`, the `DPO` handler):
DPO whose preferred answer to a forget question is an *alternate* answer that the model being unlearned writes
itself, the rejected one the true answer; L_forget = −(2/β)·mean log σ(β(r_w − r_l)) against the frozen M_o, β = 0.1,
γ = α = 1, an NLL retain term (configs/trainer/DPO.yaml; IdkDPO's loop with other preferred answers). The alternates:
`repeats` (5) sampled generations of M_o per forget question at `temperature` 1.0, up to `max_new_tokens`, each step
drawing one of a question's alternates uniformly from the unlearning seed, as IdkDPO draws its answer. How M_o is
asked, the `variant`:
- `openunlearning` (the default): generate.py's rewrite request (its INST_QAS_LLAMA3_TEMPLATE, the one generate.yaml
  names): the question, its true answer and the instruction to write another answer that changes every fact, under
  the system prompt "You are a helpful AI assistant", the reply begun with "Alternate Answer :"; each sample cut at
  the first of generate.yaml's stop strings ("Question:", "Q:", …) and stripped.
- `own_samples`: M_o sampled on the question's own prompt, its answers as it would give them (this project's default
  before): a model without instructions (the CPU default, trained from scratch on the data) cannot follow a rewrite
  request, and its own samples are its alternatives.

Where this differs from the reference:
- The request goes through the model's own prompt format (its chat template with `date_string`, or the tag strings);
  the reference writes Llama 3's special tokens into one string (without the template's date lines).
- The sampling is drawn from the unlearning seed (the reference's generate.py calls `set_seed(0)`), so the
  alternates are part of what the unlearning seed varies.
- `max_new_tokens` 32, the reference's 200 scaled as the model's generations (`model.max_new_tokens`); set 200 with
  a pretrained model.
- An epoch is one pass over the forget questions (the reference's data has one row per (question, alternate), so
  its 2 epochs visit each question 10 times): the default 10 epochs visit each as often.
- The alternates are kept in the model cache beside M_o, keyed by everything that determines them (M_o, the
  forget questions, the seed, the sampling settings, the variant), as the reference keeps its JSONL beside the model;
  a later job of the same seeds reads them, and its method time leaves out their generation (the time of M_o's
  training is left out of every method's alike).
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from unlearnbench.core.config import AT_LEAST_1, POSITIVE, Range
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.text.evaluate.generation import Sampling, sampled
from unlearnbench.tasks.text.methods.base import TextTask
from unlearnbench.tasks.text.methods.idk_dpo import IdkDPO
from unlearnbench.tasks.text.model.causal_lm import Encoder
from unlearnbench.tasks.text.model.encoding import chat_prompt, prompt_ids

VARIANTS = ("openunlearning", "own_samples")
# community/methods/AltPO/generate.py's INST_QAS_LLAMA3_TEMPLATE(_QUERY): its system prompt, its instruction after
# the question and answer, and the start of the reply; generate.yaml's `until` stop strings.
REWRITE_SYSTEM_PROMPT = "You are a helpful AI assistant"
REWRITE_INSTRUCTION = (
    "Now pretend you are making things up. Write another answer to the question that is of a different template "
    "than the given answer and changes all facts from what are introduced in the given answer (changed answers must "
    "be plausible while being inconsistent with given answer). Ensure that your alternate answer is a plausible "
    "response to the question and doesn't change any details mentioned in question and only introduces changes to "
    "all the facts introduced answer.")
REPLY_START = "Alternate Answer :"
STOP_STRINGS = ("Question:", "Question: ", "Q: ", "Q:")


def rewrite_request(question: str, answer: str) -> str:
    """The user's turn of the reference's rewrite prompt."""
    return f"Question: {question}\nAnswer: {answer}\n{REWRITE_INSTRUCTION}"


def rewrite_prompt(encoder: Encoder, question: str, answer: str) -> list[int]:
    """The ids M_o continues into an alternate answer: the rewrite request in the model's prompt format (chat
    template with the reference's system prompt, or the tag strings), then the reply's start."""
    request = rewrite_request(question, answer)
    if encoder.chat:
        ids = chat_prompt(encoder.tokenizer, request, REWRITE_SYSTEM_PROMPT, encoder.date_string)
    else:
        ids = prompt_ids(encoder.tokenizer, encoder.template, request)
    return [*ids, *encoder.tokenizer.encode(REPLY_START, add_special_tokens=False)]


def cut(sample: str) -> str:
    """A generated alternate cut at each stop string in turn and stripped, as generate.py cuts its decoded text."""
    for stop in STOP_STRINGS:
        sample = sample.split(stop)[0]
    return sample.strip()


class AltPO(IdkDPO):
    ranges: ClassVar[dict[str, Range]] = {"repeats": AT_LEAST_1, "temperature": POSITIVE,
                                          "max_new_tokens": AT_LEAST_1, "variant": Range(choices=VARIANTS)}

    def __init__(self, name: str, repeats: int = 5, temperature: float = 1.0, max_new_tokens: int = 32,
                 variant: str = "openunlearning", **options) -> None:
        super().__init__(name, **options)
        self.repeats, self.temperature, self.max_new_tokens = repeats, temperature, max_new_tokens
        self.variant = variant

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        parts = {"kept": "altpo_alternates", "seed": task.rng.seed, "repeats": self.repeats,
                 "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
                 "batch_size": self.batch_size, "questions": [record["question"] for record in task.splits.forget]}
        if self.variant == "openunlearning":  # (own_samples keeps the parts its alternates were kept under before)
            parts |= {"variant": self.variant, "answers": [record["answer"] for record in task.splits.forget],
                      "request": rewrite_request("{question}", "{answer}"), "system": REWRITE_SYSTEM_PROMPT}
        self.alternates = task.of_original("AltPO's alternates", parts,
                                           lambda: {"alternates": self.alternates_of(model, task)})["alternates"]
        self.preferred = [[task.encoder.item(record["question"], answer) for answer in answers]
                          for record, answers in zip(task.splits.forget, self.alternates, strict=True)]

    def prompts(self, task: TextTask) -> list[list[int]]:
        """What M_o continues, per forget question: the rewrite request, or the question's own prompt."""
        if self.variant == "own_samples":
            return [task.encoder.prompt(record["question"]) for record in task.splits.forget]
        return [rewrite_prompt(task.encoder, record["question"], record["answer"]) for record in task.splits.forget]

    def alternates_of(self, model: nn.Module, task: TextTask) -> list[list[str]]:
        """`repeats` samples of M_o per forget question, from a generator seeded from the unlearning seed."""
        sampling = Sampling(self.repeats, self.temperature, 1.0, streams("alternates", task.rng.seed).seed)
        model.eval()
        samples = sampled(task.fabric, model, task.encoder.tokenizer, self.prompts(task), self.batch_size,
                          self.max_new_tokens, sampling)
        return samples if self.variant == "own_samples" else [[cut(s) for s in drawn] for drawn in samples]
