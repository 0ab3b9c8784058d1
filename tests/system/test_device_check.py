"""The prepared GPU check (`benchmarks/device_check.py`) run on the CPU: a mode that runs here passes, modes that
need a GPU or a package say CANNOT with the job's reason, and the Markdown table holds the same rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO


@pytest.mark.processes
def test_the_device_check_says_pass_or_cannot_with_the_reason(tmp_path):
    out = tmp_path / "check.md"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "device_check.py"), "--accelerator", "cpu",
                          "--precisions", "32-true,16-mixed", "--strategies", "deepspeed_stage_2", "--images", "12",
                          "--no-throughput", "--text-cases", "qlora,fsdp", "--text-precision", "32-true",
                          "--out", str(out)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    rows = {line.split("  ")[0].strip(): line for line in run.stdout.splitlines() if "  " in line}
    assert "PASS" in rows["precision 32-true"], run.stdout + run.stderr[-2000:]
    assert "CANNOT" in rows["precision 16-mixed"] and "needs a CUDA GPU" in rows["precision 16-mixed"]
    strategy = rows["strategy deepspeed_stage_2 (1 rank, bf16-mixed)"]
    assert "CANNOT" in strategy and "needs" in strategy
    assert "CANNOT" in rows["NVML utilisation"] and "no GPU" in rows["NVML utilisation"]
    qlora = rows["text qlora (nf4)"]  # LoRA on a 4-bit base needs bitsandbytes' CUDA kernels
    assert "CANNOT" in qlora and "bitsandbytes" in qlora and "a CUDA GPU" in qlora
    fsdp = rows["text fsdp (1 rank, 32-true)"]  # the text job under FSDP: its strategy's own line
    assert "CANNOT" in fsdp and "strategy fsdp needs a CUDA GPU" in fsdp
    assert run.returncode == 0 and "device check: 1 passed, 0 failed, 5 cannot run here" in run.stdout
    table = out.read_text()
    assert "| precision 16-mixed | CANNOT |" in table and "| precision 32-true | PASS |" in table
