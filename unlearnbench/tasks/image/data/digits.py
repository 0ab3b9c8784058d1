"""scikit-learn's digits (1,797 greyscale 8×8 images, shipped with scikit-learn): the built-in default dataset."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits  # here, not in `load`: a forkserver's preload then holds it

from unlearnbench.runtime.errors import invalid
from unlearnbench.tasks.image.data.base import ImageData, ImageSource


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test indices: round(test_fraction · n_c) test samples of every class c, drawn with `seed`."""
    rng = np.random.Generator(np.random.PCG64(seed))
    test = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        test.append(rng.permutation(members)[: round(test_fraction * len(members))])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(labels)), test_idx)
    return train_idx, test_idx


class Digits(ImageSource):
    """Values 0–16 are scaled to uint8 0–255; the train/test split is fixed by `split_seed` and stratified."""

    def __init__(self, test_fraction: float = 0.2, split_seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(test_fraction, int | float) or not 0 < test_fraction < 1:
            raise invalid("test_fraction", f"dataset {self.name}", "in (0, 1) (at 0 or 1 the train or the test pool "
                          "would be empty)", test_fraction)
        self.test_fraction = test_fraction
        self.split_seed = split_seed

    def load(self) -> ImageData:
        digits = load_digits()
        images = np.round(digits.images * (255 / 16)).astype(np.uint8)[:, None]  # N × 1 × 8 × 8
        labels = digits.target.astype(np.int64)
        train_idx, test_idx = stratified_split(labels, self.test_fraction, self.split_seed)
        return self.build(
            torch.from_numpy(images[train_idx]), torch.from_numpy(labels[train_idx]),
            torch.from_numpy(images[test_idx]), torch.from_numpy(labels[test_idx]),
            [str(name) for name in digits.target_names],
        )
