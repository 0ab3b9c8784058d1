"""Images from two NumPy files: ROOT/train.npz and ROOT/test.npz.

Each file holds `images` (uint8, N × H × W for greyscale or N × C × H × W) and `labels` (integers 0 … K−1);
train.npz also holds `classes`, the K class names.
"""

from __future__ import annotations

import numpy as np
import torch

from unlearnbench.tasks.image.data.base import ImageData, ImageSource


class NpzImages(ImageSource):
    def load(self) -> ImageData:
        train_file, test_file = self.root / "train.npz", self.root / "test.npz"
        # One line naming the missing file, its folder and where to get it, instead of a traceback.
        self.require([train_file, test_file], "write them with numpy.savez (see make_npz.py)")
        with np.load(train_file) as train, np.load(test_file) as test:
            classes = [str(name) for name in train["classes"]]
            pools = [with_channel(train["images"]), train["labels"], with_channel(test["images"]), test["labels"]]
        return self.build(*[torch.from_numpy(np.asarray(array)) for array in pools], classes)


def with_channel(images: np.ndarray) -> np.ndarray:
    """N × H × W greyscale images as N × 1 × H × W."""
    return images[:, None] if images.ndim == 3 else images
