"""Write data/npz_digits/{train,test}.npz from scikit-learn's digits: the files NpzImages reads."""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
images = np.round(digits.images * (255 / 16)).astype(np.uint8)  # N × 8 × 8, values 0 … 255
labels = digits.target.astype(np.int64)
test = np.random.default_rng(0).permutation(len(labels))[: len(labels) // 5]
is_test = np.isin(np.arange(len(labels)), test)
folder = Path("data/npz_digits")
folder.mkdir(parents=True, exist_ok=True)
classes = np.array([str(name) for name in digits.target_names])
np.savez(folder / "train.npz", images=images[~is_test], labels=labels[~is_test], classes=classes)
np.savez(folder / "test.npz", images=images[is_test], labels=labels[is_test])
print(f"{folder}: {(~is_test).sum()} training and {is_test.sum()} test images")
