"""The causal language model of the text task and what an evaluation reads from it, per example.

`tiny_llama` is the CPU default: a small randomly initialised Llama whose every weight is drawn from a generator
seeded by the caller (the training seed for M_o, the unlearning seed for M_r), never from the global RNG.
`answer_scores` runs a right-padded batch once and returns, per example, what every metric of `metrics` needs:
the mean NLL of the answer tokens, their log-probabilities, the mean and variance of log p under the model's own
next-token distribution (Min-K%++) and the argmax predictions (exact memorisation, extraction strength).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from lightning_fabric import Fabric
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_1, Range, option_range_problems
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.seeding import global_seed
from unlearnbench.runtime.state import full_state_dict
from unlearnbench.tasks.text.model.encoding import (
    IGNORE,
    Template,
    chat_prompt,
    encode,
    encode_chat,
    prompt_ids,
    train_tokenizer,
)
from unlearnbench.tasks.text.model.losses import shifted


def tiny_llama_config(vocab_size: int, layers: int, hidden: int, heads: int, max_positions: int,
                      pad_token_id: int, bos_token_id: int, eos_token_id: int):
    """The `LlamaConfig` of `tiny_llama`."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=max_positions, pad_token_id=pad_token_id,
                       bos_token_id=bos_token_id, eos_token_id=eos_token_id, tie_word_embeddings=False,
                       attn_implementation="eager")


def tiny_llama(vocab_size: int, seed: int, layers: int = 2, hidden: int = 64, heads: int = 4,
               max_positions: int = 128, pad_token_id: int = 0, bos_token_id: int = 2, eos_token_id: int = 3):
    """A randomly initialised `LlamaForCausalLM`, its weights N(0, 0.02²) (the config's initializer_range, as
    Hugging Face initialises Llama) drawn from `torch.Generator().manual_seed(seed)`; norms at 1."""
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(vocab_size, layers, hidden, heads, max_positions, pad_token_id, bos_token_id,
                               eos_token_id)
    with torch.random.fork_rng(devices=[]):  # Hugging Face's own initialisation draws from the global RNG
        model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                module.weight.normal_(0.0, config.initializer_range, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif hasattr(module, "weight") and module.weight is not None and module.weight.dim() == 1:
                module.weight.fill_(1.0)
    return model


@dataclass
class AnswerScores:
    """Per example of a batch: `loss` (n,), the mean NLL over its labelled tokens; `tokens` (n,), their count; and
    per labelled position (a list of n tensors): `logprobs`, `mean` and `variance` of log p under the model's
    distribution there, `predictions` (argmax) and `labels`."""

    loss: Tensor
    tokens: Tensor
    logprobs: list[Tensor]
    mean: list[Tensor]
    variance: list[Tensor]
    predictions: list[Tensor]
    labels: list[Tensor]


@torch.no_grad()
def answer_scores(model, batch: dict[str, Tensor]) -> AnswerScores:
    """One forward pass over a right-padded batch (`encoding.collate`); position t predicts label t + 1."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits, labels, labelled = shifted(logits, batch["labels"])
    logp = torch.log_softmax(logits, dim=-1)
    token_logp = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    mean = (p * logp).sum(-1)
    variance = (p * logp.square()).sum(-1) - mean.square()
    predictions = logits.argmax(-1)
    tokens = labelled.sum(1)
    loss = -(token_logp * labelled).sum(1) / tokens.clamp(min=1)
    rows = range(labels.shape[0])
    return AnswerScores(loss=loss, tokens=tokens,
                        logprobs=[token_logp[i][labelled[i]] for i in rows],
                        mean=[mean[i][labelled[i]] for i in rows],
                        variance=[variance[i][labelled[i]] for i in rows],
                        predictions=[predictions[i][labelled[i]] for i in rows],
                        labels=[labels[i][labelled[i]] for i in rows])


class CausalLM:
    """`model=causal_lm`: a Hugging Face causal language model with its tokenizer, and how a record becomes ids.

    With `pretrained` null (the CPU default) the model is `tiny_llama` of `layers` × `hidden`, initialised from the
    seed of the model it becomes, and the tokenizer is learnt from the data's own text (`encoding.train_tokenizer`).
    With `pretrained` a folder, or a hub id already in the local Hugging Face cache, both are read from there,
    never downloaded. Prompts use the tokenizer's chat template (`chat_template: true`, OpenUnlearning's chat
    branch, with `system_prompt` and the fixed `date_string` the reference passes) or the tag strings (its tag
    branch)."""

    ranges: ClassVar[dict[str, Range]] = {option: AT_LEAST_1 for option in (
        "layers", "hidden", "heads", "max_length", "max_new_tokens")}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """One `UserError` naming every option outside its range (`components.build` calls this before the
        constructor): a generation of no token, say, would only fail after M_o and M_r are trained."""
        problems = option_range_problems("model", cls.ranges, options)
        if problems:
            raise UserError(f"model {options.get('name', 'causal_lm')}: {'; '.join(problems)}")

    def __init__(self, name: str = "causal_lm", pretrained: str | None = None, layers: int = 2, hidden: int = 64,
                 heads: int = 4, max_length: int = 128, chat_template: bool = False, system_prompt: str | None = None,
                 user_start: str = "Question: ", user_end: str = "\n", assistant_start: str = "Answer: ",
                 max_new_tokens: int = 32, lora: Mapping[str, Any] | None = None,
                 date_string: str | None = "10 Apr 2025") -> None:
        self.name, self.pretrained = name, pretrained
        self.layers, self.hidden, self.heads, self.max_length = layers, hidden, heads, max_length
        self.chat_template, self.system_prompt, self.date_string = chat_template, system_prompt, date_string
        self.template = Template(user_start, user_end, assistant_start)
        self.max_new_tokens = max_new_tokens
        self.lora = lora_settings(name, lora)

    def tokenizer(self, texts: list[str]):
        """The tokenizer: the pretrained one, or one learnt from `texts` and the tag strings. The settings that need
        it are checked here, before any model is trained: the chat template, LoRA's target modules."""
        if self.pretrained is None:
            tokenizer = train_tokenizer(texts, self.template.tags())
        else:
            from transformers import AutoTokenizer

            tokenizer = local_pretrained(AutoTokenizer, self.pretrained)
            if tokenizer.pad_token_id is None:  # as OpenUnlearning's get_tokenizer: pad := eos
                tokenizer.pad_token = tokenizer.eos_token
        if self.chat_template and not getattr(tokenizer, "chat_template", None):
            which = "the built-in tokenizer (model.pretrained null)" if self.pretrained is None else \
                f"the tokenizer of {self.pretrained}"
            raise UserError(f"model {self.name}: model.chat_template is true but {which} has no chat template; set "
                            f"model.chat_template=false to use the tag strings")
        if self.adapted:
            check_targets(self.name, self.skeleton(tokenizer), self.lora["target_modules"])
        return tokenizer

    def skeleton(self, tokenizer) -> nn.Module:
        """The model's modules without its weights (on the meta device): what LoRA's targets are checked against
        before anything is loaded or trained."""
        from transformers import AutoConfig, AutoModelForCausalLM

        config = local_pretrained(AutoConfig, self.pretrained) if self.pretrained is not None else tiny_llama_config(
            len(tokenizer), self.layers, self.hidden, self.heads, self.max_length, tokenizer.pad_token_id,
            tokenizer.bos_token_id, tokenizer.eos_token_id)
        with torch.random.fork_rng(devices=[]), torch.device("meta"):  # the global RNG as it was, whatever it draws
            return AutoModelForCausalLM.from_config(config)

    def new(self, tokenizer, seed: int) -> nn.Module:
        """A fresh model: the pretrained weights, or a tiny Llama initialised from `seed`."""
        if self.pretrained is not None:
            from transformers import AutoModelForCausalLM

            with global_seed(seed):  # weights the checkpoint lacks are initialised from the global RNG
                return local_pretrained(AutoModelForCausalLM, self.pretrained, torch_dtype=torch.float32)
        return tiny_llama(len(tokenizer), seed, self.layers, self.hidden, self.heads, self.max_length,
                          tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)

    @property
    def adapted(self) -> bool:
        """Whether fine-tuning and unlearning train LoRA adapters (`model.lora.enabled`) rather than every weight."""
        return bool(self.lora["enabled"])

    def adapt(self, model: nn.Module, seed: int) -> nn.Module:
        """Fresh LoRA adapters on `model`, whose own weights are then frozen; their A matrices drawn from the global
        RNG seeded with `seed` (peft's initialisation), B = 0. `model` itself where LoRA is off."""
        if not self.adapted:
            return model
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=self.lora["r"], lora_alpha=self.lora["alpha"], lora_dropout=self.lora["dropout"],
                            target_modules=list(self.lora["target_modules"]), task_type="CAUSAL_LM")
        with global_seed(seed):
            return get_peft_model(model, config)

    def trained_state(self, fabric: Fabric, model: nn.Module) -> dict[str, Tensor]:
        """What the cache stores of a fine-tuned model, gathered whole on every rank when a strategy shards it: its
        adapters with LoRA (the base is named by its identity and rebuilt), every weight without."""
        state = full_state_dict(fabric, model)
        if self.adapted:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(getattr(model, "module", model), state_dict=state)
        return state

    def restore(self, tokenizer, state: dict[str, Tensor], base_seed: int) -> nn.Module:
        """A fine-tuned model from `trained_state`'s tensors: the base (`new` with `base_seed`), then the adapters
        or every weight."""
        model = self.new(tokenizer, base_seed)
        if not self.adapted:
            model.load_state_dict(state)
            return model
        from peft import set_peft_model_state_dict

        model = self.adapt(model, 0)
        result = set_peft_model_state_dict(model, state)
        missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
        if missing or getattr(result, "unexpected_keys", []):
            raise UserError(f"the cached adapters do not fit the model (missing {missing[:3]}, unexpected "
                            f"{list(result.unexpected_keys)[:3]}), as from another peft version; empty paths.cache_dir")
        return model

    def merged(self, model: nn.Module) -> nn.Module:
        """The model with its adapters merged into its weights (a plain model again); `model` without LoRA."""
        return model.merge_and_unload() if self.adapted else model

    def identity(self, tokenizer) -> dict:
        """What names the base model and its tokenizer in the cache's keys."""
        vocab = json.dumps(sorted(tokenizer.get_vocab().items()))
        base = {"pretrained": self.pretrained} if self.pretrained is not None else {
            "layers": self.layers, "hidden": self.hidden, "heads": self.heads}
        return {**base, "max_length": self.max_length, "tokenizer": hashlib.sha256(vocab.encode()).hexdigest(),
                "chat_template": self.chat_template, "system_prompt": self.system_prompt,
                "date_string": self.date_string if self.chat_template else None,
                "template": self.template.tags(), **({"lora": self.lora} if self.adapted else {})}

    def encoder(self, tokenizer) -> Encoder:
        return Encoder(tokenizer, self.template, self.max_length,
                       self.system_prompt if self.chat_template else None, self.chat_template, self.date_string)


# LoRA's defaults: rank 8 and alpha 16 as OpenUnlearning's UNDIAL notes (community/methods/UNDIAL/README.md; the
# reference has no LoRA of its own), on the attention's query and value projections (peft's default for Llama).
LORA = {"enabled": False, "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def lora_settings(name: str, lora: Mapping[str, Any] | None) -> dict:
    """`model.lora` with its defaults, checked: one line naming every option out of range or unknown."""
    settings = {**LORA, **dict(lora or {})}
    problems = [f"unknown option model.lora.{key}; valid: {', '.join(LORA)}" for key in settings if key not in LORA]
    if not isinstance(settings["r"], int) or settings["r"] < 1:
        problems.append(f"model.lora.r={settings['r']} is not valid; valid: an integer >= 1")
    if not isinstance(settings["alpha"], int | float) or settings["alpha"] <= 0:
        problems.append(f"model.lora.alpha={settings['alpha']} is not valid; valid: > 0")
    if not isinstance(settings["dropout"], int | float) or not 0 <= settings["dropout"] < 1:
        problems.append(f"model.lora.dropout={settings['dropout']} is not valid; valid: in [0, 1)")
    if not settings["target_modules"] or isinstance(settings["target_modules"], str):
        problems.append(f"model.lora.target_modules={settings['target_modules']!r} is not valid; valid: a list of the "
                        f"names of the modules to adapt, e.g. [q_proj, v_proj]")
    if problems:
        raise UserError(f"model {name}: {'; '.join(problems)}")
    settings["target_modules"] = list(settings["target_modules"])
    return settings


def adaptable(model: nn.Module) -> list[str]:
    """The dotted names of the modules of `model` that LoRA can adapt (peft's LoRA layer types)."""
    from transformers.pytorch_utils import Conv1D

    kinds = (nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.MultiheadAttention, Conv1D)
    return [name for name, module in model.named_modules() if name and isinstance(module, kinds)]


def check_targets(name: str, model: nn.Module, targets: list[str]) -> None:
    """A `UserError` naming each of LoRA's `targets` that matches no adaptable module of `model` (peft's rule: the
    module's dotted name is the target or ends with '.' and it), and the names that would match."""
    names = adaptable(model)
    unmatched = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if unmatched:
        valid = dict.fromkeys(n.rsplit(".", 1)[-1] for n in names)
        raise UserError(f"model {name}: model.lora.target_modules has {', '.join(map(str, unmatched))}, which names "
                        f"no module of the model that LoRA can adapt; valid: {', '.join(valid)}")


# A folder holds a model where it has these: the config, weights in one of the layouts `from_pretrained` reads
# (whole or sharded, safetensors or PyTorch's), and a tokenizer (its config, or the vocabulary of a fast, BPE,
# WordPiece or SentencePiece one).
MODEL_PARTS = {
    "config.json": ("config.json",),
    "the weights (model.safetensors, pytorch_model.bin or their shards)": (
        "*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json"),
    "the tokenizer (tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json, …)": (
        "tokenizer.json", "tokenizer_config.json", "*.model", "*.tiktoken", "vocab.*"),
}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # huggingface_hub's repo ids: name or owner/name


def pretrained_problem(source: str) -> str | None:
    """What is wrong with `model.pretrained` before transformers reads it: a path to no folder, or a folder without
    a model's parts; None for a complete folder or a hub id (the local cache answers for that)."""
    folder = Path(source)
    if folder.is_dir():
        lacks = [part for part, patterns in MODEL_PARTS.items()
                 if not any(any(folder.glob(pattern)) for pattern in patterns)]
        listed = ", ".join(lacks[:-1]) + " and " + lacks[-1] if len(lacks) > 1 else "".join(lacks)
        return f"the folder holds no model, it lacks {listed}" if lacks else None
    if folder.exists():
        return "a file, not a folder"
    return None if HUB_ID.fullmatch(source) else "no such folder"


def local_pretrained(loader, source: str, **options):
    """`loader.from_pretrained(source)` from local files only: a folder, or a hub id in the local HF cache."""
    problem = pretrained_problem(source)
    if problem:
        raise UserError(f"cannot load model.pretrained={source}: {problem}; give model.pretrained as a folder holding "
                        f"the model's config, weights and tokenizer (as save_pretrained writes them), or a hub id "
                        f"(owner/name) already in the local Hugging Face cache (nothing is downloaded)")
    try:
        return loader.from_pretrained(source, local_files_only=True, **options)
    except OSError as error:
        raise UserError(f"cannot load {source} from local files ({str(error).splitlines()[0]}): give model.pretrained "
                        f"as a folder holding the model's config, weights and tokenizer, or a hub id already in the "
                        f"local Hugging Face cache (nothing is downloaded)") from None


@dataclass
class Encoder:
    """Records to ids: training and likelihood items (answer-only labels), and generation prompts."""

    tokenizer: object
    template: Template
    max_length: int
    system_prompt: str | None = None
    chat: bool = False
    date_string: str | None = None

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def item(self, question: str, answer: str) -> dict[str, list[int]]:
        if not self.chat:
            return encode(self.tokenizer, self.template, question, answer, self.max_length)
        return encode_chat(self.tokenizer, question, answer, self.system_prompt, self.max_length, self.date_string)

    def prompt(self, question: str) -> list[int]:
        """The ids a generation starts from: the prompt part of every item of `question`."""
        if self.chat:
            return chat_prompt(self.tokenizer, question, self.system_prompt, self.date_string)
        return prompt_ids(self.tokenizer, self.template, question)

    def answer_text(self, item: dict[str, list[int]]) -> str:
        """The answer as the tokenizer reads it back (the ROUGE reference, as OpenUnlearning decodes its labels)."""
        return self.tokenizer.decode([t for t in item["labels"] if t != IGNORE], skip_special_tokens=True).strip()
