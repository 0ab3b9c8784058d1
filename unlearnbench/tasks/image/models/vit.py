"""ViT for image classification (Dosovitskiy et al., ICLR 2021), as the SUPREME framework fine-tunes it: the
`google/vit-base-patch16-224` backbone with a new classification head, fed 224 × 224 images.

`transformers.ViTForImageClassification` holds the backbone and a linear head on the [CLS] token, the same
architecture as the SUPREME code's `ViTModel` + `nn.Linear` (its `models/ViT.py`); `from_pretrained(...,
ignore_mismatched_sizes=True)` re-initialises only the head for the dataset's classes (from torch's global RNG,
which the job seeds per model). Weights come from `pretrained`: a local directory (offline clusters) or a Hugging
Face hub id found in the local hub cache (`local_files_only`: nothing is downloaded at run time); otherwise the
error names the option. `pretrained=null` builds a randomly initialised ViT from `config` (a `ViTConfig`'s fields:
tests and CPU runs).

Images reach the model at the size they are stored (`dataset.image_size` follows `model.input_size` for the folder
datasets, so Pins and Caltech-101 are decoded at 224 once); any other size is resized on the device, in batches, to
`resize` and centre-cropped to `input_size` (the SUPREME code's test transform: Resize(256), CenterCrop(224)).
"""

from __future__ import annotations

import os

from torch import Tensor, nn
from torch.nn import functional

from unlearnbench.runtime.errors import UserError

HUB_ID = "google/vit-base-patch16-224"


class ViTClassifier(nn.Module):
    """Logits of a `ViTForImageClassification` for N × C × H × W normalised images of any size."""

    def __init__(self, network: nn.Module, input_size: int, resize: int) -> None:
        super().__init__()
        self.network, self.input_size, self.resize = network, input_size, resize

    def forward(self, images: Tensor) -> Tensor:
        if images.shape[-1] != self.input_size or images.shape[-2] != self.input_size:
            images = functional.interpolate(images, size=(self.resize, self.resize), mode="bilinear",
                                            antialias=True, align_corners=False)
            top = (self.resize - self.input_size) // 2
            images = images[..., top:top + self.input_size, top:top + self.input_size]
        return self.network(pixel_values=images).logits


def vit(num_classes: int, in_channels: int, image_size: int, name: str = "vit", pretrained: str | None = HUB_ID,
        config: dict | None = None, input_size: int = 224, resize: int = 256) -> ViTClassifier:
    """The classifier for `num_classes` classes; `image_size` (the stored images' size) needs no setting: images of
    another size than `input_size` are resized on the device."""
    from transformers import ViTConfig, ViTForImageClassification

    if resize < input_size:
        raise UserError(f"model vit: resize {resize} is smaller than input_size {input_size}; valid: resize ≥ "
                        "input_size")
    if pretrained is None:
        settings = {"image_size": input_size, "num_channels": in_channels, **(config or {}),
                    "num_labels": num_classes}
        return ViTClassifier(ViTForImageClassification(ViTConfig(**settings)), input_size, resize)
    if in_channels != 3:
        raise UserError(f"model vit: the pretrained ViT takes RGB images, this dataset has {in_channels} channel(s); "
                        "use an RGB dataset, or model.pretrained=null with a model.config")
    try:
        network = ViTForImageClassification.from_pretrained(pretrained, num_labels=num_classes,
                                                            ignore_mismatched_sizes=True, local_files_only=True)
    except OSError as error:
        where = "that directory holds no ViT weights" if os.path.isdir(pretrained) else (
            "it is neither a local directory nor in the local Hugging Face cache (nothing is downloaded at run time)")
        raise UserError(f"model vit: cannot load pretrained weights from {pretrained!r}: {where}. Download "
                        f"{HUB_ID} once (e.g. `huggingface-cli download {HUB_ID} --local-dir DIR`) and pass "
                        "model.pretrained=DIR, or model.pretrained=null for a randomly initialised ViT") from error
    network.config.image_size = input_size
    return ViTClassifier(network, input_size, resize)
