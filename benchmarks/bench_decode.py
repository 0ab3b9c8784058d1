"""Decode-and-cache throughput of the image-folder datasets (`dataset=image_folder`, `pins`, `caltech101`).

Fabricates a 5,000-image folder tree in a temporary directory (50 classes × 100 JPEG face-crop-sized images, 250 ×
250 RGB, as Pins' crops), then loads it twice at 32 × 32: the first load decodes every file and writes the decode
cache, the second reads the cache only (no image file is opened). Run with `make bench`; `--classes` and
`--per-class` set a smaller tree.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from unlearnbench.tasks.image.data.folders import ImageFolder

CLASSES, PER_CLASS, SIDE = 50, 100, 250


def fabricate(root: Path, classes: int = CLASSES, per_class: int = PER_CLASS) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (SIDE // 10, SIDE // 10, 3), dtype=np.uint8)  # smooth images compress like photos
    for c in range(classes):
        folder = root / f"pins_Person {c}"
        folder.mkdir(parents=True)
        for k in range(per_class):
            noise = rng.integers(-20, 20, base.shape)
            small = np.clip(base.astype(int) + noise, 0, 255).astype(np.uint8)
            Image.fromarray(small).resize((SIDE, SIDE), Image.Resampling.BILINEAR).save(folder / f"{k}.jpg",
                                                                                       quality=90)


def bench_decode() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=CLASSES, help=f"default {CLASSES}")
    parser.add_argument("--per-class", type=int, default=PER_CLASS, help=f"images per class (default {PER_CLASS})")
    args = parser.parse_args()
    if args.classes < 2 or args.per_class < 2:  # a classifier's classes; a train and a test image of each
        parser.error(f"--classes and --per-class must be ≥ 2; got {args.classes} and {args.per_class}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        fabricate(root / "images", args.classes, args.per_class)
        made = time.perf_counter() - start
        count = args.classes * args.per_class
        rows = []
        for run in ("first load (decode, write cache)", "second load (cache only)"):
            source = ImageFolder(name="bench", root=str(root / "images"), prefix="pins_", image_size=32,
                                 cache_dir=str(root / "decoded"))
            start = time.perf_counter()
            data = source.load()
            seconds = time.perf_counter() - start
            assert len(data.train_labels) + len(data.test_labels) == count
            rows.append((run, seconds, count / seconds))
    print(f"decode and cache: {count:,} JPEGs of {SIDE} × {SIDE} to 32 × 32 (fabricated in {made:.1f} s)")
    print(f"| {'load':<34} | {'seconds':>8} | {'images/s':>9} |")
    print(f"|{'-' * 36}|{'-' * 10}|{'-' * 11}|")
    for name, seconds, rate in rows:
        print(f"| {name:<34} | {seconds:>8.2f} | {rate:>9,.0f} |")


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_decode)


if __name__ == "__main__":
    main()
