"""The image task's own options (`core.config.task_options`): the batch augmentation of its training recipe, its
membership-inference attacks' sizes, the examples it keeps of D_r and D'_r, and model=vit's weights. A job of
another task has none of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from unlearnbench.core.config import AT_LEAST_0, AT_LEAST_1, Evaluation, Paths, Range, TrainRecipe, ranged, task_options


@dataclass
class Augment:
    """Batch augmentation on the device: random crop with zero padding, horizontal flip, rotation (degrees)."""

    crop_padding: int = ranged(4, AT_LEAST_0)
    flip: bool = True
    rotation: float = ranged(15.0, Range(0, 180))


@dataclass
class ImageTrain(TrainRecipe):
    augment: Augment = field(default_factory=Augment)


@dataclass
class ImageEvaluation(Evaluation):
    mia_max_members: int = ranged(10000, AT_LEAST_1)  # the MIA attacker sees at most this many retain samples
    mia_loss_folds: int = ranged(5, Range(low=2))  # cross-validation needs two folds at least
    examples_per_split: int = ranged(1000, AT_LEAST_0)  # of D_r and of D'_r (D_f is always whole)


@dataclass
class ImagePaths(Paths):
    # model=vit's weights (a directory, or a hub id already in the local Hugging Face cache); a sweep over both models
    # sets it here, since resnet18 has no `model.pretrained`
    vit_weights: str = "${oc.env:UNLEARNBENCH_VIT_WEIGHTS,google/vit-base-patch16-224}"


task_options("image", train=ImageTrain, evaluation=ImageEvaluation, paths=ImagePaths)
