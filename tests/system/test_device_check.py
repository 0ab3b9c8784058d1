"""The prepared GPU check (`benchmarks/device_check.py`) run on the CPU: a mode that runs here passes, modes that
need a GPU or a package say CANNOT with the job's reason, and the Markdown table holds the same rows.

The script runs in this process and its jobs in processes forked from the test's fork server (forkserver.py): the
same console-script commands without a fresh interpreter's imports for each of its five jobs."""

from __future__ import annotations

import sys

import pytest
from helpers import REPO, run_forked, script


@pytest.mark.processes
def test_the_device_check_says_pass_or_cannot_with_the_reason(tmp_path, monkeypatch, capsys):
    check = script(REPO / "benchmarks" / "device_check.py")
    out = tmp_path / "check.md"
    monkeypatch.setattr(check, "run", lambda command, timeout: run_forked(command, tmp_path, timeout))
    monkeypatch.setattr(sys, "argv", [
        "device_check.py", "--accelerator", "cpu", "--precisions", "32-true,16-mixed", "--strategies",
        "deepspeed_stage_2", "--images", "12", "--no-throughput", "--text-cases", "qlora,fsdp", "--text-precision",
        "32-true", "--out", str(out)])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        check.main()
    printed = capsys.readouterr()
    rows = {line.split("  ")[0].strip(): line for line in printed.out.splitlines() if "  " in line}
    assert "PASS" in rows["precision 32-true"], printed.out + printed.err[-2000:]
    assert "CANNOT" in rows["precision 16-mixed"] and "needs a CUDA GPU" in rows["precision 16-mixed"]
    strategy = rows["strategy deepspeed_stage_2 (1 rank, bf16-mixed)"]
    assert "CANNOT" in strategy and "needs" in strategy
    assert "CANNOT" in rows["NVML utilisation"] and "no GPU" in rows["NVML utilisation"]
    qlora = rows["text qlora (nf4)"]  # LoRA on a 4-bit base needs bitsandbytes' CUDA kernels
    assert "CANNOT" in qlora and "bitsandbytes" in qlora and "a CUDA GPU" in qlora
    fsdp = rows["text fsdp (1 rank, 32-true)"]  # the text job under FSDP: its strategy's own line
    assert "CANNOT" in fsdp and "strategy fsdp needs a CUDA GPU" in fsdp
    assert exited.value.code == 0 and "device check: 1 passed, 0 failed, 5 cannot run here" in printed.out
    table = out.read_text()
    assert "| precision 16-mixed | CANNOT |" in table and "| precision 32-true | PASS |" in table
