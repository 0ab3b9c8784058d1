"""uint8 batches to normalised float inputs, with batch augmentation on the device from an explicit generator.

Random crop (zero padding), horizontal flip and rotation are all affine maps, so one `affine_grid` + `grid_sample`
applies the three to a whole batch. Their random parameters are drawn on the CPU from the caller's generator, so the
augmentation stream is the same on every device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


class Normalizer:
    """x ↦ (x − mean)/std per channel for images `x` already scaled to [0, 1], on the batch's device."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __call__(self, unit: Tensor) -> Tensor:
        """`unit`: float images in [0, 1]."""
        return (unit - self.mean.to(unit.device)) / self.std.to(unit.device)


def to_unit(images: Tensor) -> Tensor:
    """uint8 images as float32 in [0, 1], in the standard NCHW layout (see `data.base.standard_layout`)."""
    return images.to(torch.float32, memory_format=torch.contiguous_format).div_(255)


def augment(unit: Tensor, generator: torch.Generator, crop_padding: int = 0, flip: bool = False,
            rotation: float = 0.0) -> Tensor:
    """torchvision's RandomCrop(size, padding) → RandomHorizontalFlip → RandomRotation(rotation), batched.

    Pixels that come from outside the image are 0 (black), as with torchvision's default fill. With integer
    shifts only, every output pixel is an input pixel or 0.
    """
    n, _, height, width = unit.shape
    if crop_padding == 0 and not flip and rotation == 0:
        return unit
    shift_x = torch.randint(-crop_padding, crop_padding + 1, (n,), generator=generator).double()
    shift_y = torch.randint(-crop_padding, crop_padding + 1, (n,), generator=generator).double()
    mirror = torch.rand(n, generator=generator) < 0.5 if flip else torch.zeros(n, dtype=torch.bool)
    angle = (torch.rand(n, generator=generator, dtype=torch.float64) * 2 - 1) * math.radians(rotation)
    # Output → input coordinates (normalised, align_corners=False): undo the rotation, then the flip, then the crop.
    cos, sin = torch.cos(angle), torch.sin(angle)
    sign = 1 - 2 * mirror.double()
    theta = torch.stack([
        torch.stack([sign * cos, -sign * sin, 2 * shift_x / width], dim=1),
        torch.stack([sin, cos, 2 * shift_y / height], dim=1),
    ], dim=1)
    grid = F.affine_grid(theta.to(unit.device, unit.dtype), list(unit.shape), align_corners=False)
    return F.grid_sample(unit, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
