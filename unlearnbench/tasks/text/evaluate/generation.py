"""Generation as the text task's benchmarks run it: greedy continuations of left-padded prompts cut at the model's end
ids, and sampled ones for Leak@k (`Sampling`), scored by ROUGE-L recall and, where set, an NLI judge."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from lightning_fabric import Fabric
from lightning_fabric.wrappers import is_wrapped
from torch import nn

from unlearnbench.runtime import interrupt
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.text.evaluate import metrics
from unlearnbench.tasks.text.evaluate.nli import NliJudge
from unlearnbench.tasks.text.evaluate.nli import judge as nli_judge
from unlearnbench.tasks.text.model.encoding import collate


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding for Leak@k (`evaluation.sampling`): `draws` generations per prompt (`n`, or `k` where `n` is
    None) at `temperature` with nucleus `top_p` (no top-k cut), the draws from the global RNG seeded with `seed`
    (derived from the evaluation seed) for every model alike; a sample leaks where its ROUGE-L recall reaches
    `threshold` and, with `nli` (a local NLI model), where that model finds the answer entailed."""

    k: int
    temperature: float
    top_p: float
    seed: int
    n: int | None = None
    threshold: float = 0.1
    nli: str | None = None

    @property
    def draws(self) -> int:
        return self.k if self.n is None else self.n

    @classmethod
    def of(cls, options: dict, eval_seed: int) -> Sampling | None:
        """The job's sampling, or None where `evaluation.sampling.k` is 0."""
        if not options["k"]:
            return None
        return cls(options["k"], options["temperature"], options["top_p"], streams("sampling", eval_seed).seed,
                   options["n"], options["threshold"], options["nli"])

    def judge(self, fabric: Fabric) -> NliJudge | None:
        """The NLI judge on the job's device, loaded once per process; None where `nli` is not set."""
        return None if self.nli is None else nli_judge(self.nli, str(fabric.device))


def sampled_scores(samples: list[list[str]], references: list[str], sampling: Sampling,
                   judge: NliJudge | None, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, Leak@k (the binary leaks of its n samples: the ROUGE-L gate, then the judge's entailment of the
    answer by the sample where a judge is set) and the expected largest ROUGE-L recall among k samples."""
    recalls = metrics.sample_recalls(samples, references)
    leaks = metrics.leaked(recalls, sampling.threshold)
    if judge is not None:  # only the samples through the gate are judged, as the reference
        gated = np.argwhere(leaks)
        leaks[tuple(gated.T)] = judge.entails([samples[p][j] for p, j in gated], [references[p] for p, _ in gated],
                                              batch_size)
    return metrics.leak_at_k(leaks, sampling.k), metrics.max_rouge_at_k(recalls, sampling.k)


def generate(fabric: Fabric, model: nn.Module, tokenizer, prompts: list[list[int]], batch_size: int,
             max_new_tokens: int, sampling: Sampling | None = None) -> list[str]:
    """Continuations of left-padded prompts, cut at the first end id (`end_ids`): greedy (OpenUnlearning's
    generation defaults, with `max_new_tokens` from the model config or the benchmark), or `sampling.draws` sampled
    ones per prompt, a prompt's samples consecutive.

    `generate` runs inside the strategy's wrapper (Fabric's `mark_forward_method`), where FSDP gathers the
    parameters it shards; with several ranks every rank takes a step until all are done (`synced_gpus`), as
    sharded weights are gathered by all of them at each step."""
    from transformers import StoppingCriteriaList

    if is_wrapped(model):
        model.mark_forward_method("generate")
    ends = end_ids(model, tokenizer)
    decoding = {"do_sample": False} if sampling is None else {
        "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0,
        "num_return_sequences": sampling.draws}
    texts = []
    with drawn_from(fabric, None if sampling is None else sampling.seed):
        for start in interrupt.checked(range(0, len(prompts), batch_size)):
            chunk = [{"input_ids": p, "labels": p} for p in prompts[start:start + batch_size]]
            batch = {k: v.to(fabric.device) for k, v in collate(chunk, tokenizer.pad_token_id, left=True).items()}
            with fabric.autocast():
                out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                     max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     eos_token_id=ends, synced_gpus=fabric.world_size > 1,
                                     stopping_criteria=StoppingCriteriaList([StopOnInterrupt()]), **decoding)
            for row in out[:, batch["input_ids"].shape[1]:].tolist():
                cut = next((i for i, token in enumerate(row) if token in ends), len(row))
                texts.append(tokenizer.decode(row[:cut], skip_special_tokens=True).strip())
    return texts


def end_ids(model: nn.Module, tokenizer) -> list[int]:
    """Every id that ends a generation: the model's `generation_config.eos_token_id` (one id or several: Llama 3.x
    Instruct lists 128001, 128008, 128009) and the tokenizer's eos, as OpenUnlearning generates with the model's
    generation config."""
    inner = model
    while getattr(inner, "generation_config", None) is None and hasattr(inner, "module"):
        inner = inner.module  # Fabric's wrapper, then the strategy's (DDP, FSDP)
    declared = getattr(getattr(inner, "generation_config", None), "eos_token_id", None)
    declared = [] if declared is None else [declared] if isinstance(declared, int) else list(declared)
    return list(dict.fromkeys([*declared, *([] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id])]))


def sampled(fabric: Fabric, model: nn.Module, tokenizer, prompts: list[list[int]], batch_size: int,
            max_new_tokens: int, sampling: Sampling) -> list[list[str]]:
    """`sampling.draws` sampled continuations of each prompt."""
    texts, n = generate(fabric, model, tokenizer, prompts, batch_size, max_new_tokens, sampling), sampling.draws
    return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]


@contextmanager
def drawn_from(fabric: Fabric, seed: int | None) -> Iterator[None]:
    """The block's draws from the global RNGs (the CPU's and the job's accelerator's) seeded with `seed`, restored
    afterwards; nothing changes where `seed` is None."""
    if seed is None:
        yield
        return
    devices = [fabric.device] if fabric.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class StopOnInterrupt:
    """A stopping criterion of `generate` that is a safe point at every generated token (runtime/interrupt.py): a
    long generation (a large model, many new tokens) stops within one token of Ctrl-C. It never ends a sequence."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        interrupt.check()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
