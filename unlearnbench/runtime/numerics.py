"""The numerics identity: everything outside the config that changes a model's float trajectory.

Training the same config twice on one machine gives bit-identical weights; on another CPU model, another vector
instruction set, another thread count or another GPU it gives another model (reductions are summed in another order,
other kernels are chosen, and a few ulps early on grow into other weights after a few epochs). So the identity is
part of every cache key, recorded in `result.json`, and the report warns when one sweep mixes identities: a cache
shared by a heterogeneous cluster never serves one machine's model as another's.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import torch

# Instruction-set extensions that decide which kernels MKL, oneDNN, OpenBLAS and PyTorch's own vectorised code run
# (x86 flags as /proc/cpuinfo spells them, then Arm's `Features`).
ISA_FLAGS = frozenset({
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimddp", "asimdhp", "fphp", "sve", "sve2", "bf16", "i8mm", "sme",
})

# Environment variables that make the libraries choose other kernels (capping the instruction set, MKL's conditional
# numerical reproducibility): those set enter the identity.
KERNEL_ENVIRONMENT = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                      "MKL_CBWR", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")


@cache
def cpu_identity() -> dict:
    """Vendor, model and the kernel-selecting instruction sets of this CPU (the first core's; cores of one machine
    agree). A hypervisor may call different generations by one name ("AMD EPYC"): the family, model number and
    flags tell them apart."""
    fields = _proc_cpuinfo()
    name = fields.get("model name") or _sysctl("machdep.cpu.brand_string") or platform.processor() or "unknown"
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {
        "cpu": " ".join(name.split()),
        "cpu_vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
        "cpu_family_model": "/".join(fields[k] for k in ("cpu family", "model", "CPU part") if k in fields) or None,
        "cpu_isa": sorted(flags & ISA_FLAGS),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the level PyTorch's own kernels dispatch to
        "machine": platform.machine(),
    }


def _proc_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (Linux), or nothing."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _sysctl(name: str) -> str | None:
    if platform.system() != "Darwin":
        return None
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def device_identity(device: torch.device) -> dict:
    """The accelerator the model is trained on: a GPU by name, compute capability and libraries; the CPU by
    model, instruction sets and the thread count (a CPU reduction's order follows the threads)."""
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        return {"device": "cuda", "gpu": properties.name, "capability": f"{properties.major}.{properties.minor}",
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    if device.type == "cpu":
        return {"device": "cpu", **cpu_identity(), "threads": torch.get_num_threads()}
    return {"device": device.type, "machine": platform.machine(), "platform": platform.platform()}


def numerics_identity(device: torch.device, precision: str, world_size: int = 1, strategy: str = "single") -> dict:
    """The identity of this process's float trajectory, with a short `id` (a hash of the rest) to compare by.

    Call it after the job's determinism switches are set (`configure_determinism`): it reads the live thread count,
    deterministic-algorithms flag and float32 matmul precision.
    """
    identity = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        **device_identity(device),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "precision": precision,
        "strategy": strategy,
        "world_size": world_size,
        "environment": {name: os.environ[name] for name in KERNEL_ENVIRONMENT if name in os.environ},
    }
    return {"id": numerics_id(identity), **identity}


def numerics_id(identity: dict) -> str:
    """12 hex digits of the sha256 of the identity's canonical JSON (without an `id` it may already hold)."""
    fields = {k: v for k, v in identity.items() if k != "id"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]
