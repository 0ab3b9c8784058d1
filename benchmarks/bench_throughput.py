"""Training and evaluation throughput of the CIFAR ResNet18 recipe: unlearnbench's own loops against a minimal raw
PyTorch loop written here, in one run, with the ratio.

Both sides get the same fabricated CIFAR-shaped data (uint8, 3 × 32 × 32, 10 classes) already on the device, the
same model, batch (64, the recipe's), augmentation (4-pixel crop, flip, ±15° rotation, on the device), precision and
memory layouts (unlearnbench's choices for the device). The raw loop is the floor: no Fabric, no scheduler, no
bookkeeping. unlearnbench's evaluation uses its own batch for the device (`evaluation.batch_size` null); the raw
evaluation uses the same. Each figure is the median of `--repeats` timed passes after one warm-up.

`--layouts` adds the measurement behind the layout choices: the raw loop with the model (training) and the inputs
(evaluation) in both memory layouts. On a GPU the table
also gives the achieved TFLOP/s (FLOPs counted by PyTorch for one forward and backward pass; 3.33 GFLOP per image at
width 64) against the device's bf16 peak, and the raw loop under `torch.compile`.

The text task's table does the same for fine-tuning a tiny Llama on the built-in TOFU-format data: the product's
`text.train.fine_tune` against a raw Hugging Face/PyTorch loop on the same model, items, batch and precision, in
tokens/s.

Target on a CPU: ratios ≥ 0.9. Run with `make bench` (about 4 minutes on 2 cores) or directly:
    python benchmarks/bench_throughput.py --widths 16 --precisions 32-true --repeats 5
The smallest run (seconds, for a test that the script runs to its end; its ratios mean little):
    python benchmarks/bench_throughput.py --widths 8 --precisions 32-true --repeats 1 --seconds 0 --hiddens 32 \
        --entities 4
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from omegaconf import OmegaConf

from unlearnbench.runtime.fabric import quiet_known_warnings
from unlearnbench.tasks.image.data.base import ImageData, full_pool
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.evaluate import channels_last_inputs, evaluation_batch_size, predict
from unlearnbench.tasks.image.models.resnet import ResNet18
from unlearnbench.tasks.image.models.store import training_channels_last
from unlearnbench.tasks.image.train import train_recipe

TARGET_RATIO = 0.9
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
# dense bf16 tensor-core peaks (TFLOP/s) from the vendors' data sheets, by a substring of the device name
BF16_PEAK = {"H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 756.0, "A100": 312.0, "L40S": 362.0,
             "L4": 121.0, "A10": 125.0, "RTX 4090": 165.0, "RTX 3090": 71.0}
RECIPE = {"epochs": 1, "batch_size": 64, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4, "warmup_epochs": 1,
          "milestones": [8], "gamma": 0.2, "optimizer": "sgd", "schedule": "step",
          "augment": {"crop_padding": 4, "flip": True, "rotation": 15.0}}


@dataclass
class Setting:
    width: int
    precision: str
    channels_last: bool
    train_images: int  # per pass; chosen by `calibrated_images`
    eval_images: int
    eval_batch: int
    eval_channels_last: bool  # the inputs' layout in evaluation


def fabricated(n_train: int, n_test: int, device: torch.device) -> ImageData:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n_train + n_test, 3, 32, 32), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (n_train + n_test,), generator=generator)
    return ImageData("bench", images[:n_train], labels[:n_train], images[n_train:], labels[n_train:],
                     [str(k) for k in range(10)], MEAN, STD).to(device)


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(run: Callable[[], None], device: torch.device, repeats: int) -> float:
    run()  # warm-up: allocator, kernels' first calls, compilation
    times = []
    for _ in range(repeats):
        synchronise(device)
        start = time.perf_counter()
        run()
        synchronise(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def new_model(setting: Setting, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = ResNet18(10, 3, width=setting.width).to(device)
    return model.to(memory_format=torch.channels_last) if setting.channels_last else model


# ---------------------------------------------------------------------------------------------------- unlearnbench


def unlearnbench_loops(setting: Setting, fabric: Fabric, data: ImageData) -> tuple[Callable, Callable]:
    recipe = OmegaConf.create(RECIPE)
    normalizer = Normalizer(MEAN, STD)
    train_pool, test_pool = full_pool(data, "train"), full_pool(data, "test")
    model = new_model(setting, fabric.device)

    def train() -> None:
        train_recipe(fabric, model, train_pool, recipe, normalizer, torch.Generator().manual_seed(1))

    def evaluate() -> None:
        predict(fabric, model, test_pool, setting.eval_batch, normalizer)

    return train, evaluate


# -------------------------------------------------------------------------------------------------------- raw loop


def raw_augment(x: torch.Tensor, padding: int = 4, degrees: float = 15.0) -> torch.Tensor:
    """Random crop (integer shift), flip and rotation as one affine resampling, parameters drawn on the device."""
    n, _, h, w = x.shape
    shift = torch.randint(-padding, padding + 1, (n, 2), device=x.device).float()
    sign = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0)
    angle = (torch.rand(n, device=x.device) * 2 - 1) * math.radians(degrees)
    cos, sin = angle.cos(), angle.sin()
    theta = torch.stack([torch.stack([sign * cos, -sign * sin, 2 * shift[:, 0] / w], 1),
                         torch.stack([sin, cos, 2 * shift[:, 1] / h], 1)], 1)
    grid = F.affine_grid(theta, [n, 3, h, w], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def autocast(precision: str, device: torch.device):
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def raw_loops(setting: Setting, data: ImageData, compiled: bool = False) -> tuple[Callable, Callable]:
    device = data.device
    model = new_model(setting, device)
    forward = torch.compile(model) if compiled else model
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    images, labels = data.train_images, data.train_labels
    batch = RECIPE["batch_size"]

    def train() -> None:
        model.train()
        order = torch.randperm(len(images), device=device)
        for start in range(0, len(images) - batch + 1, batch):
            index = order[start:start + batch]
            x = (raw_augment(images[index].float().div_(255)) - mean) / std
            with autocast(setting.precision, device):
                loss = F.cross_entropy(forward(x).float(), labels[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate() -> None:
        model.eval()
        outputs = []
        for start in range(0, len(data.test_images), setting.eval_batch):
            x = (data.test_images[start:start + setting.eval_batch].float().div_(255) - mean) / std
            if setting.eval_channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast(setting.precision, device):
                outputs.append(forward(x).float())
        torch.cat(outputs).cpu()

    return train, evaluate


# ----------------------------------------------------------------------------------------------------------- table


def flops_per_image(width: int, device: torch.device) -> float:
    """FLOPs of one forward and backward pass of one 32 × 32 image, as PyTorch's FLOP counter counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    model = ResNet18(10, 3, width=width).to(device)
    x = torch.randn(2, 3, 32, 32, device=device)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops() / 2


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AVX-512 BF16 or AMX), from /proc/cpuinfo's flags."""
    from unlearnbench.runtime.numerics import cpu_identity

    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_identity()["cpu_isa"]))


def bf16_peak(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK.items() if key in name), None)


def measure(setting: Setting, device: torch.device, repeats: int, compiled: bool) -> list[dict]:
    fabric = Fabric(accelerator=device.type, devices=1, precision=setting.precision)
    data = fabricated(setting.train_images, setting.eval_images, device)
    rows = []
    ours_train, ours_eval = unlearnbench_loops(setting, fabric, data)
    raw_train, raw_eval = raw_loops(setting, data)
    sides = {"train": (ours_train, raw_train, setting.train_images), "eval": (ours_eval, raw_eval, setting.eval_images)}
    for stage, (ours, raw, n) in sides.items():
        ours_rate = n / median_seconds(ours, device, repeats)
        raw_rate = n / median_seconds(raw, device, repeats)
        rows.append({"stage": stage, "setting": setting, "ours": ours_rate, "raw": raw_rate})
    if compiled:
        compiled_train, compiled_eval = raw_loops(setting, data, compiled=True)
        for row, run, n in ((rows[0], compiled_train, setting.train_images),
                            (rows[1], compiled_eval, setting.eval_images)):
            row["compiled"] = n / median_seconds(run, device, repeats)
    return rows


def calibrated_images(setting: Setting, device: torch.device, seconds: float) -> int:
    """Training images for a pass of about `seconds` (whole batches, 2 to 256 of them), from the raw loop's rate on
    two batches: bf16 on a CPU without bf16 instructions runs 10-30× slower than float32. `seconds` 0: two batches,
    with no calibration."""
    batch = RECIPE["batch_size"]
    if seconds <= 0:
        return 2 * batch
    train, _ = raw_loops(Setting(**{**setting.__dict__, "train_images": 2 * batch}),
                         fabricated(2 * batch, batch, device))
    rate = 2 * batch / median_seconds(train, device, 1)
    return batch * min(256, max(2, round(rate * seconds / batch)))


def layout_rows(setting: Setting, device: torch.device, repeats: int) -> list[tuple[str, float, float]]:
    """Raw-loop images/s in the standard (NCHW) and channels_last layouts, training and evaluation."""
    data = fabricated(setting.train_images, setting.eval_images, device)
    rates = {}
    for channels_last in (False, True):
        layout = {"channels_last": channels_last, "eval_channels_last": channels_last}
        train, evaluate = raw_loops(Setting(**{**setting.__dict__, **layout}), data)
        rates[channels_last] = (setting.train_images / median_seconds(train, device, repeats),
                                setting.eval_images / median_seconds(evaluate, device, repeats))
    return [(stage, rates[False][k], rates[True][k]) for k, stage in enumerate(("train", "eval"))]


def text_setting(hidden: int, device: torch.device, entities: int = 20):
    """The text task's fine-tuning on the built-in data (`entities` fictitious entities and as many general
    questions): the tokenizer, its encoded items and a fresh tiny Llama."""
    from unlearnbench.tasks.text.data.records import fictitious
    from unlearnbench.tasks.text.model.causal_lm import CausalLM

    data = fictitious(entities=entities, holdout_entities=2, general=entities, seed=0)
    lm = CausalLM(hidden=hidden, heads=4)
    tokenizer = lm.tokenizer(data.texts())
    encoder = lm.encoder(tokenizer)
    items = [encoder.item(r["question"], r["answer"]) for r in data.full + data.real_authors + data.world_facts]
    return lm, tokenizer, encoder, items


def text_rows(hidden: int, precision: str, device: torch.device, repeats: int, epochs: int,
              entities: int = 20) -> tuple[float, float]:
    """(unlearnbench's fine-tuning, a raw HF/PyTorch loop) in tokens/s: the same tiny Llama, items, batch (16, the
    built-in recipe's), AdamW with weight decay, linear schedule and gradient clipping, precision; the raw loop
    pads each batch to its longest, computes the answer-only token-mean NLL and steps, and nothing else."""
    from types import SimpleNamespace

    from unlearnbench.tasks.text.model.encoding import collate
    from unlearnbench.tasks.text.model.losses import token_mean_nll
    from unlearnbench.tasks.text.model.train import Items, fine_tune

    lm, tokenizer, encoder, items = text_setting(hidden, device, entities)
    recipe = SimpleNamespace(epochs=epochs, batch_size=16, lr=3e-3, weight_decay=0.01, warmup_epochs=1.0)
    tokens = epochs * sum(len(item["input_ids"]) for item in items)
    fabric = Fabric(accelerator=device.type, devices=1, precision=precision)

    def ours() -> None:
        model = lm.new(tokenizer, 0)
        fine_tune(fabric, model, Items(fabric, items, encoder.pad_id), recipe, torch.Generator().manual_seed(0))

    def raw() -> None:
        model = lm.new(tokenizer, 0).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
        steps = epochs * math.ceil(len(items) / recipe.batch_size)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / steps)
        generator = torch.Generator().manual_seed(0)
        for _ in range(epochs):
            order = torch.randperm(len(items), generator=generator).tolist()
            for start in range(0, len(items), recipe.batch_size):
                batch = collate([items[i] for i in order[start:start + recipe.batch_size]], encoder.pad_id)
                batch = {k: v.to(device) for k, v in batch.items()}
                with autocast(precision, device):
                    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                loss = token_mean_nll(logits, batch["labels"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()

    return tokens / median_seconds(ours, device, repeats), tokens / median_seconds(raw, device, repeats)


def text_table(device: torch.device, precisions: str, repeats: int, hiddens: str, entities: int = 20) -> int:
    """The text task's fine-tuning throughput table; the number of ratios below the target."""
    print(f"\ntext task: tiny Llama fine-tuning on the built-in data (batch 16), tokens/s, median of {repeats}; "
          f"ratio = unlearnbench / raw HF loop (target ≥ {TARGET_RATIO})\n")
    print(f"{'hidden':>6} {'precision':11} {'unlearnbench':>12} {'raw loop':>9} {'ratio':>6}")
    failures = 0
    for hidden in map(int, hiddens.split(",")):
        for precision in precisions.split(","):
            ours, raw = text_rows(hidden, precision, device, repeats, epochs=2, entities=entities)
            failures += ours / raw < TARGET_RATIO
            print(f"{hidden:>6} {precision:11} {ours:>12.0f} {raw:>9.0f} {ours / raw:>6.2f}"
                  + ("" if ours / raw >= TARGET_RATIO else "  below target"), flush=True)
    return failures


def bench_throughput() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="16,64", help="ResNet18 widths (64: the reference)")
    parser.add_argument("--precisions", default=None,
                        help="default: 32-true,bf16-mixed (bf16-mixed left out on a CPU without bf16 instructions)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per figure (the median is shown)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="about how long one timed training pass takes (0: two batches, the smallest pass)")
    parser.add_argument("--accelerator", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--layouts", action="store_true", help="also time the raw loop in both memory layouts")
    parser.add_argument("--compile", action="store_true", help="also the raw loop under torch.compile (GPU default)")
    parser.add_argument("--tasks", default="image,text", help="image (the ResNet18 recipe), text (a tiny Llama)")
    parser.add_argument("--hiddens", default="64,256", help="the text task's Llama widths (64: the CPU default)")
    parser.add_argument("--entities", type=int, default=20, help="the text task's built-in data: entities (default 20)")
    args = parser.parse_args()
    if args.entities < 2 or args.repeats < 1:
        parser.error(f"--entities must be ≥ 2 and --repeats ≥ 1; got {args.entities} and {args.repeats}")
    quiet_known_warnings()
    device = torch.device("cuda" if args.accelerator in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    gpu = device.type == "cuda"
    if not gpu:
        torch.set_num_threads(torch.get_num_threads())
    compiled = args.compile or gpu
    precisions = args.precisions or ("32-true,bf16-mixed" if gpu or native_bf16() else "32-true")
    peak = bf16_peak(device)
    name = torch.cuda.get_device_name(device) if gpu else f"CPU, {torch.get_num_threads()} threads"
    print(f"CIFAR ResNet18 recipe (batch 64, crop+flip+rotation on the device), {name}, torch {torch.__version__}")
    if precisions != (args.precisions or "32-true,bf16-mixed"):
        print("bf16-mixed left out: this CPU has no bf16 instructions (avx512_bf16 or AMX), so bfloat16 runs "
              "emulated, 10-35× slower than float32 (--precisions 32-true,bf16-mixed to time it anyway)")
    print(f"images/s, median of {args.repeats} after a warm-up; ratio = unlearnbench / raw loop (target ≥ "
          f"{TARGET_RATIO})\n")
    header = f"{'stage':6} {'width':>5} {'precision':11} {'model':7} {'eval batch':>10} {'unlearnbench':>12} " \
             f"{'raw loop':>9} {'ratio':>6}"
    extra = f" {'TFLOP/s':>8} {'of peak':>7} {'compiled':>9}" if gpu else ""
    failures = 0
    if "image" in args.tasks:
        print(header + extra)
    for width in map(int, args.widths.split(",") if "image" in args.tasks else []):
        flops = flops_per_image(width, device)
        for precision in precisions.split(","):
            setting = Setting(width, precision, training_channels_last(device.type, None), 0, 0,
                              evaluation_batch_size(device.type), channels_last_inputs(device.type))
            setting.train_images = calibrated_images(setting, device, args.seconds)
            setting.eval_images = 4 * setting.train_images
            for row in measure(setting, device, args.repeats, compiled):
                ratio = row["ours"] / row["raw"]
                failures += ratio < TARGET_RATIO
                line = f"{row['stage']:6} {width:>5} {precision:11} {'NHWC' if setting.channels_last else 'NCHW':7} " \
                       f"{setting.eval_batch if row['stage'] == 'eval' else '':>10} {row['ours']:>12.1f} " \
                       f"{row['raw']:>9.1f} {ratio:>6.2f}"
                if gpu:
                    tflops = row["ours"] * flops / 1e12 if row["stage"] == "train" else row["ours"] * flops / 3e12
                    share = f"{tflops / peak:.0%}" if peak else "?"
                    line += f" {tflops:>8.1f} {share:>7} {row.get('compiled', math.nan):>9.1f}"
                print(line + ("" if ratio >= TARGET_RATIO else "  below target"), flush=True)
            if args.layouts:
                for stage, standard, channels_last in layout_rows(setting, device, args.repeats):
                    faster, ratio = ("channels_last", channels_last / standard) if channels_last > standard else \
                        ("NCHW", standard / channels_last)
                    print(f"  layout {stage:5} raw loop: NCHW {standard:8.1f}, channels_last {channels_last:8.1f} "
                          f"images/s ({faster} faster by {ratio:.2f}×)", flush=True)
    if "text" in args.tasks:
        failures += text_table(device, precisions, args.repeats, args.hiddens, args.entities)
    print(f"\nall ratios ≥ {TARGET_RATIO}" if not failures else f"\n{failures} ratio(s) below {TARGET_RATIO}")


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_throughput)


if __name__ == "__main__":
    main()
