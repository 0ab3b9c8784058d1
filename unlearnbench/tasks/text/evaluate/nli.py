"""The NLI judge of Leak@k (`evaluation.sampling.nli`): a local sequence-classification model that says whether a
sampled generation entails the forget answer.

As the Leak@k paper's code judges a sample (OptimAI-Lab/Leak-k, `TOFU/eval/whole_eval.py`,
`get_entailment_results_with_pipeline`): the generation is the premise and the answer the hypothesis (its forget
branch), the verdict is the model's most likely label, a sample leaks where that label is "entailment", and an empty
generation or answer never leaks. Its model is `sileod/deberta-v3-base-tasksource-nli`; any NLI classifier whose
`config.id2label` names an entailment label serves here, loaded from local files only (nothing is downloaded).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.errors import invalid
from unlearnbench.tasks.text.model.causal_lm import pretrained_problem

OPTION = "evaluation.sampling.nli"
OWNER = "the text task's Leak@k"
VALID = ("a folder holding a sequence-classification NLI model (its config, weights and tokenizer, as "
         "save_pretrained writes them; a hub id already in the local Hugging Face cache also serves) whose "
         "config.id2label names an 'entailment' label, or null (the ROUGE-L gate alone)")
ENTAILMENT = "entailment"


class NliJudge:
    """A loaded NLI model and its tokenizer on one device, with the index of its entailment label."""

    def __init__(self, tokenizer, model: torch.nn.Module, entailment: int) -> None:
        self.tokenizer, self.model, self.entailment = tokenizer, model, entailment

    def entails(self, premises: Sequence[str], hypotheses: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Per pair, whether the model's most likely label for (premise, hypothesis) is entailment; False where
        either text is empty. Pairs longer than the model takes are cut (the reference's pipeline would fail)."""
        assert len(premises) == len(hypotheses), f"{len(premises)} premises for {len(hypotheses)} hypotheses"
        verdicts = np.zeros(len(premises), dtype=bool)
        judged = [i for i, (p, h) in enumerate(zip(premises, hypotheses, strict=True)) if p.strip() and h.strip()]
        device = next(self.model.parameters()).device
        with torch.no_grad():
            for start in interrupt.checked(range(0, len(judged), batch_size)):
                rows = judged[start:start + batch_size]
                encoded = self.tokenizer([premises[i] for i in rows], [hypotheses[i] for i in rows], padding=True,
                                         truncation=True, return_tensors="pt").to(device)
                verdicts[rows] = (self.model(**encoded).logits.argmax(-1) == self.entailment).cpu().numpy()
        return verdicts


def entailment_index(id2label: dict, source: str) -> int:
    """The id of the label named "entailment" (any case); refused where the model has none."""
    found = [int(i) for i, name in id2label.items() if str(name).strip().lower() == ENTAILMENT]
    if not found:
        raise invalid(OPTION, OWNER, VALID, f"{source}, whose labels are {', '.join(map(str, id2label.values()))}")
    return found[0]


def checked(source: str) -> int:
    """Before any loading of weights: the folder's problem, or its config's entailment id (refused in one line)."""
    from transformers import AutoConfig

    problem = pretrained_problem(source)
    if problem:
        raise invalid(OPTION, OWNER, VALID, f"{source} ({problem})")
    config = loaded(AutoConfig, source)
    return entailment_index(getattr(config, "id2label", None) or {}, source)


def loaded(loader, source: str):
    """`loader.from_pretrained(source)` from local files only, refused in one line where it does not load."""
    try:
        return loader.from_pretrained(source, local_files_only=True)
    except Exception as error:  # a user's files fail in many ways (OSError, ValueError, safetensors' own error, …)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise invalid(OPTION, OWNER, VALID, f"{source}, which does not load ({reason})") from None


@functools.cache
def judge(source: str, device: str = "cpu") -> NliJudge:
    """The judge of `source` on `device` (float32, eval mode), loaded once per process."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    entailment = checked(source)
    tokenizer = loaded(AutoTokenizer, source)
    model = loaded(AutoModelForSequenceClassification, source)
    return NliJudge(tokenizer, model.float().to(device).eval(), entailment)
