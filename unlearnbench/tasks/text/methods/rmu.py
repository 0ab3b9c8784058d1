"""RMU, representation misdirection for unlearning (Li et al. 2024, "The WMDP benchmark").

As OpenUnlearning's `RMU` (src/trainer/unlearn/rmu.py, configs/trainer/RMU.yaml): the output h of one decoder layer
is steered, on the forget answers' tokens, towards c·u/‖u‖ for a random direction u (uniform on [0, 1)^d, drawn
once per run), and kept, on the retain answers' tokens, at the frozen M_o's h (`EMBED_DIFF`): L = γ·A(h_θ(forget),
c·u/‖u‖) + α·A(h_θ(retain), h_ref(retain)), A the mean over answer tokens of mean_d (h − target)²; c = 2, γ = α = 1,
every parameter trained (`trainable: all`; `trainable: wmdp` trains the MLP down-projections of the steered layer and
the two before it, as WMDP's own code and OpenUnlearning's WMDP experiment). The layer: `layer`; null takes the
references' layer 7 (OpenUnlearning's configs/trainer/RMU.yaml and experiment/unlearn/wmdp/default.yaml, module_regex
`model\\.layers\\.7`: the 8th of Llama-3.2-1B's 16; WMDP's rmu/unlearn.py `--layer_id 7` of zephyr-7b-beta's 32)
wherever the model has more than 7 decoder layers, and the middle one, (L − 1) // 2, of a model with 7 or fewer
(the CPU default's 2: layer 0). u comes from the unlearning seed (the reference draws it from the global RNG at the
first step).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from unlearnbench.core.config import AT_LEAST_0, POSITIVE, Range
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.methods.base import ForgetRetainMethod, TextTask
from unlearnbench.tasks.text.model import losses
from unlearnbench.tasks.text.model.train import forward


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    bare = getattr(model, "module", model)
    return bare.get_decoder().layers


class Activations:
    """The output of one decoder layer at the last forward pass (a forward hook)."""

    def __init__(self, layer: nn.Module) -> None:
        self.value: Tensor | None = None
        self.handle = layer.register_forward_hook(self.keep)

    def keep(self, module: nn.Module, inputs, output) -> None:
        self.value = output[0] if isinstance(output, tuple) else output

    def of(self, model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        forward(model, batch)
        return self.value


TRAINABLE = ("all", "wmdp")
REFERENCE_LAYER = 7  # OpenUnlearning's RMU.yaml and WMDP experiment (`model\.layers\.7`), WMDP's `--layer_id 7`


def steered_layer(layer: int | None, count: int) -> int:
    """The decoder layer RMU steers in a model of `count` layers: `layer` where given; else the references' 7 where
    the model has more than 7 layers, and the middle one, (count − 1) // 2, of a smaller model (where 7 would be
    its last layer or beyond it)."""
    if layer is not None:
        return layer
    return REFERENCE_LAYER if count > REFERENCE_LAYER else (count - 1) // 2


class RMU(ForgetRetainMethod):
    ranges: ClassVar[dict[str, Range]] = {"steering_coeff": POSITIVE, "layer": AT_LEAST_0,
                                          "trainable": Range(choices=TRAINABLE)}
    forget_unit = "rows"

    def __init__(self, name: str, steering_coeff: float = 2.0, layer: int | None = None, trainable: str = "all",
                 **options) -> None:
        super().__init__(name, **options)
        self.steering_coeff, self.layer, self.trainable = steering_coeff, layer, trainable

    def needs_reference(self) -> bool:
        return self.alpha > 0

    @property
    def retain_unit(self) -> str:
        return "rows"

    def index(self, layers: nn.ModuleList) -> int:
        index = steered_layer(self.layer, len(layers))
        if index >= len(layers):
            raise UserError(f"method {self.name}: layer={index} is not valid; valid: 0 to {len(layers) - 1} (the "
                            f"model has {len(layers)} decoder layers)")
        return index

    def parameters(self, model: nn.Module):
        """The parameters trained: with `trainable: all`, every parameter the loss reaches (the embeddings and the
        layers up to the steered one; the reference hands the optimizer every parameter, but those above the layer
        get no gradient and AdamW leaves them as they are); with `trainable: wmdp`, WMDP's choice
        (centerforaisafety/wmdp `rmu/unlearn.py`, `--layer_ids 5,6,7` below `--layer_id 7`): the MLP
        down-projections of the steered layer and the two before it. The rest is frozen, so that data-parallel
        training does not wait for their gradients."""
        layers = decoder_layers(model)
        index = self.index(layers)
        if self.trainable == "wmdp":
            reached = {id(p) for layer in layers[max(0, index - 2):index + 1] for p in layer.mlp.down_proj.parameters()}
        else:
            reached = {id(p) for p in model.get_input_embeddings().parameters()}
            reached |= {id(p) for layer in layers[:index + 1] for p in layer.parameters()}
        for parameter in model.parameters():
            if id(parameter) not in reached:
                parameter.requires_grad_(False)
        return None

    def prepare(self, model: nn.Module, reference: nn.Module | None, task: TextTask) -> None:
        layers = decoder_layers(model)
        index = self.index(layers)
        self.hidden = Activations(layers[index])
        self.reference_hidden = Activations(decoder_layers(reference)[index]) if reference is not None else None
        width = layers[index].self_attn.q_proj.in_features
        direction = torch.rand(1, 1, width, generator=task.rng.torch)
        self.target = (self.steering_coeff * direction / direction.norm()).to(task.fabric.device)

    def forget_loss(self, model: nn.Module, reference: nn.Module | None, forget: dict[str, Tensor],
                    task: TextTask) -> Tensor:
        hidden = self.hidden.of(model, forget)
        return losses.activation_distance(hidden, self.target.expand_as(hidden), forget["labels"])

    def retain_term(self, model: nn.Module, reference: nn.Module | None, retain: dict[str, Tensor]) -> Tensor:
        hidden = self.hidden.of(model, retain)
        with torch.no_grad():
            reference_hidden = self.reference_hidden.of(reference, retain)
        return losses.activation_distance(hidden, reference_hidden, retain["labels"])

    def unlearn(self, model: nn.Module, task: TextTask) -> nn.Module:
        try:
            return super().unlearn(model, task)
        finally:
            for hook in (getattr(self, "hidden", None), getattr(self, "reference_hidden", None)):
                if hook is not None:
                    hook.handle.remove()
